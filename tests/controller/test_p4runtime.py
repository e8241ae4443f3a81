"""The controller against p4sim's P4Runtime server running allreduce.p4: what it installs
reads back equal to what the topology implies, registers and counters are reachable, bad
entries show the switch's error, and a second controller or a restarted switch keeps or
regains the state (reconciliation, not a wipe)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.allreduce import forwarding_entries, job_entries, jobs_on_switch
from controller.control import (install_table_entries, push_pipeline, read_counters,
                                read_default_entry, read_multicast_groups, read_table_entries)
from controller.entries import TableEntry, normalized
from controller.errors import ControllerError
from controller.fabric import setup_switch
from controller.install import clear_slots
from controller.switch import Switch
from topologies.spec import JobSpec, Topology

REPO = Path(__file__).resolve().parents[2]
POOL = 512
COUNTERS = {  # docs/protocol.md, "Counters"
    "MyIngress.malformed_drops", "MyIngress.bad_version_drops", "MyIngress.unknown_job_drops",
    "MyIngress.spoofed_worker_drops", "MyIngress.slot_range_drops", "MyIngress.stale_drops",
    "MyIngress.duplicate_drops", "MyIngress.contributions", "MyIngress.results_multicast",
    "MyIngress.results_resent", "MyIngress.arp_replies", "MyIngress.l2_miss_drops",
    "MyIngress.forwarded_to_aggregator", "MyEgress.unknown_worker_addr_drops"}
WAIT_S = 60.0


def controller(tmp_path: Path, build_dir: Path, command: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m controller COMMAND ...` on the test's topology (and build, for setup)."""
    argv = [sys.executable, "-m", "controller", command, *args, "--topo", str(tmp_path / "topology.json")]
    if command == "setup":
        argv += ["--build-dir", str(build_dir)]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)


def table_state(sw: Switch, tables: list[str]) -> list[TableEntry]:
    return sorted((e for t in tables for e in read_table_entries(sw, t)), key=repr)


def expected(sw: Switch, entries: list[TableEntry]) -> list[TableEntry]:
    return sorted((normalized(sw.context, e) for e in entries), key=repr)


def test_push_pipeline_then_device_runs_it_and_a_second_push_is_skipped(switch, pipeline):
    assert switch.device_pipeline() is None
    assert push_pipeline(switch, pipeline) is True
    assert switch.device_pipeline().cookie.cookie == pipeline.cookie
    assert push_pipeline(switch, pipeline) is False


def test_star_forwarding_reads_back_as_the_topology_implies(switch, pipeline, topo):
    setup_switch(switch, topo, pipeline)
    want, groups = forwarding_entries(topo, "s1")
    assert table_state(switch, ["MyIngress.l2_forward", "MyIngress.ipv4_lpm"]) == expected(switch, want)
    assert len(want) == 5   # four host MACs and broadcast
    flood = read_multicast_groups(switch)[groups[0].multicast_group_id]
    assert sorted(r.egress_port for r in flood.replicas) == [1, 2, 3, 4]


def test_job_entries_and_multicast_group_read_back(switch, pipeline, topo):
    setup_switch(switch, topo, pipeline)
    (job,), _ = jobs_on_switch(topo, "s1", POOL)
    want, (group,) = job_entries(job)
    tables = ["MyIngress.inc_job", "MyIngress.inc_worker", "MyEgress.inc_worker_addr"]
    assert table_state(switch, tables) == expected(switch, want)
    got = read_multicast_groups(switch)[group.multicast_group_id]
    assert sorted(got.replicas, key=repr) == sorted(group.replicas, key=repr)


def test_two_jobs_on_disjoint_hosts_are_both_admitted_with_their_own_groups(switch, pipeline, topo):
    two = Topology(topo.hosts, topo.switches, topo.links,
                   [JobSpec(1, ("h1", "h2")), JobSpec(2, ("h3", "h4"))])
    result = setup_switch(switch, two, pipeline)
    assert result.jobs_admitted == (1, 2)
    jobs = read_table_entries(switch, "MyIngress.inc_job")
    assert sorted((e.match["hdr.inc.job_id"], e.action_params["slot_base"], e.action_params["num_slots"])
                  for e in jobs) == [(1, 0, 256), (2, 256, 256)]
    groups = read_multicast_groups(switch)
    for job in jobs_on_switch(two, "s1", POOL)[0]:
        assert sorted(r.egress_port for r in groups[job.mcast_group].replicas) == \
            sorted(w.port for w in job.workers)


def test_counters_are_readable_by_name_and_zero_on_a_fresh_switch(switch, pipeline):
    push_pipeline(switch, pipeline)
    counters = read_counters(switch)
    assert set(counters) == COUNTERS
    assert all(cells == [(0, 0)] for cells in counters.values())


