"""Latency models of AllReduce: one fitted to the completion times `bench` measures on the
emulated fabric (INC, the host ring, MPI_Allreduce), one for a fabric the user describes.

The bench JSON it reads: ``{"config": {"payload_bytes": P, "window": W, "mtu": M, ...},
"environment": {"machine": {"cores": C}}, "runs": [{"algorithm": "inc"|"ring"|"mpi",
"workers": N, "bytes": S, "times_s": [...], "cpu_s": [...]}, ...]}``.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

ALGORITHMS = ("ring", "tree", "inc")      # what a described fabric predicts
MODELLED = ("inc", "ring", "mpi")         # what the measured model is fitted to
# A call whose wall time is this many times the CPU all its workers used spent most of it with
# every worker idle, waiting for a timer (a retransmission, a delayed ack): not a cost the model
# counts, so such points are left out of the fit and reported as unexplained.
STALL_RATIO = 3.0
# Open MPI's TCP transport sends a message up to btl_tcp_eager_limit (64 KiB) at once; a larger
# one waits for the receiver's go-ahead and moves in pipelined fragments (rendezvous).
MPI_EAGER_BYTES = 64 << 10
TCP_IP_HEADERS = 52                       # IPv4 20 + TCP 20 + timestamps 12: MSS = MTU - 52


@dataclass(frozen=True)
class Setup:
    """What the counts depend on besides N and S: the measured protocol and machine."""
    payload_bytes: int        # tensor bytes per INC packet and ring chunk
    window: int               # packets in flight per worker
    cores: int = 2            # cores the workers and the switch share
    mtu: int = 1500           # MPI's TCP segments are MTU - 52 bytes

    @classmethod
    def from_bench(cls, bench: dict) -> "Setup":
        config, machine = bench["config"], (bench.get("environment") or {}).get("machine") or {}
        return cls(int(config["payload_bytes"]), int(config.get("window", 16)), int(machine.get("cores") or 2),
                   int(config.get("mtu") or 1500))

    def packets(self, nbytes: float) -> int:
        return max(1, math.ceil(nbytes / self.payload_bytes))

    def segments(self, nbytes: float) -> int:
        return max(1, math.ceil(nbytes / (self.mtu - TCP_IP_HEADERS)))


@dataclass(frozen=True)
class Term:
    """One cost: a time per event, paid `count(N, S, setup)` times per call."""
    name: str
    meaning: str
    count: Callable[[int, int, Setup], float]


CALL = Term("call", "per call: entering the API, the engine's setup, handing back the result",
            lambda n, s, setup: 1.0)
WAKEUPS = Term("wakeups", "per process beyond the cores: the N workers and the switch each wake once per call, "
                          "and all but C of them wait for a core to do so: N + 1 - C",
               lambda n, s, setup: max(0, n + 1 - setup.cores))

TERMS: dict[str, tuple[Term, ...]] = {
    "inc": (
        CALL, WAKEUPS,
        Term("window_packets", "per packet a worker sends in its first window, at once in one batch, and its "
                               "result (switch ingress, N egress replicas, host pack/unpack): N x min(m, W)",
             lambda n, s, setup: n * min(setup.packets(s), setup.window)),
        Term("window_slots", "per slot of the first window: the switch takes one packet of every worker per "
                             "batch and multicasts each result once, so batches scale with slots, not N: "
                             "min(m, W)",
             lambda n, s, setup: min(setup.packets(s), setup.window)),
        Term("paced_packets", "per packet past the first window: sent when a result frees its slot, one "
                              "wake-up and one system call each: N x max(0, m - W)",
             lambda n, s, setup: n * max(0, setup.packets(s) - setup.window)),
    ),
    "ring": (
        CALL, WAKEUPS,
        Term("chunks", "per chunk over all links (sender, two switch passes, receiver, its share of acks): "
                       "2(N-1) x m", lambda n, s, setup: 2 * (n - 1) * setup.packets(s)),
        Term("chained_chunks", "per chunk of the busiest link, whose 2(N-1) steps follow one another: "
                               "2(N-1) x ceil(m/N)",
             lambda n, s, setup: 2 * (n - 1) * math.ceil(setup.packets(s) / n)),
    ),
    "mpi": (
        CALL, WAKEUPS,
        Term("segments", "per TCP segment through the switch and two kernels, over every rank's messages of "
                         "Open MPI's algorithm for N and S (`mpi_messages`): N x sum of ceil(message/MSS)",
             lambda n, s, setup: n * sum(setup.segments(x) for x in mpi_messages(n, s))),
        Term("rendezvous_segments", f"per segment of a message past the eager limit ({MPI_EAGER_BYTES >> 10} KiB), "
                                    "moved in fragments after a handshake: the same count over those messages",
             lambda n, s, setup: n * sum(setup.segments(x) for x in mpi_messages(n, s) if x > MPI_EAGER_BYTES)),
    ),
}


def mpi_messages(workers: int, nbytes: int) -> list[int]:
    """The bytes a rank sends in each step of the algorithm Open MPI 4.1's fixed decision picks
    for a commutative MPI_Allreduce (coll/tuned): recursive doubling for small messages
    (log2 N steps of S), the ring at N < 4 for mid sizes (2(N-1) steps of S/N), Rabenseifner for
    large ones (recursive halving then doubling: S/2, S/4, ... and back), as it decides for
    N < 16 (larger N: the same shapes); N not a power of two: as the next one up."""
    steps = max(1, math.ceil(math.log2(workers)))
    small = (8 <= nbytes < 4096 or 8192 <= nbytes < 16384) if workers < 4 else nbytes < 8192
    if small:
        return [nbytes] * steps
    if workers < 4 and nbytes < 256 << 10:
        return [math.ceil(nbytes / workers)] * (2 * (workers - 1))
    halves = [math.ceil(nbytes / (2 << k)) for k in range(steps)]
    return halves + halves[::-1]


def counts(algorithm: str, workers: int, nbytes: int, setup: Setup) -> np.ndarray:
    """How often each of `TERMS[algorithm]` is paid in one AllReduce of `nbytes` per worker."""
    if algorithm not in TERMS:
        raise ValueError(f"no measured model of {algorithm!r}; choose from {MODELLED}")
    return np.array([t.count(workers, nbytes, setup) for t in TERMS[algorithm]], float)


@dataclass(frozen=True)
class Point:
    """One measured median; `cpu_s` is all workers' CPU per call, where the bench recorded it."""
    algorithm: str
    workers: int
    nbytes: int
    time_s: float
    cpu_s: float | None = None

    @property
    def stalled(self) -> bool:
        return self.cpu_s is not None and self.time_s > STALL_RATIO * self.cpu_s

    def error(self, predicted_s: float) -> float:
        """|predicted - measured| / measured."""
        return abs(predicted_s - self.time_s) / self.time_s


