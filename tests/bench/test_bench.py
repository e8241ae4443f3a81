"""The benchmarks measure what they say: packet counts and outputs are checked, sums are
verified against numpy inside every trial, and bad arguments get a usage message."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import budget, host, p4sim
from hosts.engine import spin_for

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("workload, outputs_per_packet", [("ipv4_router", 1), ("allreduce", 1)])
def test_p4sim_bench_counts_every_packet_and_output(tmp_path, workload, outputs_per_packet):
    out = tmp_path / "p4sim.json"
    assert p4sim.main(["--packets", "400", "--c-packets", "800", "--workload", workload, "-o", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert [r["backend"] for r in results] == ["python", "c"]
    for result, packets in zip(results, (400, 800)):
        # The router forwards each packet; every 4th contribution completes a round and is
        # multicast to all 4 workers, so the aggregation path also emits one packet per packet in.
        assert result["packets"] == packets and result["outputs"] == packets * outputs_per_packet
        # The rate is the count over the measured time, not a number that merely came out positive.
        assert result["stats"]["errors"] == 0 and result["seconds"] > 0
        assert result["packets_per_s"] == pytest.approx(packets / result["seconds"])


def test_host_bench_gets_the_tensor_back_over_both_transports(tmp_path):
    out = tmp_path / "host.json"
    assert host.main(["--elements", "3000", "--calls", "2", "--small-calls", "50", "-o", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    # 3000 elements are 94 chunks of 32; measure() raises if the echo's tensor differs.
    assert {name: (r["engine"], r["packets"]) for name, r in results.items()} == {
        "in_process/python": ("python", 188), "udp_loopback/python": ("python", 188), "udp_loopback/c": ("c", 188)}
    for r in results.values():
        assert r["seconds"] > 0 and r["packets_per_s"] == pytest.approx(188 / r["seconds"])
        assert r["tensor_MB_per_s"] == pytest.approx(2 * 3000 * 4 / r["seconds"] / 1e6)
        assert r["small_bytes"] == 256 and r["small_call_s"] > 0 and r["small_cpu_per_call_s"] > 0
    for name in ("udp_loopback/python", "udp_loopback/c"):     # a call over the echo's bare round trip
        assert results[name]["small_call_over_rtt"] == pytest.approx(
            results[name]["small_call_s"] / results[name]["echo_rtt_s"])


def test_bench_refuses_bad_arguments_with_usage():
    for args in (["--workers", "9"], ["--sizes", "2"], ["--sizes", "x"], ["--window", "0"], ["--reps-large", "0"],
                 ["--spin", "-1"]):
        proc = subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 2, args
        assert "usage:" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("module, args, message", [
    ("bench", [], "cannot write"),
    ("bench.host", [], "cannot write"),
    ("bench.p4sim", [], "cannot write"),
    ("bench.host", ["--window", "0"], "--window must be 1..2047"),
])
def test_bench_clis_end_in_one_line_errors_not_tracebacks(tmp_path, module, args, message):
    """A file where the output's folder should be makes -o unwritable, even for root."""
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "out.json" if message == "cannot write" else tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", module, *args, "-o", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"python -m {module}: error: ") and message in last, proc.stderr
    assert "usage:" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.mininet
