"""The latency model's shape, its fit and out-of-sample check on synthetic measurements,
and the analysis CLI (its report and its one-line errors)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis.__main__ import main
from analysis.model import Fabric, errors, fit, out_of_sample, predict, terms
from hosts.inc import INC_K
from hosts.ring import RingStats
from tests.hosts.test_ring import ring_allreduce

REPO = Path(__file__).resolve().parents[2]
SOFTWARE = Fabric(alpha_s=300e-6, bandwidth_Bps=5e7, switch_packet_s=30e-6, switch_aggregate_s=50e-6,
                  wakeup_s=40e-6, call_s=400e-6, worker_s=100e-6, payload_bytes=128, window=16)
SIZES = (64, 256, 4096, 65536, 1 << 20)


def synthetic_runs(fabric: Fabric, noise: float, seed: int = 1) -> list[dict]:
    rng = np.random.default_rng(seed)
    runs = [dict(algorithm=a, workers=n, bytes=s,
                 times_s=[predict(fabric, a, n, s) * (1 + noise * rng.standard_normal()) for _ in range(5)])
            for a in ("inc", "ring") for n in (2, 4, 8) for s in SIZES]
    # MPI is measured, not modelled: its points must not move the fit.
    return runs + [dict(algorithm="mpi", workers=n, bytes=s, times_s=[1.0]) for n in (2, 4, 8) for s in SIZES]


def write_bench(path: Path, runs: list[dict]) -> Path:
    path.write_text(json.dumps({"config": {"payload_bytes": 128, "window": 16, "command": "python -m bench"},
                                "environment": {"versions": {"p4inc": "abc1234"}, "dirty": True},
                                "runs": runs}))
    return path


def test_line_rate_fabric_speedup_tends_to_ring_bandwidth_factor():
    """A window wide enough for the link: the ratio is the bus-bandwidth argument's 2(N-1)/N."""
    real = Fabric.describe(link_gbps=400, switch_latency_ns=500, host_overhead_us=1, payload_bytes=1024,
                           window=1 << 16)
    for n in (8, 64):
        big = predict(real, "ring", n, 1 << 32) / predict(real, "inc", n, 1 << 32)
        assert big == pytest.approx(2 * (n - 1) / n, rel=0.01)


def test_small_message_speedup_counts_latency_steps():
    real = Fabric(alpha_s=1.7e-6, bandwidth_Bps=float("inf"))
    small = predict(real, "ring", 64, 64) / predict(real, "inc", 64, 64)
    assert small == pytest.approx(2 * 63, rel=0.01)
    assert predict(real, "tree", 64, 64) / predict(real, "inc", 64, 64) == pytest.approx(12, rel=0.01)


def test_a_real_fabric_runs_at_most_a_window_of_packets_per_round_trip():
    """16 packets of 128 B per 1.7 us round trip is 1.2 GB/s, far below a 400 Gb/s link; the
    ring's round trip is a chunk and its ack, two steps, so it gets half that."""
    real = Fabric.describe(link_gbps=400, switch_latency_ns=500, host_overhead_us=1, payload_bytes=128, window=16)
    assert real.rate_Bps("inc") == pytest.approx(16 * 128 / 1.7e-6)
    assert real.rate_Bps("ring") == pytest.approx(16 * 128 / 3.4e-6)
    big = predict(real, "ring", 8, 1 << 32) / predict(real, "inc", 8, 1 << 32)
    assert big == pytest.approx(2 * 2 * 7 / 8, rel=0.01)
    wide = Fabric.describe(link_gbps=400, switch_latency_ns=500, host_overhead_us=1, payload_bytes=1024, window=4096)
    assert wide.rate_Bps("ring") == wide.rate_Bps("inc") == pytest.approx(400e9 / 8)
    # The measured fabric is bound by CPU, not by its window: its rate is its fitted bandwidth.
    assert SOFTWARE.rate_Bps("ring") == SOFTWARE.bandwidth_Bps


