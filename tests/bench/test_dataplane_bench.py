"""bench.dataplane measures what it says: every frame of each burst comes back byte for byte on
both backends, the ceiling is measured in the same run, round trips are timed (root: veths)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import dataplane

REPO = Path(__file__).resolve().parents[2]


def run_bench(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "dataplane.json"
    assert dataplane.main(["--frames", "3000", "--python-frames", "500", "--rtt", "50", *args, "-o", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["ceiling"]["received"] == report["ceiling"]["frames"] == 3000
    return {(r["workload"], r["backend"]): r for r in report["results"]}


def check_runs(runs: dict) -> None:
    for (workload, backend), r in runs.items():
        assert r["frames"] == r["received"] == (3000 if backend == "c" else 500)
        assert r["lost"] == r["mismatched"] == r["reordered"] == 0
        assert r["packets_per_s"] > 0 and r["switch_cpu_ns_per_packet"] > 0
        if workload == "allreduce":     # a round needs all four workers: no one-frame round trip
            assert r["rtt_us"]["samples"] == 0
        else:
            assert r["rtt_us"]["samples"] == 50 and 0 < r["rtt_us"]["median"] <= r["rtt_us"]["p99"]


@pytest.mark.mininet
def test_dataplane_bench_forwards_every_frame_on_both_backends(tmp_path):
    runs = run_bench(tmp_path, "--workload", "forward")
    assert set(runs) == {("forward", "c"), ("forward", "python")}
    check_runs(runs)


@pytest.mark.mininet
def test_dataplane_bench_routes_and_aggregates_every_frame(tmp_path):
    runs = run_bench(tmp_path, "--workload", "ipv4_router", "--workload", "allreduce", "--backend", "c")
    assert set(runs) == {("ipv4_router", "c"), ("allreduce", "c")}
    check_runs(runs)


@pytest.mark.parametrize("args", [["--frames", "0"], ["--backend", "java"]])
def test_dataplane_bench_refuses_bad_arguments_with_usage(args, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.dataplane", *args, "-o", str(tmp_path / "x.json")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "usage:" in proc.stderr and "Traceback" not in proc.stderr
