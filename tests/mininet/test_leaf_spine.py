"""Issue 12, item 5: the leaf-spine in Mininet. Two leaves s1, s2 of N hosts each under one
spine s3, p4sim switches running allreduce.p4, set up by the controller as
`python -m topologies.run --topo leaf-spine` does. AllReduce, Reduce, Broadcast and Barrier
across both leaves against numpy (int32 exactly, float32 within docs/protocol.md's bound),
also with loss on every host link; ping routed leaf -> spine -> leaf; and the switches'
counters: each leaf sums its own workers and the spine the leaves' partials (N_leaves
contributions per slot at the spine). test_leaf_spine_flat.py: the same job summed by the
spine alone.
"""
import logging

import numpy as np
import pytest

from hosts.inc import INC_K as K
from tests.mininet.conftest import IncStar
from tests.mininet.test_allreduce import assert_float32_sums, assert_int32_sums, float32_tensors, int32_tensors
from tests.mininet.test_collectives import assert_reduced, tensors
from topologies.fabric import Impairment

pytestmark = pytest.mark.mininet
log = logging.getLogger(__name__)
SIZES = pytest.mark.parametrize("inc_leaf_spine", [2, 4], indirect=True, ids=lambda n: f"2x{n}")
TWO = pytest.mark.parametrize("inc_leaf_spine", [2], indirect=True, ids=lambda n: f"2x{n}")
LEAVES, SPINE = ("s1", "s2"), "s3"


@SIZES
@pytest.mark.parametrize("length", [1, K + 1, 5_000])
def test_int32_sum_across_both_leaves_equals_numpy_exactly(inc_leaf_spine, length):
    inputs = int32_tensors(inc_leaf_spine.n, length, seed=21)
    assert_int32_sums(inc_leaf_spine.allreduce(inputs), inputs)


@SIZES
@pytest.mark.parametrize("length", [K - 1, 5_000])
def test_float32_sum_across_both_leaves_is_within_the_documented_bound(inc_leaf_spine, length):
    inputs = float32_tensors(inc_leaf_spine.n, length, seed=22)
    assert_float32_sums(inc_leaf_spine.allreduce(inputs), inputs)


@pytest.mark.impairment
@SIZES
def test_allreduce_across_both_leaves_with_1pct_loss_is_exact(inc_leaf_spine):
    ints, floats = int32_tensors(inc_leaf_spine.n, 8_000, seed=23), float32_tensors(inc_leaf_spine.n, 4_000, seed=24)
    with inc_leaf_spine.impaired(Impairment(loss_pct=1)):
        int_results = inc_leaf_spine.allreduce(ints)
        float_results = inc_leaf_spine.allreduce(floats)
        dropped = inc_leaf_spine.fabric.impairment_counts()["drop"]
    assert_int32_sums(int_results, ints)
    assert_float32_sums(float_results, floats)
    assert dropped > 0, "no packet was lost: this run proved nothing"


@pytest.mark.impairment
@SIZES
def test_loss_between_leaves_and_spine_too_is_recovered_exactly_at_both_levels(inc_leaf_spine):
    """Partials lost on the way up and results lost on the way down (5% on each leaf-spine
    link, each way) as well as on host links: the workers' retransmissions make each leaf
    send its partial again and the spine answer from its stored result."""
    net = inc_leaf_spine
    ints, floats = int32_tensors(net.n, 8_000, seed=29), float32_tensors(net.n, 4_000, seed=30)
    before = net.counters(SPINE)
    with net.impaired(Impairment(loss_pct=2, switch_loss_pct=5)):
        int_results = net.allreduce(ints)
        after_ints = net.counters(SPINE)
        float_results = net.allreduce(floats)
        counts = net.fabric.impairment_counts()
    assert_int32_sums(int_results, ints)
    assert_float32_sums(float_results, floats)
    assert counts["drop"] > 0 and counts["switch_link_drop"] > 0, f"nothing lost on some level: {counts}"
    grew = delta(before, after_ints)
    assert grew["MyIngress.results_resent"] > 0            # the spine answered a leaf's second partial
    assert grew["MyIngress.contributions"] == len(LEAVES) * 8_000 // K   # each leaf's partial counted once