def points(runs: list[dict]) -> list[Point]:
    """The modelled algorithms' medians."""
    return [Point(r["algorithm"], int(r["workers"]), int(r["bytes"]), float(np.median(r["times_s"])),
                  float(np.median(r["cpu_s"])) if r.get("cpu_s") else None)
            for r in runs if r["algorithm"] in MODELLED]


@dataclass(frozen=True)
class Model:
    """Seconds per event of each algorithm's terms, on the measured machine."""
    setup: Setup
    costs: dict[str, dict[str, float]]       # algorithm -> term name -> seconds per count

    def predict(self, algorithm: str, workers: int, nbytes: int) -> float:
        cost = self.costs[algorithm]
        return float(sum(cost[t.name] * c for t, c in zip(TERMS[algorithm],
                                                            counts(algorithm, workers, nbytes, self.setup))))


def fit(pts: list[Point], setup: Setup) -> Model:
    """Least squares with non-negative costs, per algorithm, over the points that did not stall.

    Time is linear in the costs, so this is a non-negative linear least squares; each point is
    weighted by 1/time so that the fit minimises relative error (small calls count as much as
    large ones). An algorithm with fewer such points than terms is left out.
    """
    costs = {}
    for algorithm, terms in TERMS.items():
        used = [p for p in pts if p.algorithm == algorithm and not p.stalled]
        if len(used) < len(terms):
            continue
        a = np.array([counts(algorithm, p.workers, p.nbytes, setup) for p in used])
        t = np.array([p.time_s for p in used])
        coef, _ = nnls(a / t[:, None], np.ones(len(used)))
        costs[algorithm] = {term.name: float(c) for term, c in zip(terms, coef)}
    if not costs:
        need = ", ".join(f"{len(t)} {a}" for a, t in TERMS.items())
        raise ValueError(f"too few measured points to fit any algorithm (need at least {need} points)")
    return Model(setup, costs)


def errors(model: Model, pts: list[Point]) -> np.ndarray:
    """|predicted - measured| / measured for each point."""
    return np.array([p.error(model.predict(p.algorithm, p.workers, p.nbytes)) for p in pts])


@dataclass(frozen=True)
class Errors:
    points: int
    median: float
    max: float

    @classmethod
    def of(cls, rel: np.ndarray) -> "Errors":
        return cls(len(rel), float(np.median(rel)), float(np.max(rel)))


