"""Alpha-beta latency model of ring, tree and in-network (INC) AllReduce.

Fitted to the completion times `bench` measures on the emulated fabric, then used to
predict the same curves for a fabric the user describes. The bench JSON it reads:
``{"config": {"payload_bytes": P, ...}, "runs": [{"algorithm": "inc"|"ring",
"workers": N, "bytes": S, "times_s": [...]}, ...]}``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

ALGORITHMS = ("ring", "tree", "inc")


@dataclass(frozen=True)
class Fabric:
    """What a completion time is made of, per AllReduce.

    alpha_s: latency of one communication step: host send and receive overhead plus
        two link traversals and one switch pipeline (host -> switch -> host).
    bandwidth_Bps: bytes per second one host can send (and receive, full duplex).
    host_packet_s: time a host spends per packet it sends or receives (a software
        stack's cost; an RDMA NIC hides it in the bandwidth term, so 0 there).
    switch_packet_s: time the switch spends per pipeline pass (ingress or replica);
        a hardware switch runs at line rate, so this is 0 there. It is what bounds
        a software switch such as p4sim.
    payload_bytes: tensor bytes carried per packet.
    """
    alpha_s: float
    bandwidth_Bps: float
    host_packet_s: float = 0.0
    switch_packet_s: float = 0.0
    payload_bytes: int = 128

    @classmethod
    def describe(cls, link_gbps: float, switch_latency_ns: float, host_overhead_us: float,
                 link_latency_ns: float = 100.0, payload_bytes: int = 1024) -> "Fabric":
        """A real fabric from its data-sheet numbers."""
        alpha = host_overhead_us * 1e-6 + 2 * link_latency_ns * 1e-9 + switch_latency_ns * 1e-9
        return cls(alpha_s=alpha, bandwidth_Bps=link_gbps * 1e9 / 8, payload_bytes=payload_bytes)


def _packets(nbytes: float, payload: int) -> int:
    return max(1, math.ceil(nbytes / payload))


def terms(algorithm: str, workers: int, nbytes: int, payload: int) -> tuple[float, float, float, float]:
    """(latency steps, bytes a host sends in sequence, packets a host sends and receives,
    switch pipeline passes) for one AllReduce of `nbytes` per worker.

    Ring: 2(N-1) steps of S/N bytes. Our baseline runs over UDP and acknowledges every
        chunk, so each data packet brings an ack: twice the packets, each one ingress and
        one egress pass.
    Tree: a pipelined binary reduce then broadcast over the hosts, 2*ceil(log2 N) steps
        of latency; an inner node takes 2S from its children and sends 2S to them, and
        each of the 2(N-1) tree edges carries S.
    INC: one step; each host sends S and gets S back; the switch runs ingress once per
        contribution and egress once per result replica.
    """
    n = workers
    if algorithm == "ring":
        steps, per_step = 2 * (n - 1), _packets(nbytes / n, payload)
        # per host: data and acks, each sent and received; at the switch: 2 passes each
        return steps, steps * nbytes / n, 4 * steps * per_step, 4 * steps * n * per_step
    chunks = _packets(nbytes, payload)
    if algorithm == "tree":
        return 2 * math.ceil(math.log2(n)), 2 * nbytes, 4 * chunks, 4 * (n - 1) * chunks
    if algorithm == "inc":
        return 1, nbytes, 2 * chunks, 2 * n * chunks
    raise ValueError(f"unknown algorithm {algorithm!r}; choose from {ALGORITHMS}")


def predict(fabric: Fabric, algorithm: str, workers: int, nbytes: int) -> float:
    """Completion time in seconds."""
    steps, host_bytes, host_packets, passes = terms(algorithm, workers, nbytes, fabric.payload_bytes)
    return (steps * fabric.alpha_s + host_bytes / fabric.bandwidth_Bps
            + host_packets * fabric.host_packet_s + passes * fabric.switch_packet_s)


@dataclass(frozen=True)
class Fit:
    fabric: Fabric
    median_abs_rel_error: float      # over the measured points
    max_abs_rel_error: float
    points: int


def fit(runs: list[dict], payload_bytes: int) -> Fit:
    """Least squares with non-negative parameters over the runs' median times.

    The four parameters (alpha, 1/bandwidth, host and switch time per packet) are
    linear in the terms above, so this is a non-negative linear least squares.

    Each point is weighted by 1/time so that small messages count as much as large
    ones: the fit minimises relative error, which is what a speedup plot shows.
    """
    rows = [terms(r["algorithm"], r["workers"], r["bytes"], payload_bytes) for r in runs]
    medians = [float(np.median(r["times_s"])) for r in runs]
    if len(rows) < 4:
        raise ValueError(f"need at least 4 measured points to fit 4 parameters, got {len(rows)}")
    a, t = np.array(rows, dtype=float), np.array(medians)
    weights = 1.0 / t
    coef, _ = nnls(a * weights[:, None], t * weights)
    alpha, inv_bw, per_host_packet, per_pass = (float(c) for c in coef)
    fabric = Fabric(alpha_s=alpha, bandwidth_Bps=1.0 / inv_bw if inv_bw > 0 else math.inf,
                    host_packet_s=per_host_packet, switch_packet_s=per_pass,
                    payload_bytes=payload_bytes)
    rel = np.abs(a @ coef - t) / t
    return Fit(fabric, float(np.median(rel)), float(rel.max()), len(rows))
