"""A little of test_allreduce.py on BMv2's simple_switch_grpc, where BMv2 and p4c are installed
(skipped with the reason otherwise). Its own module: test_allreduce.py's module-scoped p4sim
stars hold the machine's one fabric slot until that module ends.
"""
import pytest

from hosts.inc import INC_K as K
from tests.mininet.test_allreduce import assert_int32_sums, int32_tensors

pytestmark = [pytest.mark.mininet, pytest.mark.bmv2]


def test_bmv2_sums_and_forwards_like_p4sim(bmv2_star):
    tensors = int32_tensors(bmv2_star.n, K + 1, seed=7)
    assert_int32_sums(bmv2_star.allreduce(tensors), tensors)
    assert bmv2_star.ping("h1", "h2") == (2, [64, 64])
