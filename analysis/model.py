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
    """What a completion time is made of, per AllReduce.

    call_s, worker_s: the fixed cost of a call, call_s + N * worker_s: what a call costs
        beyond its packets (setup, waking N processes that share the machine's cores).
    alpha_s: latency of one communication step: host send and receive overhead plus
        two link traversals and one switch pipeline (host -> switch -> host).
    bandwidth_Bps: bytes per second one host sends (and receives, full duplex).
    host_packet_s: time a host spends per packet it sends or receives (a software
        stack's cost; an RDMA NIC hides it in the bandwidth term, so 0 there).
    switch_packet_s: time the switch spends per pipeline pass (ingress or replica);
        a hardware switch runs at line rate, so this is 0 there. It is what bounds
        a software switch such as p4sim.
    switch_aggregate_s: what an aggregating pass (INC's contribution: register reads and
        writes for every element) costs on top of switch_packet_s; 0 at line rate.
    payload_bytes: tensor bytes per packet; window: packets in flight (INC slots, or the
        ring's unacknowledged chunks), which the ring acknowledges every window / 2 chunks.
    """
    alpha_s: float
    bandwidth_Bps: float
    host_packet_s: float = 0.0
    switch_packet_s: float = 0.0
    switch_aggregate_s: float = 0.0
    call_s: float = 0.0
    worker_s: float = 0.0
    payload_bytes: int = 128
    window: int = 16

    @classmethod
    def describe(cls, link_gbps: float, switch_latency_ns: float, host_overhead_us: float,
                 link_latency_ns: float = 100.0, payload_bytes: int = 128, window: int = 16) -> "Fabric":
        """A real fabric from its data-sheet numbers, running our protocol: a sender has at
        most `window` packets of `payload_bytes` in flight per round trip, so its bandwidth
        is the smaller of the link's and window x payload / RTT."""
        alpha = host_overhead_us * 1e-6 + 2 * link_latency_ns * 1e-9 + switch_latency_ns * 1e-9
        bandwidth = min(link_gbps * 1e9 / 8, window * payload_bytes / alpha)
        return cls(alpha_s=alpha, bandwidth_Bps=bandwidth, payload_bytes=payload_bytes, window=window)


def _packets(nbytes: float, payload: int) -> int:
    return max(1, math.ceil(nbytes / payload))


def terms(algorithm: str, workers: int, nbytes: int, payload: int, window: int = 16) -> tuple[float, ...]:
    """(calls, workers, latency steps, bytes a host sends in sequence, packets a host sends
    and receives in sequence, switch pipeline passes, of which aggregating) for one AllReduce
    of `nbytes` per worker.

    Ring: 2(N-1) steps; a step's slowest link carries ceil(m/N) of the m chunks, and all
        links together carry m chunks per step (fewer than N chunks leave segments empty,
        which send nothing). Acks are cumulative, one per window/2 chunks of a link (at
        least one per step that carried data); each packet is one ingress and one egress pass.
    Tree: a pipelined binary reduce then broadcast over the hosts, 2*ceil(log2 N) steps
        of latency; an inner node takes 2S from its children and sends 2S to them, and
        each of the 2(N-1) tree edges carries S.
    INC: one step; each host sends m packets and gets m back; the switch runs ingress once
        per contribution (aggregating) and egress once per result replica.
    """
    n = workers
    m = _packets(nbytes, payload)
    if algorithm == "ring":
        steps, per_link = 2 * (n - 1), math.ceil(m / n)
        acks_per_link = math.ceil(per_link / max(1, window // 2))
        host_packets = 2 * steps * (per_link + acks_per_link)           # sent and received
        passes = 2 * steps * (m + min(n, m) * acks_per_link)
        return 1, n, steps, steps * per_link * payload, host_packets, passes, 0
    if algorithm == "tree":
        return 1, n, 2 * math.ceil(math.log2(n)), 2 * m * payload, 4 * m, 4 * (n - 1) * m, 0
    if algorithm == "inc":
        return 1, n, 1, m * payload, 2 * m, 2 * n * m, n * m
    raise ValueError(f"unknown algorithm {algorithm!r}; choose from {ALGORITHMS}")


def predict(fabric: Fabric, algorithm: str, workers: int, nbytes: int) -> float:
    """Completion time in seconds."""
    calls, n, steps, host_bytes, host_packets, passes, aggregating = terms(
        algorithm, workers, nbytes, fabric.payload_bytes, fabric.window)
    return (calls * fabric.call_s + n * fabric.worker_s + steps * fabric.alpha_s
            + host_bytes / fabric.bandwidth_Bps + host_packets * fabric.host_packet_s
            + passes * fabric.switch_packet_s + aggregating * fabric.switch_aggregate_s)


@dataclass(frozen=True)
class Fit:
    fabric: Fabric
    median_abs_rel_error: float      # over the measured points
    max_abs_rel_error: float
    points: int


def modelled(runs: list[dict]) -> list[dict]:
    """The runs the model is fitted to and judged on: INC and ring."""
    return [r for r in runs if r["algorithm"] in MODELLED]


def fit(runs: list[dict], payload_bytes: int, window: int = 16) -> Fit:
    """Least squares with non-negative parameters over the INC and ring runs' median times.

    The seven parameters (fixed cost per call and per worker, alpha, 1/bandwidth, host and
    switch time per packet, the extra of an aggregating pass) are linear in the terms above, so this is a non-negative linear
    least squares. Each point is weighted by 1/time so that small messages count as much
    as large ones: the fit minimises relative error, which is what a speedup plot shows.
    """
    runs = modelled(runs)
    if len(runs) < 7:
        raise ValueError(f"need at least 7 measured INC or ring points to fit 7 parameters, got {len(runs)}")
    a = np.array([terms(r["algorithm"], r["workers"], r["bytes"], payload_bytes, window) for r in runs], float)
    t = np.array([float(np.median(r["times_s"])) for r in runs])
    weights = 1.0 / t
    coef, _ = nnls(a * weights[:, None], t * weights)
    call, worker, alpha, inv_bw, per_host_packet, per_pass, per_aggregate = (float(c) for c in coef)
    fabric = Fabric(alpha_s=alpha, bandwidth_Bps=1.0 / inv_bw if inv_bw > 0 else math.inf,
                    host_packet_s=per_host_packet, switch_packet_s=per_pass, switch_aggregate_s=per_aggregate,
                    call_s=call, worker_s=worker,
                    payload_bytes=payload_bytes, window=window)
    rel = errors(fabric, runs)
    return Fit(fabric, float(np.median(rel)), float(rel.max()), len(runs))


def errors(fabric: Fabric, runs: list[dict]) -> np.ndarray:
    """|predicted - measured median| / measured median for each INC and ring run."""
    runs = modelled(runs)
    t = np.array([float(np.median(r["times_s"])) for r in runs])
    predicted = np.array([predict(fabric, r["algorithm"], r["workers"], r["bytes"]) for r in runs])
    return np.abs(predicted - t) / t


def out_of_sample(runs: list[dict], payload_bytes: int, window: int = 16) -> dict[int, tuple[float, float]]:
    """For each worker count N: fit without N's runs, predict them; (median, max) relative error."""
    result = {}
    for n in sorted({r["workers"] for r in modelled(runs)}):
        held_in = [r for r in runs if r["workers"] != n]
        try:
            fabric = fit(held_in, payload_bytes, window).fabric
        except ValueError:
            continue
        rel = errors(fabric, [r for r in runs if r["workers"] == n])
        result[n] = (float(np.median(rel)), float(rel.max()))
    return result
