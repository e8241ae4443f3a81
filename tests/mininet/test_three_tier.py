"""Issue 24, item 2 (three tiers), in Mininet (root): leaves s1, s2 (pod 1, under aggregation
switch s5) and s3, s4 (pod 2, under s6), core s7, two hosts per leaf; p4sim switches running
allreduce.p4 as the controller sets them up (`python -m topologies.run --topo three-tier`).
Each leaf sums its workers, each aggregation switch its leaves' partials, the core the pods':
two contributions per slot on every switch. AllReduce and Reduce against numpy, also with loss
on host links and on every link between switches.
"""
from __future__ import annotations

import logging
from typing import Iterator

import pytest

from hosts.inc import INC_K as K
from tests.mininet.conftest import IncStar, inc_fabric
from tests.mininet.test_allreduce import assert_float32_sums, assert_int32_sums, float32_tensors, int32_tensors
from tests.mininet.test_collectives import assert_reduced, tensors
from topologies.fabric import Impairment

pytestmark = pytest.mark.mininet
log = logging.getLogger(__name__)
SWITCHES = ("s1", "s2", "s3", "s4", "s5", "s6", "s7")
CONTRIBUTIONS = "MyIngress.contributions"


@pytest.fixture(scope="module")
def tiers(tmp_path_factory: pytest.TempPathFactory, switch_target: str) -> Iterator[IncStar]:
    with inc_fabric(tmp_path_factory.mktemp("three_tier"), 2, switch_target, leaves=2, pods=2) as fabric:
        yield fabric


def contributions(net: IncStar) -> dict[str, int]:
    return {s: net.counters(s)[CONTRIBUTIONS] for s in SWITCHES}


def test_every_tier_sums_two_children_per_slot_and_every_worker_gets_numpys_sum(tiers: IncStar) -> None:
    length = 5_000
    inputs = int32_tensors(tiers.n, length, seed=41)
    before = contributions(tiers)
    assert_int32_sums(tiers.allreduce(inputs), inputs)
    after = contributions(tiers)
    chunks = -(-length // K)
    assert {s: after[s] - before[s] for s in SWITCHES} == dict.fromkeys(SWITCHES, 2 * chunks)
    floats = float32_tensors(tiers.n, K + 1, seed=42)
    assert_float32_sums(tiers.allreduce(floats), floats)


@pytest.mark.impairment
def test_loss_on_host_links_and_between_every_tier_is_recovered_exactly(tiers: IncStar) -> None:
    ints = int32_tensors(tiers.n, 4_000, seed=43)
    with tiers.impaired(Impairment(loss_pct=1, switch_loss_pct=3)):
        results = tiers.allreduce(ints)
        reduced = tiers.allreduce(tensors("int32", 1_000, seed=44, n=tiers.n), "--collective", "reduce",
                                  "--root", "6", "--op", "max")
        counts = tiers.fabric.impairment_counts()
    assert_int32_sums(results, ints)
    assert_reduced(reduced[6], tensors("int32", 1_000, seed=44, n=tiers.n), "max")
    assert all(r.size == 0 for w, r in enumerate(reduced) if w != 6)
    assert counts["drop"] > 0 and counts["switch_link_drop"] > 0, f"nothing lost on some level: {counts}"
