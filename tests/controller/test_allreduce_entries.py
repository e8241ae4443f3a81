"""What the controller installs for allreduce.p4, derived from topologies, checked
against entries written out by hand from docs/protocol.md (no switch needed)."""
from __future__ import annotations

import pytest

from controller.allreduce import (AGG_IP, AGG_MAC, BROADCAST, FLOOD_GROUP, INC_PORT, JOB_GROUP_BASE, JOB_LEAF,
                                  UP_GROUP, forwarding_entries, job_entries, jobs_on_switch)
from controller.entries import MulticastGroup, Replica, TableEntry
from controller.errors import ControllerError
from topologies.spec import Endpoint, HostSpec, JobSpec, LinkSpec, SwitchSpec, Topology, leaf_spine, star

POOL = 512


def l2(mac: str, port: int) -> TableEntry:
    return TableEntry("MyIngress.l2_forward", "MyIngress.l2_forward_to", {"port": port},
                      {"hdr.ethernet.dstAddr": mac})


def route(ip: str, mac: str, port: int) -> TableEntry:
    return TableEntry("MyIngress.ipv4_lpm", "MyIngress.ipv4_forward", {"dstAddr": mac, "port": port},
                      {"hdr.ipv4.dstAddr": [ip, 32]})


FLOOD = TableEntry("MyIngress.l2_forward", "MyIngress.l2_flood", {"mcast_grp": FLOOD_GROUP},
                   {"hdr.ethernet.dstAddr": BROADCAST})


def test_star_forwards_every_host_mac_to_its_port_and_floods_broadcast():
    entries, groups = forwarding_entries(star(3), "s1")
    assert sorted(entries, key=repr) == sorted([
        l2("08:00:00:00:00:01", 1), l2("08:00:00:00:00:02", 2), l2("08:00:00:00:00:03", 3), FLOOD], key=repr)
    assert groups == [MulticastGroup(FLOOD_GROUP, (Replica(1, 0), Replica(2, 0), Replica(3, 0)))]


def test_star_job_gets_whole_pool_and_one_worker_entry_per_port():
    (job,), forwarded = jobs_on_switch(star(4), "s1", POOL)
    assert forwarded == []
    assert (job.job_id, job.slot_base, job.num_slots) == (1, 0, POOL)
    entries, (group,) = job_entries(job)
    expected = [TableEntry("MyIngress.inc_job", "MyIngress.set_job",
                           {"num_workers": 4, "mcast_grp": JOB_GROUP_BASE + 1, "slot_base": 0, "num_slots": POOL},
                           {"hdr.inc.job_id": 1})]
    for w in range(4):
        expected.append(TableEntry("MyIngress.inc_worker", "MyIngress.admit_worker", {},
                                   {"hdr.inc.job_id": 1, "hdr.inc.worker_id": w,
                                    "standard_metadata.ingress_port": w + 1}))
        expected.append(TableEntry("MyEgress.inc_worker_addr", "MyEgress.set_worker_addr",
                                   {"mac": f"08:00:00:00:00:0{w + 1}", "ip": f"10.0.0.{w + 1}",
                                    "udp_port": INC_PORT},
                                   {"hdr.inc.job_id": 1, "meta.dest_worker": w}))
    assert entries == expected
    # The rid of each copy is the worker id: egress looks the worker's address up by it.
    assert group == MulticastGroup(JOB_GROUP_BASE + 1, tuple(Replica(w + 1, w) for w in range(4)))


def test_two_jobs_on_disjoint_hosts_get_disjoint_slot_ranges_and_groups():
    topo = star(4)
    topo = Topology(topo.hosts, topo.switches, topo.links,
                    [JobSpec(7, ("h1", "h2")), JobSpec(9, ("h3", "h4"))])
    jobs, _ = jobs_on_switch(topo, "s1", POOL)
    assert [(j.job_id, j.slot_base, j.num_slots, j.mcast_group) for j in jobs] == [
        (7, 0, 256, JOB_GROUP_BASE + 7), (9, 256, 256, JOB_GROUP_BASE + 9)]
    assert [w.port for w in jobs[1].workers] == [3, 4]
    cells = [set(j.register_indices) for j in jobs]
    assert not cells[0] & cells[1]
    assert max(cells[1]) == 2 * POOL - 1


