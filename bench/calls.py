"""What one benchmark trial of each collective is, on the switch's agent (hosts.agent.Worker)
and on the host ring (hosts.ring.RingWorker), which answer to the same method names: each
rank's generated input, the call, and the result's check against numpy.

A trial's "bytes" is the collective's whole buffer, as in NCCL's tests: the input of
AllReduce, Reduce, ReduceScatter and Broadcast, the output of AllGather (each rank gives
1/N of it); ReduceScatter and AllGather round it down to a multiple of N elements.
"""
from __future__ import annotations

import numpy as np

from hosts.agent import Worker
from hosts.inc import INC_K
from hosts.numerics import check_sum
from hosts.ring import RingWorker
from hosts.worker import generated_tensor

COLLECTIVES = ("allreduce", "reduce", "reduce-scatter", "broadcast", "all-gather", "barrier")
ROOT = 0          # of reduce and broadcast


def elements(collective: str, nbytes: int, workers: int) -> int:
    """Elements of one rank's input."""
    size = max(1, nbytes // 4)
    if collective == "reduce-scatter":
        return max(1, size // workers) * workers
    if collective == "all-gather":
        return max(1, size // workers)
    return 0 if collective == "barrier" else size


def tensor(trial: dict, rank: int, workers: int) -> np.ndarray:
    return generated_tensor(trial["seed"], rank, elements(trial["collective"], trial["bytes"], workers),
                            trial["dtype"])


def call(collective: str, agent: Worker | RingWorker, array: np.ndarray) -> np.ndarray | None:
    """One call of `collective` on this rank; None where it gives this rank nothing."""
    if collective == "allreduce":
        return agent.allreduce(array)
    if collective == "reduce":
        return agent.reduce(array, ROOT)
    if collective == "reduce-scatter":
        return agent.reduce_scatter(array)
    if collective == "broadcast":
        return agent.broadcast(array, ROOT)
    if collective == "all-gather":
        return agent.all_gather(array)
    agent.barrier()
    return None


def is_right(result: np.ndarray | None, trial: dict, rank: int, workers: int, k: int = INC_K) -> bool:
    """This rank's result against numpy: sums within docs/protocol.md's bound (the switch's for
    chunks of `k` elements, or the hosts' for the ring, hosts.numerics), gathered and broadcast
    data bit for bit."""
    collective = trial["collective"]
    inputs = [tensor(trial, w, workers) for w in range(workers)]
    on_hosts = trial["algorithm"] != "inc"
    if collective == "allreduce" or (collective == "reduce" and rank == ROOT):
        return result is not None and check_sum(result, inputs, on_hosts, k=k).correct
    if collective == "reduce-scatter":
        part = inputs[0].size // workers
        return result is not None and check_sum(result, [x[rank * part:(rank + 1) * part] for x in inputs],
                                                on_hosts, k=k).correct
    if collective == "broadcast":
        return result is not None and _same_bits(result, inputs[ROOT])
    if collective == "all-gather":
        return result is not None and _same_bits(result, np.stack(inputs))
    return result is None          # reduce at a non-root, barrier


def _same_bits(result: np.ndarray, expected: np.ndarray) -> bool:
    return result.dtype == expected.dtype and result.shape == expected.shape and \
        result.tobytes() == expected.tobytes()
