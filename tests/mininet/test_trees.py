"""Issue 24, item 2, in Mininet (root): trees from the slot pool on a leaf-spine of two leaves
(s1: h1-h3, s2: h4-h6) and two spines (s3, s4), one fabric and one `python -m controller pool`
for the module. A job whose workers sit under both leaves is summed on two levels: its leaves
and one spine each give it slots. Three such jobs on a pool for two: the first two take a spine
each and run at once (each spine's counters hold its own job's partials only), the third is
refused at the full leaf and runs on the ring. An uplink that dies mid-call: its tree finishes
on the ring, the other runs on (a spine killed mid-call: tests/mininet/test_pool.py, as it needs
a fabric of its own). Every result equals numpy's sum exactly.
"""
from __future__ import annotations

import logging
import re
import subprocess
from typing import Iterator

import numpy as np
import pytest

from hosts.inc import INC_K
from tests.mininet.test_pool import (CONTRIBUTIONS, PoolStar, assert_exact, grants, int_calls, tree_pool,
                                     wait_until_running)
from topologies.procs import end_child

pytestmark = pytest.mark.mininet
log = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def pool_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PoolStar]:
    """Shared by the module's tests that stop no switch."""
    with tree_pool(tmp_path_factory.mktemp("pool_tree")) as net:
        yield net


def counters(net: PoolStar) -> dict[str, int]:
    return {s: net.switch_counter(CONTRIBUTIONS, s) for s in net.fabric.topo.switches}


def chunks_sent(length: int, calls: int) -> int:
    """Contributions one worker makes: every chunk of every call, plus the start-up probe and
    the closing call (one chunk each)."""
    return calls * -(-length // INC_K) + 2


def test_three_trees_on_a_pool_for_two_spread_over_the_spines_and_the_third_runs_on_the_ring(
        pool_tree: PoolStar) -> None:
    n_calls = 3
    lengths = {"a": 100_000, "b": 80_000, "c": 50_000}     # a and b differ: the spines' counts tell them apart
    rounds = {"a": 20, "b": 20, "c": 1}                     # a and b hold the pool while c asks
    jobs = {"a": ["h1", "h4"], "b": ["h2", "h5"], "c": ["h3", "h6"]}
    calls = {name: int_calls(i, 2, lengths[name], n_calls) for i, name in enumerate(jobs)}
    before = counters(pool_tree)
    running = {}
    try:
        for count, name in enumerate(("a", "b"), 1):
            running[name] = pool_tree.start_job(name, jobs[name], calls[name], rounds=rounds[name])
            pool_tree.wait_for_log("granted slots", count=count)
        running["c"] = pool_tree.start_job("c", jobs["c"], calls["c"])     # while a and b hold the pool
        done = {name: pool_tree.finish_job(name, procs, n_calls * rounds[name]) for name, procs in running.items()}
    finally:
        for procs in running.values():
            for proc in procs:
                end_child(proc)
    added = {s: n - before[s] for s, n in counters(pool_tree).items()}
    pool_log = pool_tree.controller_log.read_text(errors="replace")
    log.info("contributions %s; fallbacks %s", added, {n: [r["fallbacks"] for r in d[0]] for n, d in done.items()})
    assert "released" not in pool_log.partition("refused (no_room")[0], (
        f"a or b gave its slots back before c asked: the jobs did not overlap\n{pool_log[-2000:]}")
    for name, (reports, results) in done.items():
        assert_exact(results, calls[name])
        assert [(r["backend"], r["fallbacks"]) for r in reports] == [("ring", 1) if name == "c" else ("inc", 0)] * 2
    # c found its leaves full (a and b hold both leaves' pools), and says which switch.
    assert "refused (no_room): s1: no room" in pool_log
    assert "the slot pool refused the job (no_room" in done["c"][0][0]["stderr"]
    per_worker = {name: chunks_sent(lengths[name], n_calls * rounds[name]) for name in ("a", "b")}
    # Each leaf summed one worker of a and one of b; c sent the switches nothing.
    assert added["s1"] == added["s2"] == per_worker["a"] + per_worker["b"]
    # Each spine summed one job's partials, one per chunk from each leaf: a on s3, b on s4.
    assert (added["s3"], added["s4"]) == (2 * per_worker["a"], 2 * per_worker["b"])


def test_an_uplink_that_dies_mid_call_ends_its_tree_on_the_ring_and_the_other_tree_runs_on(
        pool_tree: PoolStar) -> None:
    """Tree `hold` takes the first spine s3, tree `u` the other, s4; then every packet on the
    uplink s1 <-> s4 is dropped. `u`'s rounds stop: it finishes on the ring (whose packets
    between the leaves cross s3); `hold` is not disturbed."""
    n_calls = 2
    jobs = {"hold": (["h2", "h5"], 100_000, 20), "u": (["h1", "h4"], 300_000, 5)}
    calls = {name: int_calls(i + 11, 2, length, n_calls) for i, (name, (_, length, _)) in enumerate(jobs.items())}
    granted = len(grants(pool_tree))
    before = pool_tree.switch_counter(CONTRIBUTIONS, "s4")
    uplink = ("s1-eth5", "s4-eth1")            # leaf s1's port 3 + 2, spine s4's port 1
    running = {}
    try:
        for count, (name, (hosts, _, rounds)) in enumerate(jobs.items(), 1):
            running[name] = pool_tree.start_job(name, hosts, calls[name], "--give-up-after", "10", rounds=rounds)
            pool_tree.wait_for_log("granted slots", count=granted + count)
        assert ["(root s3:" in line for line in grants(pool_tree)[-2:]] == [True, False]
        wait_until_running(pool_tree, "s4", before, running["u"])
        for intf in uplink:
            cut(intf)
        done = {name: pool_tree.finish_job(name, procs, n_calls * jobs[name][2]) for name, procs in running.items()}
        dropped = sum(dropped_on(intf) for intf in uplink)
    finally:
        for intf in uplink:
            mend(intf)
        for procs in running.values():
            for proc in procs:
                end_child(proc)
    for name, (reports, results) in done.items():
        assert_exact(results, calls[name])
    assert [(r["backend"], r["fallbacks"]) for r in done["hold"][0]] == [("inc", 0)] * 2
    assert [(r["backend"], r["fallbacks"]) for r in done["u"][0]] == [("ring", 1)] * 2
    assert all("the switch stopped answering mid-call" in r["stderr"] for r in done["u"][0])
    assert dropped > 0


CUT_TABLE = "p4inc_trees_cut"


def cut(intf: str) -> None:
    """Drop every packet the switch sends out of its port `intf` (root namespace), counted: on
    egress, as a packet socket (the switch's) takes its copy of an arriving packet before ingress hooks."""
    rules = "\n".join([f"table netdev {CUT_TABLE}_{intf.replace('-', '_')} {{", "  chain egress {",
                       f'    type filter hook egress device "{intf}" priority 0;', "    counter drop", "  }", "}", ""])
    done = subprocess.run(["nft", "-f", "-"], input=rules, text=True, capture_output=True, check=False)
    assert done.returncode == 0, f"nft cannot cut {intf}: {done.stderr.strip()}"


def mend(intf: str) -> None:
    subprocess.run(["nft", "delete", "table", "netdev", f"{CUT_TABLE}_{intf.replace('-', '_')}"],
                   capture_output=True, check=False)


def dropped_on(intf: str) -> int:
    done = subprocess.run(["nft", "list", "table", "netdev", f"{CUT_TABLE}_{intf.replace('-', '_')}"],
                          text=True, capture_output=True, check=False)
    return sum(int(n) for n in re.findall(r"counter packets (\d+)", done.stdout))