def test_job_register_indices_cover_both_versions_of_its_slots():
    topo = star(2)
    topo = Topology(topo.hosts, topo.switches, topo.links,
                    [JobSpec(1, ("h1", "h2")), JobSpec(2, ("h1",))])
    job = jobs_on_switch(topo, "s1", 8)[0][1]
    assert job.register_indices == [4, 5, 6, 7, 12, 13, 14, 15]


def test_flat_leaf_spine_job_is_aggregated_at_the_spine_and_passed_on_by_leaves():
    topo = leaf_spine(2, 1, 2, hierarchical=False)   # s1, s2 leaves (hosts on 1..2, uplink 3); s3 spine
    (job,), forwarded = jobs_on_switch(topo, "s3", POOL)
    assert forwarded == []
    assert [(w.host, w.port) for w in job.workers] == [("h1", 1), ("h2", 1), ("h3", 2), ("h4", 2)]
    _, (group,) = job_entries(job)
    assert group.replicas == (Replica(1, 0), Replica(1, 1), Replica(2, 2), Replica(2, 3))
    for leaf in ("s1", "s2"):
        jobs, (fwd,) = jobs_on_switch(topo, leaf, POOL)
        assert jobs == [] and (fwd.job_id, fwd.aggregator, fwd.port) == (1, "s3", 3)


def test_hierarchical_leaf_spine_job_is_summed_by_each_leaf_and_by_the_spine_over_the_leaves():
    topo = leaf_spine(2, 2, 2)   # s1, s2 leaves (hosts on 1..2, uplinks 3 and 4); s3, s4 spines
    (spine,), forwarded = jobs_on_switch(topo, "s3", POOL)
    assert forwarded == [] and jobs_on_switch(topo, "s4", POOL) == ([], [])
    # The spine's members are the leaves, ids 4 and 5 after the 4 workers', at the aggregator's address.
    assert [(w.worker_id, w.host, w.port, w.mac, w.ip) for w in spine.members] == [
        (4, "s1", 1, AGG_MAC, AGG_IP), (5, "s2", 2, AGG_MAC, AGG_IP)]
    entries, (group,) = job_entries(spine)
    assert entries[0].action_params["num_workers"] == 2
    assert group.replicas == (Replica(1, 4), Replica(2, 5))
    for k, leaf in enumerate(("s1", "s2")):
        (job,), forwarded = jobs_on_switch(topo, leaf, POOL)
        assert forwarded == [] and (job.slot_base, job.num_slots) == (spine.slot_base, spine.num_slots)
        assert [(w.worker_id, w.host, w.port) for w in job.workers] == [(2 * k, f"h{2 * k + 1}", 1),
                                                                       (2 * k + 1, f"h{2 * k + 2}", 2)]
        assert (job.uplink.worker_id, job.uplink.host, job.uplink.port, job.uplink.ip) == (4 + k, "s3", 3, AGG_IP)
        entries, (down, up) = job_entries(job)
        assert entries[0].action_params["num_workers"] == 2 | JOB_LEAF
        # One group per direction: results down to the leaf's workers, partials up to the spine.
        assert down == MulticastGroup(JOB_GROUP_BASE + 1, (Replica(1, 2 * k), Replica(2, 2 * k + 1)))
        assert up == MulticastGroup((JOB_GROUP_BASE + 1) | UP_GROUP, (Replica(3, 4 + k),))
        admitted = {(e.match["hdr.inc.worker_id"], e.match["standard_metadata.ingress_port"])
                    for e in entries if e.table == "MyIngress.inc_worker"}
        assert admitted == {(2 * k, 1), (2 * k + 1, 2), (4 + k, 3)}


def test_hierarchical_job_under_one_leaf_is_summed_there_alone():
    topo = leaf_spine(2, 1, 2)
    topo = Topology(topo.hosts, topo.switches, topo.links, [JobSpec(1, ("h1", "h2"), hierarchical=True)])
    (job,), _ = jobs_on_switch(topo, "s1", POOL)
    assert job.uplink is None and [w.host for w in job.workers] == ["h1", "h2"]
    assert jobs_on_switch(topo, "s3", POOL) == ([], [])