def test_ring_with_fewer_chunks_than_workers_counts_only_the_chunks_it_sends():
    """One chunk, 8 workers: 14 steps each forward that one chunk over one link, not 8 of them;
    its ack waits for the delayed-ack timer, after the call."""
    t = terms("ring", 8, 128, payload=128, window=16)
    assert (t.steps, t.chunks, t.acks, t.passes, t.wakeups) == (14, 14, 0, 2 * 14, 14)
    two = terms("ring", 8, 256, payload=128, window=16)
    assert (two.chunks, two.passes, two.wakeups) == (28, 2 * 28, 2 * 14)
    big = terms("ring", 8, 8 * 128 * 32, payload=128, window=16)   # 32 chunks per link and step
    assert big.chunks == 14 * 8 * 32 and big.acks == 8 * 14 * 32 // 8
    assert big.passes == 2 * (big.chunks + big.acks)
    # Per link-step: woken for its chunks, then for the 2 acks that free the window past 16.
    assert big.wakeups == 14 * 8 * (1 + 2)
    assert terms("inc", 8, 128 * 20, payload=128, window=16).wakeups == 8 * (1 + 4)


@pytest.mark.parametrize("n, chunks", [(4, 1), (4, 2), (4, 3), (4, 8), (3, 40)])
def test_ring_terms_count_what_the_ring_sends(n, chunks):
    """The ring of hosts/ring.py, lossless on loopback: its chunks and the acks sent during the
    call (the delayed-ack timer, 0.25 s here, fires after it) are the model's."""
    last: list[RingStats] = []
    inputs = [[np.ones(chunks * INC_K, np.int32) for _ in range(n)]]
    ring_allreduce(inputs, window=16, timeout=1.0, last_stats=last)
    t = terms("ring", n, chunks * INC_K * 4, payload=INC_K * 4, window=16)
    assert sum(s.chunks for s in last) == t.chunks == 2 * (n - 1) * chunks
    assert sum(s.acks for s in last) == t.acks
    assert sum(s.retransmissions for s in last) == 0


def test_fit_recovers_parameters_of_noiseless_measurements():
    fitted = fit(synthetic_runs(SOFTWARE, noise=0.0), payload_bytes=128)
    assert fitted.max_abs_rel_error < 1e-6 and fitted.points == 30
    assert fitted.fabric.alpha_s == pytest.approx(SOFTWARE.alpha_s, rel=1e-3)
    assert fitted.fabric.switch_packet_s == pytest.approx(SOFTWARE.switch_packet_s, rel=1e-3)
    assert fitted.fabric.switch_aggregate_s == pytest.approx(SOFTWARE.switch_aggregate_s, rel=1e-3)
    assert fitted.fabric.wakeup_s == pytest.approx(SOFTWARE.wakeup_s, rel=1e-3)
    assert fitted.fabric.call_s + 8 * fitted.fabric.worker_s == pytest.approx(1.2e-3, rel=1e-3)


def test_out_of_sample_error_is_that_of_the_fitted_model_on_the_held_out_count():
    exact = out_of_sample(synthetic_runs(SOFTWARE, noise=0.0), payload_bytes=128)
    assert sorted(exact) == [2, 4, 8] and all(h.max_abs_rel_error < 1e-6 for h in exact.values())
    # Held-out points measured 30% slow show up as 30% error, whatever the other counts say.
    runs = synthetic_runs(SOFTWARE, noise=0.0)
    for r in runs:
        if r["workers"] == 8 and r["algorithm"] != "mpi":
            r["times_s"] = [t * 1.3 for t in r["times_s"]]
    held = out_of_sample(runs, payload_bytes=128)[8]
    assert held.median_abs_rel_error == pytest.approx(0.3 / 1.3, rel=1e-3)
    assert held.max_abs_rel_error == pytest.approx(0.3 / 1.3, rel=1e-3)
    # The error is that of the fabric it reports, through the same `predict` the plots use.
    eight = [r for r in runs if r["workers"] == 8]
    assert np.median(errors(held.fabric, eight)) == held.median_abs_rel_error
    assert held.fabric == fit([r for r in runs if r["workers"] != 8], payload_bytes=128).fabric