def test_clear_slots_zeroes_exactly_the_jobs_cells(switch, pipeline, topo):
    two = Topology(topo.hosts, topo.switches, topo.links,
                   [JobSpec(1, ("h1", "h2")), JobSpec(2, ("h3", "h4"))])
    setup_switch(switch, two, pipeline)
    first, second = jobs_on_switch(two, "s1", POOL)[0]
    touched = {first.register_indices[3]: 2, second.register_indices[-1]: 1, POOL + 5: 2}
    switch.registers.write("MyIngress.slot_count", touched)
    clear_slots(switch, first)
    values = switch.registers.read("slot_count")   # a unique suffix names it too
    assert len(values) == 2 * POOL
    expect = [0] * (2 * POOL)
    expect[second.register_indices[-1]] = 1
    assert values == expect


def test_unknown_table_is_refused_before_anything_is_sent(switch, pipeline):
    push_pipeline(switch, pipeline)
    with pytest.raises(ControllerError, match="no table 'MyIngress.nope'.*MyIngress.l2_forward"):
        install_table_entries(switch, [TableEntry("MyIngress.nope", "MyIngress.l2_forward_to",
                                                  {"port": 1}, {"hdr.ethernet.dstAddr": 1})])


def test_too_wide_value_shows_the_switchs_p4runtime_error_and_exits_1(server, pipeline, topo,
                                                                         tmp_path, build_dir):
    with Switch("s1", server.addr) as sw:
        push_pipeline(sw, pipeline)
    runtime = tmp_path / "s1-runtime.json"
    runtime.write_text(json.dumps({"table_entries": [
        {"table": "MyIngress.l2_forward", "match": {"hdr.ethernet.dstAddr": "08:00:00:00:00:01"},
         "action_name": "MyIngress.l2_forward_to", "action_params": {"port": 600}}]}))
    proc = controller(tmp_path, build_dir, "install", str(runtime))
    assert proc.returncode == 1
    assert "OUT_OF_RANGE" in proc.stderr and "port" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_runtime_json_entries_are_installed_and_read_back(server, pipeline, topo, tmp_path, build_dir):
    with Switch("s1", server.addr) as sw:
        push_pipeline(sw, pipeline)
    entry = {"table": "MyIngress.l2_forward", "match": {"hdr.ethernet.dstAddr": "08:00:00:00:00:09"},
             "action_name": "MyIngress.l2_forward_to", "action_params": {"port": 7}}
    runtime = tmp_path / "s1-runtime.json"
    flood_unknown = {"table": "MyIngress.l2_forward", "default_action": True,
                     "action_name": "MyIngress.l2_flood", "action_params": {"mcast_grp": 77}}
    runtime.write_text(json.dumps({"table_entries": [entry, flood_unknown], "multicast_group_entries": [
        {"multicast_group_id": 77, "replicas": [{"egress_port": 2, "instance": 0}]}]}))
    assert controller(tmp_path, build_dir, "install", str(runtime)).returncode == 0
    with Switch("s1", server.addr) as sw:
        assert read_default_entry(sw, "MyIngress.l2_forward") == TableEntry(
            "MyIngress.l2_forward", "MyIngress.l2_flood", {"mcast_grp": 77}, default_action=True)
    dumped = controller(tmp_path, build_dir, "entries")
    assert dumped.returncode == 0, dumped.stderr
    state = json.loads(dumped.stdout)
    assert {"table": "MyIngress.l2_forward", "match": {"hdr.ethernet.dstAddr": 0x080000000009},
            "action_name": "MyIngress.l2_forward_to", "action_params": {"port": 7}} in state["table_entries"]
    assert {"multicast_group_id": 77, "replicas": [{"egress_port": 2, "instance": 0}]} \
        in state["multicast_group_entries"]


def test_second_setup_by_a_new_controller_keeps_running_state(server, pipeline, topo, tmp_path, build_dir):
    first = controller(tmp_path, build_dir, "setup")
    assert first.returncode == 0, first.stderr
    with Switch("s1", server.addr) as sw:
        # A round in progress: two workers have contributed to slot 3.
        sw.registers.write("MyIngress.slot_count", {3: 2})
        sw.registers.write("MyIngress.slot_seen", {3: 0b11})
        before = table_state(sw, [name for name, _ in sw.context.get_tables()])
    second = controller(tmp_path, build_dir, "setup")
    assert second.returncode == 0, second.stderr
    assert "pipeline kept" in second.stderr
    with Switch("s1", server.addr) as sw:
        assert sw.registers.read("MyIngress.slot_count")[3] == 2
        assert sw.registers.read("MyIngress.slot_seen")[3] == 0b11
        assert table_state(sw, [name for name, _ in sw.context.get_tables()]) == before