def test_bench_in_mininet_writes_checked_runs_for_inc_ring_and_mpi(tmp_path, fabric_slot_free):
    """Every trial's sum is checked by each worker (and each MPI rank) before it counts."""
    out = tmp_path / "bench.json"
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    proc = subprocess.run([sys.executable, "-m", "bench", "--workers", "2", "--sizes", "256,131072",
                           "--reps", "2", "--reps-large", "1", "--elements-per-packet", "32", "-o", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    runs = result["runs"]
    assert {(r["algorithm"], r["bytes"]): len(r["times_s"]) for r in runs} == {
        (a, s): 2 if s == 256 else 1 for a in ("inc", "ring", "mpi") for s in (256, 131072)}
    assert all(0 < r["median_s"] <= r["p99_s"] <= max(r["times_s"]) for r in runs)
    # The ring's own counts come back per point: 2(N-1) x chunks data packets per call, over both workers.
    ring = {r["bytes"]: r["agent_totals"] for r in runs if r["algorithm"] == "ring"}
    assert ring[256]["chunks"] == 2 * 2 * 2 and ring[131072]["chunks"] == 2 * 1024
    # INC's are the timed call's (not the one-element barriers around it): K-element chunks per
    # worker per call, here 2 per 256 B and 1024 per 128 KiB, over both workers and the repetitions.
    inc = {r["bytes"]: r["agent_totals"] for r in runs if r["algorithm"] == "inc"}
    assert inc[256]["chunks"] == 2 * 2 * 2 and inc[131072]["chunks"] == 2 * 1024
    assert inc[131072]["elements"] == 2 * 32768 and result["config"]["elements_per_packet"] == 32
    # Every point records the CPU all workers' processes spent per call (MPI's ranks too).
    assert all(len(r["cpu_s"]) == len(r["times_s"]) and r["cpu_per_call_s"] > 0 for r in runs)
    # Two workers share this machine's cores: they spin if each has one (hosts.engine.spin_for).
    assert result["config"]["spin_s"] == {"2": spin_for(2)._asdict()}
    assert result["environment"]["versions"]["p4inc"] == head.stdout.strip()
    assert isinstance(result["environment"]["dirty"], bool)


def test_budget_times_calls_from_the_last_start_and_states_them_in_packet_round_trips():
    def reply(start, end, send_s):
        return {"start": start, "end": end, "stats": {"send_s": send_s, "dtype": "float32", "srtt_s": None,
                                                      "retransmits": 1, "packets_sent": 9}}
    calls = [[reply(0.0, 1.0, 0.1), reply(0.2, 1.1, 0.3)],       # call 0.9 s after a 0.2 s skew
             [reply(5.0, 5.5, 0.2), reply(5.0, 5.7, 0.2)],       # call 0.7 s, skew 0
             [reply(9.0, 9.9, 0.5), reply(9.4, 10.0, 0.1)]]      # call 0.6 s after a 0.4 s skew
    b = budget.call_budget(2, 256, calls, probes=[0.1, 0.2, 0.3, 0.4])
    assert b["call_s"] == pytest.approx(0.7) and b["start_skew_s"] == pytest.approx(0.2)
    assert b["from_first_start_s"] == pytest.approx(1.0)
    assert b["worker_call_s"] == pytest.approx(np.median([1.0, 0.9, 0.5, 0.7, 0.9, 0.6]))
    assert b["packet_rtt_s"] == pytest.approx(0.25) and b["probes"] == 4
    # Text and None are left out; counts stay in the JSON, only times and retransmits make the table.
    assert b["parts"] == {"send_s": pytest.approx(0.2), "retransmits": 1.0, "packets_sent": 9.0}
    table = budget.budget_table([b]).splitlines()
    assert table[0].split(" | ")[7:] == ["from the first start (us)", "packet RTT (us)", "RTT p99 (us)",
                                         "call / RTT", "send (us)", "retransmits |"]
    assert table[2] == "| 2 | 256 | 3 | 700000 | 896000 | 200000 | 800000 | 1000000 | 250000 | 397000 | 2.8 | 200000 | 1 |"


def test_call_time_runs_from_the_last_rank_in_and_takes_mpi_ranks_from_one_reply():
    workers = [{"start": 1.0, "end": 3.0}, {"start": 1.5, "end": 2.5}]
    assert budget.call_time(workers) == pytest.approx((1.5, 0.5))
    assert budget.call_time([{"ok": True, "ranks": workers}]) == pytest.approx((1.5, 0.5))


def test_call_cpu_sums_every_rank_and_is_none_where_one_did_not_measure():
    assert budget.call_cpu([{"cpu_s": 1e-4}, {"cpu_s": 3e-4}]) == pytest.approx(4e-4)
    assert budget.call_cpu([{"ranks": [{"cpu_s": 1e-3}, {"cpu_s": 2e-3}]}]) == pytest.approx(3e-3)    # MPI's rank 0
    assert budget.call_cpu([{"cpu_s": 1e-4}, {"start": 0.0}]) is None