def test_fit_refuses_too_few_points():
    with pytest.raises(ValueError, match="at least 7"):
        fit(synthetic_runs(SOFTWARE, 0.0)[:6], payload_bytes=128)


def test_cli_writes_plots_summary_and_report(tmp_path):
    results = write_bench(tmp_path / "bench.json", synthetic_runs(SOFTWARE, 0.05))
    (tmp_path / "budget.json").write_text(json.dumps({"budget": [
        {"workers": 2, "bytes": 256, "calls": 3, "call_s": 1e-3, "call_p99_s": 2e-3, "start_skew_s": 1e-4,
         "worker_call_s": 9e-4, "parts": {"send_s": 1e-4}}]}))
    assert main([str(results), "-o", str(tmp_path / "out")]) == 0
    for name in ("completion_time.png", "speedup.png", "fabric_speedup.png"):
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((tmp_path / "out" / "model.json").read_text())
    assert summary["fit"]["median_abs_rel_error"] < 0.05
    assert set(summary["out_of_sample"]) == {"2", "4", "8"}
    assert summary["measured_speedup"]["ring"]["8"]["256"] > summary["measured_speedup"]["ring"]["2"]["256"]
    assert summary["measured_speedup"]["mpi"]["2"]["64"] == pytest.approx(1 / np.median(
        [r["times_s"] for r in synthetic_runs(SOFTWARE, 0.05) if r["algorithm"] == "inc" and r["workers"] == 2
         and r["bytes"] == 64][0]))
    report = (tmp_path / "out" / "results.md").read_text()
    assert "abc1234 with uncommitted changes" in report and "| 64 B | 5 |" in report
    assert "Latency budget" in report and "| 2 | 256 | 3 | 1000 | 2000 | 100 | 900 | 100 |" in report


def test_cli_rejects_a_file_that_is_not_a_bench_result(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit) as e:
        main([str(bad)])
    assert e.value.code == 2
    assert "not a usable bench result" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--link-gbps", "0"], "--link-gbps must be positive"),
    (["--workers", "1"], "at least 2 workers"),
    (["--workers", "8", "1"], "at least 2 workers"),
    (["--window", "0"], "--window must be at least 1"),
    (["-o", "{file}/out"], "cannot write"),
])
def test_cli_bad_input_is_one_line_error_not_traceback(tmp_path, args, message):
    results = write_bench(tmp_path / "bench.json", synthetic_runs(SOFTWARE, 0.0))
    (tmp_path / "file").write_text("")
    args = [a.format(file=tmp_path / "file") for a in args]
    proc = subprocess.run([sys.executable, "-m", "analysis", str(results), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m analysis: error: ") and message in last, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "model.json").exists()


def test_cli_plots_and_reports_the_host_cpu_per_call(tmp_path):
    """INC's CPU over MPI's per point, from the per-call sums the bench records."""
    runs = synthetic_runs(SOFTWARE, 0.0)
    for r in runs:
        r["cpu_s"] = {"inc": [1e-4, 2e-4, 3e-4], "ring": [4e-4] * 3, "mpi": [1e-3, 1e-3, 5e-3]}[r["algorithm"]]
    del runs[0]["cpu_s"]              # a point measured before the bench recorded CPU
    assert main([str(write_bench(tmp_path / "bench.json", runs)), "-o", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "model.json").read_text())
    assert summary["measured_cpu_ratio"]["mpi"]["8"]["65536"] == pytest.approx(0.2)
    assert summary["measured_cpu_ratio"]["ring"]["2"]["256"] == pytest.approx(0.5)
    assert "64" not in summary["measured_cpu_ratio"]["mpi"]["2"]
    points = {(p["algorithm"], p["workers"], p["bytes"]): p for p in summary["points"]}
    assert points[("mpi", 4, 64)]["cpu_per_call_s"] == pytest.approx(1e-3)
    assert "cpu_per_call_s" not in points[(runs[0]["algorithm"], runs[0]["workers"], runs[0]["bytes"])]
