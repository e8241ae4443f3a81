"""Issue 12, item 1, in Mininet: Reduce, ReduceScatter, Broadcast, AllGather and Barrier run by
p4sim (allreduce.p4) in a star of 4 hosts with 5% random loss on every host link, each worker
a `python -m hosts.worker --collective ...` process; results against numpy (float sums within
docs/protocol.md's bound, everything else exact), and the switch's counters show the rounds.
"""
import numpy as np
import pytest

from hosts.inc import INC_K as K
from tests.hosts.documented import documented_bound, eager_gates
from topologies.fabric import Impairment

pytestmark = [pytest.mark.mininet, pytest.mark.impairment]
FOUR = pytest.mark.parametrize("inc_star", [4], indirect=True, ids=lambda n: f"N{n}")
LOSS = Impairment(loss_pct=5)
# Sizes give every lossy run at least ~300 packets: at 5% loss, P(no drop at all, a run that
# proves nothing) is then below 1e-7, where 100 packets would fail 1 run in 170. They are in
# units of K, so that they keep that count whatever the packet holds.
PART = 10 * K + 5          # elements of each worker's part in ReduceScatter


def tensors(dtype: str, length: int, seed: int, n: int = 4) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == "int32":
        return [rng.integers(-2**24, 2**24, length, dtype=np.int32) for _ in range(n)]
    return [(rng.standard_normal(length) * 10).astype(dtype) for _ in range(n)]


def assert_reduced(got: np.ndarray, inputs: list[np.ndarray], op: str) -> None:
    """Exact for int32, min and max; within the documented bound for float sums."""
    assert got.dtype == inputs[0].dtype
    if op != "sum" or got.dtype == np.int32:
        np.testing.assert_array_equal(got, {"sum": np.sum, "min": np.min, "max": np.max}[op](inputs, axis=0))
    else:
        exact = np.sum(np.array(inputs, np.float64), axis=0)
        assert np.all(np.abs(got.astype(np.float64) - exact) <= documented_bound(inputs))


def run_lossy(star, inputs: list[np.ndarray], *args: str) -> list[np.ndarray]:
    before = star.counters()
    with star.impaired(LOSS):
        results = star.allreduce(inputs, *args)
        dropped = star.fabric.impairment_counts()["drop"]
    assert dropped > 0, "no packet was lost: this run proved nothing"
    after = star.counters()
    assert after["MyIngress.results_multicast"] > before["MyIngress.results_multicast"]
    return results


@FOUR
@pytest.mark.parametrize("dtype, op", [("int32", "sum"), ("float32", "sum"), ("float16", "sum"),
                                       ("float32", "min"), ("int32", "max")])
def test_reduce_scatter_under_loss(inc_star, dtype, op):
    inputs = tensors(dtype, 4 * PART, seed=len(dtype) + len(op))
    results = run_lossy(inc_star, inputs, "--collective", "reduce-scatter", "--op", op)
    for w, got in enumerate(results):
        assert_reduced(got, [x[w * PART:(w + 1) * PART] for x in inputs], op)


@FOUR
@pytest.mark.parametrize("dtype, op", [("float32", "sum"), ("int32", "min")])
def test_reduce_to_a_root_under_loss(inc_star, dtype, op):
    inputs = tensors(dtype, 40 * K, seed=3)
    results = run_lossy(inc_star, inputs, "--collective", "reduce", "--root", "2", "--op", op)
    assert_reduced(results[2], inputs, op)
    assert all(r.size == 0 for w, r in enumerate(results) if w != 2)


@FOUR
@pytest.mark.parametrize("dtype", ["int32", "float32", "float16"])
def test_broadcast_under_loss(inc_star, dtype):
    inputs = tensors(dtype, 40 * K + 1, seed=4)
    for got in run_lossy(inc_star, inputs, "--collective", "broadcast", "--root", "1"):
        assert got.dtype == inputs[1].dtype and got.tobytes() == inputs[1].tobytes()


@FOUR
@pytest.mark.parametrize("dtype", ["int32", "float16"])
def test_all_gather_under_loss(inc_star, dtype):
    # 4 x 21 chunks of words for float16, each delivered to 4 hosts: 5% loss spares all 336 frames
    # once in 10^7 runs (at 10 K + 3 elements, 96 frames: once in 140, which CI met).
    inputs = tensors(dtype, 40 * K + 3, seed=5)
    for got in run_lossy(inc_star, inputs, "--collective", "all-gather"):
        assert got.shape == (4, 40 * K + 3) and got.tobytes() == np.stack(inputs).tobytes()


@FOUR
def test_barrier_under_loss(inc_star):
    before = inc_star.counters()
    results = run_lossy(inc_star, tensors("int32", 1, seed=6), "--collective", "barrier", "--iterations", "40")
    assert all(r.size == 0 for r in results)
    after = inc_star.counters()
    # One round per barrier: 40 completed, every JOIN counted once (4 x 40), and no data.
    assert after["MyIngress.results_multicast"] - before["MyIngress.results_multicast"] == 40
    assert after["MyIngress.contributions"] - before["MyIngress.contributions"] == 4 * 40


@FOUR
@pytest.mark.parametrize("collective, length", [("broadcast", 1001), ("all-gather", 333)])
def test_eager_rounds_under_loss_add_only_the_roots_chunks_and_the_gates(inc_star, collective, length):
    """--eager-rounds, 5 calls per worker process under 5% loss: the first call's results say that
    the switch runs eager rounds, so the other four take each chunk from its root alone but for
    the gates. The switch adds N m packets for the first call and m + (N - 1) G for each other
    (docs/protocol.md, "Packets per collective"; a lost packet's copy is added once, requests
    and repeats never), and the last call's result is the roots' bits on every worker."""
    iterations, window, n, k = 5, 16, inc_star.n, inc_star.k
    inputs = tensors("int32", length, seed=7)
    before = inc_star.counters()
    root = ("--root", "1") if collective == "broadcast" else ()
    results = run_lossy(inc_star, inputs, "--collective", collective, *root, "--iterations", str(iterations),
                        "--window", str(window), "--eager-rounds")
    after = inc_star.counters()
    m = -(-length // k) * (n if collective == "all-gather" else 1)
    added = after["MyIngress.contributions"] - before["MyIngress.contributions"]
    assert added == n * m + (iterations - 1) * (m + (n - 1) * len(eager_gates(m, window)))
    expected = inputs[1] if collective == "broadcast" else np.stack(inputs)
    assert all(got.tobytes() == expected.tobytes() for got in results)