def test_lower_election_id_controller_cannot_write(server, pipeline, topo):
    with Switch("s1", server.addr, election_id=(0, 10)) as low:
        with Switch("s1", server.addr, election_id=(0, 20)) as high:
            push_pipeline(high, pipeline)
            assert high.is_primary
            with pytest.raises(ControllerError, match="higher election id|PERMISSION_DENIED"):
                setup_switch(low, topo, pipeline)


def test_watch_reinstalls_everything_after_the_switch_restarts(server, pipeline, topo, tmp_path, build_dir):
    watch = subprocess.Popen(
        [sys.executable, "-m", "controller", "watch", "--topo", str(tmp_path / "topology.json"),
         "--build-dir", str(build_dir), "--poll", "0.2"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=(tmp_path / "watch.log").open("wb"))
    try:
        want = _wait_for_job(server.addr)
        server.stop()
        server.start()   # same port, no pipeline, no state
        assert _wait_for_job(server.addr) == want
        assert "lost the P4Runtime stream" in (tmp_path / "watch.log").read_text()
    finally:
        watch.terminate()
        watch.wait(timeout=30)
    assert watch.returncode == 0


def test_bad_arguments_print_usage_and_missing_files_an_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "controller", "registers"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage:" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "controller", "setup", "--topo", str(tmp_path / "none.json")],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "cannot read topology" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("poll", ["0", "-1", "nan", "x"])
def test_watch_refuses_a_poll_interval_that_would_busy_loop(tmp_path, poll):
    proc = subprocess.run([sys.executable, "-m", "controller", "watch", "--topo", str(tmp_path / "none.json"),
                           "--poll", poll], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage:" in proc.stderr and "--poll" in proc.stderr
    assert "Traceback" not in proc.stderr


def _wait_for_job(addr: str) -> list[TableEntry]:
    """The inc_job entries once a controller has installed them (bounded wait)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            with Switch("probe", addr, election_id=(0, 1)) as sw:
                if sw.device_pipeline() is not None:
                    found = read_table_entries(sw, "MyIngress.inc_job")
                    if found:
                        return found
        except ControllerError:
            pass
        time.sleep(0.2)
    pytest.fail(f"no job installed on {addr} within {WAIT_S:g} s")


def test_removed_job_is_readmitted_by_setup_with_its_slots_cleared(server, pipeline, topo, tmp_path, build_dir):
    assert controller(tmp_path, build_dir, "setup").returncode == 0
    with Switch("s1", server.addr) as sw:
        sw.registers.write("MyIngress.slot_seq", {0: 41, POOL: 42})   # rounds of the old job
    removed = controller(tmp_path, build_dir, "remove-job", "1")
    assert removed.returncode == 0, removed.stderr
    with Switch("s1", server.addr) as sw:
        assert read_table_entries(sw, "MyIngress.inc_job") == []
        assert read_table_entries(sw, "MyIngress.inc_worker") == []
        assert set(read_multicast_groups(sw)) == {1}   # only the flood group is left
        assert sw.registers.read("MyIngress.slot_seq")[0] == 41   # removing does not clear
    assert controller(tmp_path, build_dir, "setup").returncode == 0
    with Switch("s1", server.addr) as sw:
        assert len(read_table_entries(sw, "MyIngress.inc_job")) == 1
        seq = sw.registers.read("MyIngress.slot_seq")
        assert (seq[0], seq[POOL]) == (0, 0)


def test_clear_slots_command_zeroes_a_running_jobs_slots(server, pipeline, topo, tmp_path, build_dir):
    assert controller(tmp_path, build_dir, "setup").returncode == 0
    with Switch("s1", server.addr) as sw:
        sw.registers.write("MyIngress.slot_count", {7: 3})
    done = controller(tmp_path, build_dir, "clear-slots", "1")
    assert done.returncode == 0, done.stderr
    shown = controller(tmp_path, build_dir, "registers", "slot_count", "--index", "7")
    assert json.loads(shown.stdout) == {"7": 0}
    missing = controller(tmp_path, build_dir, "clear-slots", "5")
    assert missing.returncode == 1 and "no job 5" in missing.stderr


def test_read_only_commands_leave_the_writing_controller_primary(server, pipeline, topo, tmp_path, build_dir):
    """The writer keeps writing while a reader reads the largest register (seconds of gRPC)."""
    argv = [sys.executable, "-m", "controller", "registers", "MyIngress.slot_values",
            "--topo", str(tmp_path / "topology.json")]
    with Switch("s1", server.addr) as writer:
        push_pipeline(writer, pipeline)
        reader = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        refused, writes = [], 0
        try:
            while reader.poll() is None:
                try:
                    writer.registers.write("MyIngress.slot_count", {3: writes % 200})
                except ControllerError as err:
                    refused.append(str(err))
                writes += 1
                time.sleep(0.005)
        finally:
            if reader.poll() is None:
                reader.kill()
            _, err = reader.communicate()
        assert reader.returncode == 0, err
        assert writes > 10 and refused == []