@dataclass(frozen=True)
class Check:
    """How well one algorithm's model does: on the points it was fitted to, and leaving one
    worker count out (fitted on the others, predicting it), pooled and per held-out N."""
    in_sample: Errors
    out_of_sample: Errors | None           # None: fewer than two worker counts to hold one out
    by_workers: dict[int, Errors]
    held_out: list[tuple[Point, float]]       # each point and its out-of-sample prediction
    stalled: list[Point]


def check(pts: list[Point], model: Model) -> dict[str, Check]:
    # One fit per held-out worker count serves every algorithm: fit() fits each on its own points.
    without: dict[int, Model] = {}
    for n in sorted({p.workers for p in pts}):
        try:
            without[n] = fit([p for p in pts if p.workers != n], model.setup)
        except ValueError:
            pass
    result = {}
    for algorithm in model.costs:
        mine = [p for p in pts if p.algorithm == algorithm]
        used = [p for p in mine if not p.stalled]
        held_out: list[tuple[Point, float]] = []
        by_workers = {}
        for n in sorted({p.workers for p in used}):
            other = without.get(n)
            if other is None or algorithm not in other.costs:
                continue
            tested = [(p, other.predict(algorithm, p.workers, p.nbytes)) for p in used if p.workers == n]
            held_out += tested
            by_workers[n] = Errors.of(np.array([p.error(q) for p, q in tested]))
        pooled = Errors.of(np.array([p.error(q) for p, q in held_out])) if held_out else None
        result[algorithm] = Check(Errors.of(errors(model, used)), pooled, by_workers, held_out,
                                  [p for p in mine if p.stalled])
    return result


# ---- A described fabric: our protocol's own limits on real links and a line-rate switch ----

@dataclass(frozen=True)
class Fabric:
    """A real fabric from its data-sheet numbers, running our protocol.

    alpha_s: latency of one communication step: host send and receive overhead plus two link
        traversals and one switch pipeline (host -> switch -> host).
    bandwidth_Bps: bytes per second one host's link carries (full duplex).
    payload_bytes, window: tensor bytes per packet and packets in flight per sender.
    window_limited: a sender has at most `window` packets of `payload_bytes` in flight per
        round trip (one step for INC, whose result is its ack; two for the ring, a chunk and
        its ack), so it sends at the smaller of the link's rate and window x payload per round trip.
    """
    alpha_s: float
    bandwidth_Bps: float
    payload_bytes: int = 1024
    window: int = 128
    window_limited: bool = True

    @classmethod
    def describe(cls, link_gbps: float, switch_latency_ns: float, host_overhead_us: float,
                 link_latency_ns: float = 100.0, payload_bytes: int = 1024, window: int = 128) -> "Fabric":
        alpha = host_overhead_us * 1e-6 + 2 * link_latency_ns * 1e-9 + switch_latency_ns * 1e-9
        return cls(alpha_s=alpha, bandwidth_Bps=link_gbps * 1e9 / 8, payload_bytes=payload_bytes, window=window)

    def rate_Bps(self, algorithm: str) -> float:
        """Bytes per second a host sends: the link's, or less if the window per round trip caps it."""
        if not self.window_limited:
            return self.bandwidth_Bps
        round_trip = ROUND_TRIP_STEPS.get(algorithm, 1) * self.alpha_s
        return min(self.bandwidth_Bps, self.window * self.payload_bytes / round_trip)


# Steps per round trip that frees window space: INC's result is its ack; a ring chunk's ack
# crosses back (a tree's would too).
ROUND_TRIP_STEPS = {"inc": 1, "ring": 2, "tree": 2}


@dataclass(frozen=True)
class Steps:
    steps: int             # dependent latency steps
    host_bytes: int        # bytes a host sends in sequence


def steps(algorithm: str, workers: int, nbytes: int, payload: int) -> Steps:
    """Ring: 2(N-1) steps, each moving ceil(m/N) of the m packets over every link. Tree: a
    pipelined binary reduce then broadcast, 2 ceil(log2 N) steps; an inner node sends 2S. INC:
    one step; each host sends its m packets and gets m results back."""
    n, m = workers, max(1, math.ceil(nbytes / payload))
    if algorithm == "ring":
        return Steps(2 * (n - 1), 2 * (n - 1) * math.ceil(m / n) * payload)
    if algorithm == "tree":
        return Steps(2 * math.ceil(math.log2(n)), 2 * m * payload)
    if algorithm == "inc":
        return Steps(1, m * payload)
    raise ValueError(f"unknown algorithm {algorithm!r}; choose from {ALGORITHMS}")


def predict(fabric: Fabric, algorithm: str, workers: int, nbytes: int) -> float:
    """Completion time in seconds on a described fabric."""
    s = steps(algorithm, workers, nbytes, fabric.payload_bytes)
    return s.steps * fabric.alpha_s + s.host_bytes / fabric.rate_Bps(algorithm)
