"""The leaf-spine of test_leaf_spine.py with its job summed by the spine alone
(`python -m topologies.run --topo leaf-spine --flat`): the spine counts N_workers contributions
per slot where hierarchical aggregation has it count N_leaves. A module of its own: its fabric
cannot be up while test_leaf_spine.py's is (one fabric per machine).
"""
import logging

import pytest

from hosts.inc import INC_K as K
from tests.mininet.test_allreduce import assert_int32_sums, int32_tensors
from tests.mininet.test_leaf_spine import LEAVES, SPINE, delta, spine_counts

pytestmark = pytest.mark.mininet
log = logging.getLogger(__name__)


@pytest.mark.parametrize("inc_flat_leaf_spine", [2, 4], indirect=True, ids=lambda n: f"2x{n}")
def test_flat_the_spine_sees_every_workers_packet_per_slot_and_the_leaves_only_forward(inc_flat_leaf_spine):
    """The same job summed by the spine alone (`topologies.run --flat`): per slot the spine
    counts N_workers contributions; each leaf forwards its workers' packets up, exactly the
    packets they sent (retransmissions included), and adds nothing."""
    net = inc_flat_leaf_spine
    slots = 64
    before = {s: net.counters(s) for s in (*LEAVES, SPINE)}
    inputs = int32_tensors(net.n, slots * K, seed=28)
    runs = net.run(inputs)
    assert_int32_sums([r.result for r in runs], inputs)
    grew = {s: delta(before[s], net.counters(s)) for s in before}
    log.info("spine s3, flat, %d workers: %s", net.n, spine_counts(grew[SPINE]))
    assert grew[SPINE]["MyIngress.results_multicast"] == slots
    assert grew[SPINE]["MyIngress.contributions"] == net.n * slots
    sent_from = {leaf: sum(r.report["packets_sent"] for r in runs
                           if net.fabric.topo.host_port(r.host)[0] == leaf) for leaf in LEAVES}
    for leaf in LEAVES:
        assert grew[leaf]["MyIngress.contributions"] == 0
        assert grew[leaf]["MyIngress.results_multicast"] == 0
        assert grew[leaf]["MyIngress.forwarded_to_aggregator"] == sent_from[leaf] >= net.n // 2 * slots
