"""Latency model of ring, tree and in-network (INC) AllReduce, for our windowed protocols.

Fitted to the completion times `bench` measures on the emulated fabric, then used to
predict the same curves for a fabric the user describes. The bench JSON it reads:
``{"config": {"payload_bytes": P, "window": W, ...}, "runs": [{"algorithm": "inc"|"ring"|
"mpi", "workers": N, "bytes": S, "times_s": [...]}, ...]}``; MPI runs are measured only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

ALGORITHMS = ("ring", "tree", "inc")
MODELLED = ("inc", "ring")       # the algorithms measured runs are fitted for


@dataclass(frozen=True)
class Fabric:
    """What a completion time is made of, per AllReduce. Every parameter is a time per event
    that `terms` counts; the fit finds them for the measured machine, `describe` sets them for
    a real fabric.

    call_s, worker_s: the fixed cost of a call, call_s + N * worker_s: what a call costs
        beyond its packets (setup, waking N processes that share the machine's cores).
    alpha_s: latency of one communication step: host send and receive overhead plus
        two link traversals and one switch pipeline (host -> switch -> host).
    bandwidth_Bps: bytes per second one host's link carries (full duplex).
    switch_packet_s: CPU time per switch pipeline pass (ingress or one egress replica), with
        the sending and receiving hosts' own per-packet work: on the measured machine the
        switch and N hosts share 2 cores, so the two cannot be told apart and are one cost.
        A hardware switch and NIC run at line rate: 0 there.
    switch_aggregate_s: what an aggregating pass (INC's contribution: register reads and
        writes for every element) costs on top of switch_packet_s; 0 at line rate.
    wakeup_s: one process woken for packets it waits for (a context switch on shared cores):
        a ring receiver once per step it gets chunks in, a sender per ack that frees its window,
        an INC worker once for its first results and once per later result that frees a slot.
    payload_bytes: tensor bytes per packet; window: packets in flight (INC slots, or the
        ring's unacknowledged chunks), which the ring acknowledges every window / 2 chunks.
    window_limited: whether a host's rate is also capped at window x payload per round trip
        (INC's round trip is one step, the ring's a chunk and its ack, two). True for a
        described fabric; False for the measured one, whose CPU costs keep it far below that
        cap (16 x 128 B per ~0.2 ms step is ~10 MB/s, against the ~0.6 MB/s INC reaches).
    """
    alpha_s: float
    bandwidth_Bps: float
    switch_packet_s: float = 0.0
    switch_aggregate_s: float = 0.0
    wakeup_s: float = 0.0
    call_s: float = 0.0
    worker_s: float = 0.0
    payload_bytes: int = 128
    window: int = 16
    window_limited: bool = False

    @classmethod
    def describe(cls, link_gbps: float, switch_latency_ns: float, host_overhead_us: float,
                 link_latency_ns: float = 100.0, payload_bytes: int = 128, window: int = 16) -> "Fabric":
        """A real fabric from its data-sheet numbers, running our protocol: a sender has at
        most `window` packets of `payload_bytes` in flight per round trip, so it sends at the
        smaller of the link's rate and window x payload per round trip."""
        alpha = host_overhead_us * 1e-6 + 2 * link_latency_ns * 1e-9 + switch_latency_ns * 1e-9
        return cls(alpha_s=alpha, bandwidth_Bps=link_gbps * 1e9 / 8, payload_bytes=payload_bytes, window=window,
                   window_limited=True)

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
class Terms:
    """How often each cost of `Fabric` is paid in one AllReduce of one size."""
    calls: int
    workers: int
    steps: int             # dependent latency steps
    host_bytes: int        # bytes a host sends in sequence
    passes: int            # switch pipeline passes, data and acks
    aggregating: int       # of which aggregating (INC's contributions)
    wakeups: int
    chunks: int = 0        # the ring's data chunks and acks over all links (each two passes)
    acks: int = 0

    def as_row(self) -> tuple[float, ...]:
        return (self.calls, self.workers, self.steps, self.host_bytes, self.passes, self.aggregating,
                self.wakeups)


def _packets(nbytes: float, payload: int) -> int:
    return max(1, math.ceil(nbytes / payload))


def terms(algorithm: str, workers: int, nbytes: int, payload: int, window: int = 16) -> Terms:
    """The counts of one AllReduce of `nbytes` per worker, for our protocols (hosts/ring.py,
    hosts/agent.py) with `payload` bytes per packet and `window` packets in flight.

    Ring: 2(N-1) steps. The m chunks are cut into N segments; with m < N only m of them hold
        a chunk and the others send nothing, so a step carries m chunks over min(N, m) links,
        the slowest ceil(m/N). A receiver acks every window/2 in-order chunks, counted over
        the call (a link carries 2(N-1)m/N chunks); the last few wait for the delayed-ack
        timer, after the call. Each chunk and ack is one ingress and one egress pass. Each
        link-step with data wakes its receiver once, and its sender once per ack it waits
        for beyond the first window.
    Tree: a pipelined binary reduce then broadcast over the hosts, 2*ceil(log2 N) steps
        of latency; an inner node takes 2S from its children and sends 2S to them, and
        each of the 2(N-1) tree edges carries S (for comparison on a described fabric only).
    INC: one step; each host sends m packets and gets m back; the switch runs ingress once
        per contribution (aggregating) and egress once per result replica. A worker sends
        its first window at once, then one packet per result that frees a slot.
    """
    n = workers
    m = _packets(nbytes, payload)
    per_ack = max(1, window // 2)
    if algorithm == "ring":
        steps, links, per_link = 2 * (n - 1), min(n, m), math.ceil(m / n)
        acks = n * (steps * m // (n * per_ack))
        link_steps = steps * links
        waits = math.ceil(max(0, per_link - window) / per_ack)
        return Terms(1, n, steps, steps * per_link * payload, 2 * (steps * m + acks), 0,
                     link_steps * (1 + waits), chunks=steps * m, acks=acks)
    if algorithm == "tree":
        return Terms(1, n, 2 * math.ceil(math.log2(n)), 2 * m * payload, 4 * (n - 1) * m, 0, 0)
    if algorithm == "inc":
        return Terms(1, n, 1, m * payload, 2 * n * m, n * m, n * (1 + max(0, m - window)))
    raise ValueError(f"unknown algorithm {algorithm!r}; choose from {ALGORITHMS}")


def predict(fabric: Fabric, algorithm: str, workers: int, nbytes: int) -> float:
    """Completion time in seconds."""
    t = terms(algorithm, workers, nbytes, fabric.payload_bytes, fabric.window)
    return (t.calls * fabric.call_s + t.workers * fabric.worker_s + t.steps * fabric.alpha_s
            + t.host_bytes / fabric.rate_Bps(algorithm) + t.passes * fabric.switch_packet_s
            + t.aggregating * fabric.switch_aggregate_s + t.wakeups * fabric.wakeup_s)


@dataclass(frozen=True)
class Fit:
    fabric: Fabric
    median_abs_rel_error: float      # over the measured points
    max_abs_rel_error: float
    points: int


def modelled(runs: list[dict]) -> list[dict]:
    """The runs the model is fitted to and judged on: INC and ring."""
    return [r for r in runs if r["algorithm"] in MODELLED]


PARAMETERS = 7


def fit(runs: list[dict], payload_bytes: int, window: int = 16) -> Fit:
    """Least squares with non-negative parameters over the INC and ring runs' median times.

    The seven parameters (fixed cost per call and per worker, alpha, 1/bandwidth, time per
    switch pass, the extra of an aggregating pass, per wake-up) are linear
    in the counts of `terms`, so this is a non-negative linear least squares. Each point is
    weighted by 1/time so that small messages count as much as large ones: the fit minimises
    relative error, which is what a speedup plot shows.
    """
    runs = modelled(runs)
    if len(runs) < PARAMETERS:
        raise ValueError(f"need at least {PARAMETERS} measured INC or ring points to fit {PARAMETERS} parameters, "
                         f"got {len(runs)}")
    a = np.array([terms(r["algorithm"], r["workers"], r["bytes"], payload_bytes, window).as_row() for r in runs],
                 float)
    t = np.array([float(np.median(r["times_s"])) for r in runs])
    weights = 1.0 / t
    coef, _ = nnls(a * weights[:, None], t * weights)
    call, worker, alpha, inv_bw, per_pass, per_aggregate, per_wakeup = (float(c) for c in coef)
    fabric = Fabric(alpha_s=alpha, bandwidth_Bps=1.0 / inv_bw if inv_bw > 0 else math.inf,
                    switch_packet_s=per_pass, switch_aggregate_s=per_aggregate, wakeup_s=per_wakeup,
                    call_s=call, worker_s=worker, payload_bytes=payload_bytes, window=window)
    rel = errors(fabric, runs)
    return Fit(fabric, float(np.median(rel)), float(rel.max()), len(runs))


def errors(fabric: Fabric, runs: list[dict]) -> np.ndarray:
    """|predicted - measured median| / measured median for each INC and ring run."""
    runs = modelled(runs)
    t = np.array([float(np.median(r["times_s"])) for r in runs])
    predicted = np.array([predict(fabric, r["algorithm"], r["workers"], r["bytes"]) for r in runs])
    return np.abs(predicted - t) / t


@dataclass(frozen=True)
class HeldOut:
    """The model fitted without one worker count, and its error predicting that count."""
    fabric: Fabric
    median_abs_rel_error: float
    max_abs_rel_error: float


def out_of_sample(runs: list[dict], payload_bytes: int, window: int = 16) -> dict[int, HeldOut]:
    """For each worker count N: fit without N's runs, predict them with `predict`, the same
    function the plots and the described fabric use."""
    result = {}
    for n in sorted({r["workers"] for r in modelled(runs)}):
        held_in = [r for r in runs if r["workers"] != n]
        try:
            fabric = fit(held_in, payload_bytes, window).fabric
        except ValueError:
            continue
        rel = errors(fabric, [r for r in runs if r["workers"] == n])
        result[n] = HeldOut(fabric, float(np.median(rel)), float(rel.max()))
    return result