def test_hierarchical_jobs_the_program_cannot_sum_are_refused_with_the_way_out():
    base = leaf_spine(2, 1, 2)   # s1, s2 leaves; s3 spine
    h9 = HostSpec("h9", "10.0.9.1/24", "08:00:00:00:09:01")
    # A worker on the spine, which would sum it with the leaves' partials.
    topo = Topology({**base.hosts, "h9": h9}, base.switches, [*base.links, LinkSpec(Endpoint("h9"), Endpoint("s3", 9))],
                    [JobSpec(1, ("h1", "h3", "h9"), hierarchical=True)])
    with pytest.raises(ControllerError, match="cabled to s3, which sums the switches below.*make the job flat"):
        jobs_on_switch(topo, "s1", POOL)
    # 31 workers under 3 leaves: 34 ids.
    big = leaf_spine(3, 1, 11)
    topo = Topology(big.hosts, big.switches, big.links, [JobSpec(1, tuple(big.hosts)[:31], hierarchical=True)])
    with pytest.raises(ControllerError, match="31 workers and 3 switches below s4 need more than 32 ids.*make the job flat"):
        jobs_on_switch(topo, "s4", POOL)


def test_a_leaf_two_hops_below_the_root_is_summed_through_a_middle_tier():
    """Switch s4 behind leaf s1: the job of h3 (under s2) and h9 (under s4) is rooted at s1
    (two hops from both ends, first by name); s3 between s2 and s1 sums s2's partial and
    sends its own up, as a leaf does, and passes s1's result down as a partial."""
    base = leaf_spine(2, 1, 2)   # s1, s2 leaves; s3 spine
    h9 = HostSpec("h9", "10.0.9.1/24", "08:00:00:00:09:01")
    s4 = SwitchSpec("s4", 3, "127.0.0.1:50099", 9099)
    topo = Topology({**base.hosts, "h9": h9}, {**base.switches, "s4": s4},
                    [*base.links, LinkSpec(Endpoint("s4", 1), Endpoint("s1", 9)), LinkSpec(Endpoint("h9"), Endpoint("s4", 2))],
                    [JobSpec(1, ("h3", "h9"), hierarchical=True)])
    members = {}
    for switch in ("s1", "s2", "s3", "s4"):
        (job,), forwarded = jobs_on_switch(topo, switch, POOL)
        assert forwarded == []
        members[switch] = ([(w.worker_id, w.host, w.port) for w in job.workers],
                           job.uplink and (job.uplink.worker_id, job.uplink.host, job.uplink.port))
    # Ids after the 2 workers', in name order of the switches below the root: s2 2, s3 3, s4 4.
    assert members == {"s1": ([(3, "s3", 3), (4, "s4", 9)], None),
                       "s2": ([(0, "h3", 1)], (2, "s3", 3)),
                       "s3": ([(2, "s2", 2)], (3, "s1", 1)),
                       "s4": ([(1, "h9", 2)], (4, "s1", 1))}


def test_leaf_routes_only_other_subnets_and_spine_routes_every_host():
    topo = leaf_spine(2, 1, 2)
    leaf_entries, leaf_groups = forwarding_entries(topo, "s1")
    assert [e for e in leaf_entries if e.table == "MyIngress.ipv4_lpm"] == [
        route("10.0.2.1", "08:00:00:00:02:01", 3), route("10.0.2.2", "08:00:00:00:02:02", 3)]
    assert leaf_groups == [MulticastGroup(FLOOD_GROUP, (Replica(1, 0), Replica(2, 0)))]
    spine_entries, spine_groups = forwarding_entries(topo, "s3")
    assert [e for e in spine_entries if e.table == "MyIngress.ipv4_lpm"] == [
        route("10.0.1.1", "08:00:00:00:01:01", 1), route("10.0.1.2", "08:00:00:00:01:02", 1),
        route("10.0.2.1", "08:00:00:00:02:01", 2), route("10.0.2.2", "08:00:00:00:02:02", 2)]
    assert spine_groups == [] and FLOOD not in spine_entries


def test_unknown_switch_is_a_clear_error():
    with pytest.raises(ControllerError, match="no switch 's9'"):
        jobs_on_switch(star(2), "s9", POOL)


def test_job_without_workers_is_refused():
    topo = star(2)
    topo = Topology(topo.hosts, topo.switches, topo.links, [JobSpec(1, ())])
    with pytest.raises(ControllerError, match="1..32"):
        jobs_on_switch(topo, "s1", POOL)
