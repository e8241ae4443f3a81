"""AllReduce through p4sim running allreduce.p4 in a Mininet star: the sums equal numpy's
(exactly for int32, within docs/protocol.md's bound for float32 and float16; min and max
exactly) for N = 2, 4, 8 and lengths around the packet size K, also with random loss,
duplication and reordering on every host link; and ordinary traffic (ping) crosses the same
switch. test_bmv2.py repeats a little of it on BMv2 where that is installed.
"""
import numpy as np
import pytest

from hosts.inc import INC_K as K
from topologies.fabric import Impairment
from tests.hosts.documented import documented_bound

pytestmark = pytest.mark.mininet

LENGTHS = [1, K - 1, K, K + 1]
ALL_N = pytest.mark.parametrize("inc_star", [2, 4, 8], indirect=True, ids=lambda n: f"N{n}")
FOUR = pytest.mark.parametrize("inc_star", [4], indirect=True, ids=lambda n: f"N{n}")


def int32_tensors(n: int, length: int, seed: int) -> list[np.ndarray]:
    # Bounded so that no sum of 8 overflows int32: overflow is its own, reported, case.
    rng = np.random.default_rng([seed, n, length])
    return [rng.integers(-2**27, 2**27, size=length, dtype=np.int32) for _ in range(n)]


