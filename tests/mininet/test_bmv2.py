"""A little of test_allreduce.py on BMv2's simple_switch_grpc, where BMv2 and p4c are installed
(skipped with the reason otherwise). Its own module: test_allreduce.py's module-scoped p4sim
stars hold the machine's one fabric slot until that module ends.
"""
import numpy as np
import pytest

from hosts.inc import INC_K as K
from tests.mininet.test_allreduce import assert_int32_sums, int32_tensors
from tests.mininet.test_collectives import PART, tensors

pytestmark = [pytest.mark.mininet, pytest.mark.bmv2]


def test_bmv2_sums_and_forwards_like_p4sim(bmv2_star):
    tensors = int32_tensors(bmv2_star.n, K + 1, seed=7)
    assert_int32_sums(bmv2_star.allreduce(tensors), tensors)
    assert bmv2_star.ping("h1", "h2") == (2, [64, 64])


def test_bmv2_runs_the_other_collectives_like_p4sim(bmv2_star):
    """test_collectives.py's protocols once each, without loss: JOIN/ACK lengths, the root's
    data and the per-replica ACKs are the parser's and egress's work on BMv2 too."""
    n = bmv2_star.n
    ints = tensors("int32", n * PART, seed=8, n=n)
    total = np.sum(ints, axis=0)
    for w, got in enumerate(bmv2_star.allreduce(ints, "--collective", "reduce-scatter")):
        np.testing.assert_array_equal(got, total[w * PART:(w + 1) * PART])
    reduced = bmv2_star.allreduce(ints, "--collective", "reduce", "--root", "1")
    np.testing.assert_array_equal(reduced[1], total)
    assert reduced[0].size == 0
    for got in bmv2_star.allreduce(ints, "--collective", "broadcast", "--root", "1"):
        assert got.tobytes() == ints[1].tobytes()
    for got in bmv2_star.allreduce(ints, "--collective", "all-gather"):
        assert got.tobytes() == np.stack(ints).tobytes()
    assert all(r.size == 0 for r in bmv2_star.allreduce(ints, "--collective", "barrier"))
