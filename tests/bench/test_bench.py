"""The benchmarks measure what they say: packet counts and outputs are checked, sums are
verified against numpy inside every trial, and bad arguments get a usage message."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import host, p4sim

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("workload, outputs_per_packet", [("ipv4_router", 1), ("allreduce", 1)])
def test_p4sim_bench_counts_every_packet_and_output(tmp_path, workload, outputs_per_packet):
    out = tmp_path / "p4sim.json"
    assert p4sim.main(["--packets", "400", "--workload", workload, "-o", str(out)]) == 0
    (result,) = json.loads(out.read_text())["results"]
    # The router forwards each packet; every 4th contribution completes a round and is
    # multicast to all 4 workers, so the aggregation path also emits one packet per packet in.
    assert result["packets"] == 400 and result["outputs"] == 400 * outputs_per_packet
    assert result["stats"]["errors"] == 0 and result["packets_per_s"] > 0


def test_host_bench_gets_the_tensor_back_over_both_transports(tmp_path):
    out = tmp_path / "host.json"
    assert host.main(["--elements", "3000", "--calls", "2", "-o", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    # 3000 elements are 94 chunks of 32; measure() raises if the echo's tensor differs.
    assert {name: r["packets"] for name, r in results.items()} == {"in_process": 188, "udp_loopback": 188}


def test_bench_refuses_bad_arguments_with_usage():
    for args in (["--workers", "9"], ["--sizes", "2"], ["--sizes", "x"]):
        proc = subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 2, args
        assert "usage:" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.mininet
def test_bench_in_mininet_writes_checked_runs_for_both_algorithms(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "bench", "--workers", "2", "--sizes", "256,4096",
                           "--reps", "1", "-o", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = json.loads(out.read_text())["runs"]
    assert {(r["algorithm"], r["bytes"]) for r in runs} == {("inc", 256), ("ring", 256), ("inc", 4096),
                                                           ("ring", 4096)}
    assert all(len(r["times_s"]) == 1 and r["times_s"][0] > 0 for r in runs)