def float32_tensors(n: int, length: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng([seed, n, length])
    return [(rng.standard_normal(length) * 10.0 ** rng.integers(-3, 4)).astype(np.float32) for _ in range(n)]


def assert_int32_sums(results: list[np.ndarray], tensors: list[np.ndarray]) -> None:
    expected = np.sum(np.array(tensors, dtype=np.int64), axis=0)
    for r in results:
        assert r.dtype == np.int32
        np.testing.assert_array_equal(r, expected)


def assert_float32_sums(results: list[np.ndarray], tensors: list[np.ndarray]) -> None:
    expected = np.sum(np.array(tensors, dtype=np.float64), axis=0)
    for r in results:
        assert r.dtype == np.float32
        assert np.all(np.abs(r - expected) <= documented_bound(tensors))
        np.testing.assert_array_equal(r, results[0])      # every worker gets the same bits


@ALL_N
@pytest.mark.parametrize("length", LENGTHS)
def test_int32_sum_equals_numpy_exactly(inc_star, length):
    tensors = int32_tensors(inc_star.n, length, seed=1)
    assert_int32_sums(inc_star.allreduce(tensors), tensors)


@ALL_N
@pytest.mark.parametrize("length", LENGTHS)
def test_float32_sum_is_within_tolerance_of_numpy(inc_star, length):
    tensors = float32_tensors(inc_star.n, length, seed=2)
    assert_float32_sums(inc_star.allreduce(tensors), tensors)


@ALL_N
def test_million_int32_elements_sum_exactly(inc_star):
    tensors = int32_tensors(inc_star.n, 1_000_000, seed=3)
    assert_int32_sums(inc_star.allreduce(tensors), tensors)


@ALL_N
def test_million_float32_elements_sum_within_tolerance(inc_star):
    tensors = float32_tensors(inc_star.n, 1_000_000, seed=4)
    assert_float32_sums(inc_star.allreduce(tensors), tensors)


@pytest.mark.impairment
@FOUR
@pytest.mark.parametrize("loss_pct, length", [(1, 20_000), (5, 4_000)])
def test_allreduce_completes_correctly_under_random_loss(inc_star, loss_pct, length):
    tensors = int32_tensors(inc_star.n, length, seed=5)
    with inc_star.impaired(Impairment(loss_pct=loss_pct)):
        results = inc_star.allreduce(tensors)
        dropped = inc_star.fabric.impairment_counts()["drop"]
    assert_int32_sums(results, tensors)
    assert dropped > 0, "no packet was lost: this run proved nothing"


# A worker hands the kernel a window's same-size datagrams as one segmented send (UDP_SEGMENT),
# which the fabric's rules see, and duplicate or delay, as one packet: a call is only a few of
# them, so one call may pass unimpaired. These tests repeat the call, each result checked, until
# the impairment happened (at 20%, a call of four such sends is spared with p = 0.41; ten: 1e-4).
IMPAIRED_CALLS = 10


@pytest.mark.impairment
@FOUR
def test_duplicated_contributions_do_not_change_the_sum(inc_star):
    tensors = float32_tensors(inc_star.n, 4_000, seed=6)
    with inc_star.impaired(Impairment(loss_pct=1, duplicate_pct=20)):
        for _ in range(IMPAIRED_CALLS):
            assert_float32_sums(inc_star.allreduce(tensors), tensors)
            if duplicated := inc_star.fabric.impairment_counts()["dup"]:
                break
    assert duplicated > 0, "no packet was duplicated: this run proved nothing"


@pytest.mark.impairment
@FOUR
def test_reordered_contributions_do_not_change_the_sum(inc_star):
    tensors = int32_tensors(inc_star.n, 40 * K + 7, seed=8)   # 41 packets a worker
    with inc_star.impaired(Impairment(reorder_pct=20)):
        for _ in range(IMPAIRED_CALLS):
            assert_int32_sums(inc_star.allreduce(tensors), tensors)
            if reordered := inc_star.fabric.impairment_counts()["reorder"]:
                break
    assert reordered > 0, "no packet went down the slow lane: this run proved nothing"


@FOUR
def test_float16_sum_with_loss_is_within_the_documented_bound_of_numpy(inc_star):
    rng = np.random.default_rng([9, inc_star.n])
    # 41 chunks, over 300 packets: 5% loss drops one but once in 10^7 runs.
    tensors = [(rng.standard_normal(40 * K + 5) * 100).astype(np.float16) for _ in range(inc_star.n)]
    expected = np.sum(np.array(tensors, dtype=np.float64), axis=0)
    with inc_star.impaired(Impairment(loss_pct=5)):
        results = inc_star.allreduce(tensors)
        dropped = inc_star.fabric.impairment_counts()["drop"]
    for r in results:
        assert r.dtype == np.float16
        assert np.all(np.abs(r.astype(np.float64) - expected) <= documented_bound(tensors))
        np.testing.assert_array_equal(r, results[0])
    assert dropped > 0, "no packet was lost: this run proved nothing"


@FOUR
@pytest.mark.parametrize("op", ["min", "max"])
def test_min_and_max_with_loss_equal_numpy_exactly(inc_star, op):
    reduce = np.min if op == "min" else np.max
    # 41 chunks a call: enough packets that 5% loss drops one (P(none) < 1e-14).
    floats = float32_tensors(inc_star.n, 40 * K + 3, seed=10)
    ints = int32_tensors(inc_star.n, 40 * K + 3, seed=11)
    with inc_star.impaired(Impairment(loss_pct=5)):
        float_results = inc_star.allreduce(floats, "--op", op)
        int_results = inc_star.allreduce(ints, "--op", op)
        dropped = inc_star.fabric.impairment_counts()["drop"]
    for r in float_results:
        assert r.dtype == np.float32
        np.testing.assert_array_equal(r, reduce(floats, axis=0))
    for r in int_results:
        assert r.dtype == np.int32
        np.testing.assert_array_equal(r, reduce(ints, axis=0))
    assert dropped > 0, "no packet was lost: this run proved nothing"


@ALL_N
def test_hosts_ping_each_other_through_the_switch(inc_star):
    hosts = list(inc_star.fabric.topo.hosts)
    for src in hosts:
        for dst in hosts:
            if src != dst:
                received, ttls = inc_star.ping(src, dst)
                # Switched, not routed: the TTL arrives as the sender set it.
                assert (received, ttls) == (2, [64, 64]), f"{src} -> {dst}"