@pytest.mark.impairment
@TWO
@pytest.mark.parametrize("dtype, op", [("int32", "sum"), ("float32", "sum"), ("int32", "min")])
def test_reduce_to_a_root_under_the_other_leaf_with_loss(inc_leaf_spine, dtype, op):
    n = inc_leaf_spine.n
    inputs = tensors(dtype, 2000, seed=25, n=n)
    results = lossy(inc_leaf_spine, inputs, "--collective", "reduce", "--root", str(n - 1), "--op", op)
    assert_reduced(results[n - 1], inputs, op)
    assert all(r.size == 0 for w, r in enumerate(results) if w != n - 1)


@pytest.mark.impairment
@TWO
def test_broadcast_from_one_leaf_reaches_both_with_loss(inc_leaf_spine):
    inputs = tensors("float32", 1001, seed=26, n=inc_leaf_spine.n)
    results = lossy(inc_leaf_spine, inputs, "--collective", "broadcast", "--root", "1")
    for got in results:
        assert got.dtype == np.float32 and got.tobytes() == inputs[1].tobytes()


@TWO
def test_barrier_rounds_are_counted_once_per_leaf_at_the_spine(inc_leaf_spine):
    before = {s: inc_leaf_spine.counters(s) for s in (*LEAVES, SPINE)}
    results = inc_leaf_spine.allreduce(tensors("int32", 1, seed=27, n=inc_leaf_spine.n),
                                       "--collective", "barrier", "--iterations", "10")
    assert all(r.size == 0 for r in results)
    grew = {s: delta(before[s], inc_leaf_spine.counters(s)) for s in before}
    assert grew[SPINE]["MyIngress.results_multicast"] == 10
    assert grew[SPINE]["MyIngress.contributions"] == len(LEAVES) * 10
    for leaf in LEAVES:
        assert grew[leaf]["MyIngress.contributions"] == inc_leaf_spine.n // 2 * 10
        assert grew[leaf]["MyIngress.forwarded_to_aggregator"] == 0


@SIZES
def test_each_leaf_sums_its_workers_and_the_spine_sees_one_packet_per_leaf_per_slot(inc_leaf_spine):
    """Hierarchical aggregation: per slot each leaf counts its own workers' contributions and
    the spine one per leaf, whatever the workers retransmitted (a retransmission is answered,
    never counted twice)."""
    net = inc_leaf_spine
    slots = 64
    before = {s: net.counters(s) for s in (*LEAVES, SPINE)}
    inputs = int32_tensors(net.n, slots * K, seed=28)
    assert_int32_sums(net.allreduce(inputs), inputs)
    grew = {s: delta(before[s], net.counters(s)) for s in before}
    log.info("spine s3, hierarchical, %d workers: %s", net.n, spine_counts(grew[SPINE]))
    assert grew[SPINE]["MyIngress.contributions"] == len(LEAVES) * slots
    assert grew[SPINE]["MyIngress.results_multicast"] == slots
    for leaf in LEAVES:
        assert grew[leaf]["MyIngress.contributions"] == net.n // 2 * slots
        assert grew[leaf]["MyIngress.forwarded_to_aggregator"] == 0


@TWO
def test_hosts_under_different_leaves_ping_through_the_spine(inc_leaf_spine):
    # Routed by the first leaf and by the spine (two TTL decrements), switched by the last leaf.
    assert inc_leaf_spine.ping("h1", f"h{inc_leaf_spine.n}") == (2, [62, 62])
    # Same leaf, same subnet: switched only.
    assert inc_leaf_spine.ping("h1", "h2") == (2, [64, 64])


def lossy(net: IncStar, inputs: list[np.ndarray], *worker_args: str) -> list[np.ndarray]:
    """Run with 5% loss on every host link (as tests/mininet/test_collectives.py does); make
    sure something was lost."""
    with net.impaired(Impairment(loss_pct=5)):
        results = net.allreduce(inputs, *worker_args)
        dropped = net.fabric.impairment_counts()["drop"]
    assert dropped > 0, "no packet was lost: this run proved nothing"
    return results


def spine_counts(grew: dict[str, int]) -> dict[str, int]:
    """The spine's counters the note on issue 12 quotes."""
    return {name.split(".")[1]: grew[name] for name in ("MyIngress.contributions", "MyIngress.results_multicast",
                                                        "MyIngress.results_resent", "MyIngress.duplicate_drops")}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {name: after[name] - before.get(name, 0) for name in after}
