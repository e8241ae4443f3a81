"""The latency model's shape, its fit and out-of-sample check on synthetic measurements,
and the analysis CLI (its report and its one-line errors)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis.__main__ import main
from analysis.model import (MODELLED, TERMS, Fabric, Model, Setup, check, counts, fit, mpi_messages, points,
                            predict)
from hosts.inc import INC_K
from hosts.ring import RingStats
from tests.hosts.test_ring import ring_allreduce

REPO = Path(__file__).resolve().parents[2]
SETUP = Setup(payload_bytes=1024, window=128, cores=2, mtu=1500)
# Costs of the order the bench measures, each large enough somewhere to be seen.
TRUE = Model(SETUP, {
    "inc": {"call": 100e-6, "wakeups": 20e-6, "window_packets": 6e-6, "window_slots": 15e-6, "paced_packets": 12e-6},
    "ring": {"call": 300e-6, "wakeups": 50e-6, "chunks": 7e-6, "chained_chunks": 3e-6},
    "mpi": {"call": 30e-6, "wakeups": 20e-6, "segments": 5e-6, "rendezvous_segments": 2e-6}})
SIZES = tuple(64 << (2 * i) for i in range(9))          # 64 B to 4 MiB, as make bench
WORKERS = (2, 4, 8)


def synthetic_runs(model: Model, noise: float, seed: int = 1) -> list[dict]:
    """Five reps per point, each the model's time times (1 + noise x a standard normal); the
    workers' CPU equal to the time (no point stalls)."""
    rng = np.random.default_rng(seed)
    runs = []
    for a in MODELLED:
        for n in WORKERS:
            for s in SIZES:
                times = [model.predict(a, n, s) * (1 + noise * rng.standard_normal()) for _ in range(5)]
                runs.append(dict(algorithm=a, workers=n, bytes=s, times_s=times, cpu_s=times))
    return runs


def write_bench(path: Path, runs: list[dict]) -> Path:
    path.write_text(json.dumps({"config": {"payload_bytes": 1024, "window": 128, "mtu": 1500,
                                           "command": "python -m bench"},
                                "environment": {"versions": {"p4inc": "abc1234"}, "dirty": True,
                                                "machine": {"cores": 2}},
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
    real = Fabric(alpha_s=1.7e-6, bandwidth_Bps=float("inf"), window_limited=False)
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


def named_counts(algorithm: str, n: int, nbytes: int, setup: Setup = SETUP) -> dict[str, float]:
    return {t.name: c for t, c in zip(TERMS[algorithm], counts(algorithm, n, nbytes, setup))}


def test_inc_counts_the_first_window_apart_from_the_packets_paced_by_results():
    """300 packets of 1 KiB, window 128: 128 sent at once per worker, 172 each when a result
    frees a slot; the switch's batches follow the 128 slots, not the 8 workers."""
    c = named_counts("inc", 8, 300 * 1024)
    assert c == {"call": 1, "wakeups": 8 + 1 - 2, "window_packets": 8 * 128, "window_slots": 128,
                 "paced_packets": 8 * 172}
    small = named_counts("inc", 4, 64)       # under one packet is one packet
    assert (small["window_packets"], small["window_slots"], small["paced_packets"]) == (4, 1, 0)


def test_mpi_follows_open_mpi_s_choice_of_algorithm():
    """Open MPI 4.1's fixed decision: recursive doubling for small sums, the ring at N = 2 for
    mid sizes, Rabenseifner (halving, then doubling back) for large ones."""
    assert mpi_messages(8, 4096) == [4096] * 3
    assert mpi_messages(2, 1024) == [1024] and mpi_messages(2, 8192) == [8192]
    assert mpi_messages(2, 16384) == [8192, 8192] and mpi_messages(2, 4096) == [2048, 2048]
    assert mpi_messages(8, 64 << 10) == [32768, 16384, 8192, 8192, 16384, 32768]
    assert mpi_messages(2, 1 << 20) == [1 << 19, 1 << 19]


def test_mpi_counts_tcp_segments_and_those_past_the_eager_limit():
    """Segments of MTU - 52 = 1448 bytes, over every rank's messages."""
    eager = named_counts("mpi", 8, 64 << 10)       # 32, 16 and 8 KiB messages, twice each
    assert eager == {"call": 1, "wakeups": 7, "segments": 8 * 2 * (23 + 12 + 6), "rendezvous_segments": 0}
    big = named_counts("mpi", 4, 1 << 20)           # 512 and 256 KiB messages: all past the limit
    assert big["segments"] == big["rendezvous_segments"] == 4 * 2 * (363 + 182)
    assert named_counts("mpi", 2, 64)["segments"] == 2          # one step, one segment per rank
    jumbo = named_counts("mpi", 2, 1 << 20, Setup(payload_bytes=1024, window=128, mtu=9000))
    assert jumbo["segments"] == 2 * 2 * 59


@pytest.mark.parametrize("n, chunks", [(4, 1), (4, 2), (4, 3), (4, 8), (3, 40)])
def test_ring_chunk_counts_are_what_the_ring_sends(n, chunks):
    """The ring of hosts/ring.py, lossless on loopback: its chunks are the model's, and the
    busiest link's share is ceil(m/N) per step."""
    last: list[RingStats] = []
    inputs = [[np.ones(chunks * INC_K, np.int32) for _ in range(n)]]
    ring_allreduce(inputs, window=16, timeout=1.0, last_stats=last)
    c = named_counts("ring", n, chunks * INC_K * 4, Setup(payload_bytes=INC_K * 4, window=16))
    assert sum(s.chunks for s in last) == c["chunks"] == 2 * (n - 1) * chunks
    assert max(s.chunks for s in last) <= c["chained_chunks"] == 2 * (n - 1) * -(-chunks // n)
    assert sum(s.retransmissions for s in last) == 0


def test_fit_recovers_the_costs_of_noiseless_measurements():
    runs = synthetic_runs(TRUE, noise=0.0)
    fitted = fit(points(runs), SETUP)
    for algorithm, costs in TRUE.costs.items():
        assert fitted.costs[algorithm] == pytest.approx(costs, rel=1e-6), algorithm
    for algorithm, c in check(points(runs), fitted).items():
        assert c.in_sample.max < 1e-6 and c.out_of_sample.max < 1e-6, algorithm
        assert c.in_sample.points == c.out_of_sample.points == 27 and sorted(c.by_workers) == [2, 4, 8]


def test_fit_recovers_the_costs_within_the_noise_of_noisy_measurements():
    """5% noise per rep: every cost within 15% of the truth, every prediction within 10%,
    and the out-of-sample check says about as much."""
    runs = synthetic_runs(TRUE, noise=0.05, seed=7)
    fitted = fit(points(runs), SETUP)
    for algorithm, costs in TRUE.costs.items():
        assert fitted.costs[algorithm] == pytest.approx(costs, rel=0.15), algorithm
    for algorithm, c in check(points(runs), fitted).items():
        assert c.in_sample.median < 0.05 and c.out_of_sample.median < 0.05, algorithm
        assert c.out_of_sample.max < 0.15, algorithm


def test_a_call_waiting_for_a_timer_is_left_out_and_reported():
    """A ring point 10x its CPU (a delayed-ack timer fired) does not move the fit; it is listed."""
    runs = synthetic_runs(TRUE, noise=0.0)
    stalled = next(r for r in runs if (r["algorithm"], r["workers"], r["bytes"]) == ("ring", 4, 1 << 18))
    stalled["times_s"] = [10 * t for t in stalled["times_s"]]
    fitted = fit(points(runs), SETUP)
    assert fitted.costs["ring"] == pytest.approx(TRUE.costs["ring"], rel=1e-6)
    ring = check(points(runs), fitted)["ring"]
    assert [(p.workers, p.nbytes) for p in ring.stalled] == [(4, 1 << 18)] and ring.in_sample.points == 26
    # Without the CPU the bench records, nothing tells a stall apart: it is fitted like any point.
    for r in runs:
        del r["cpu_s"]
    assert check(points(runs), fit(points(runs), SETUP))["ring"].stalled == []


def test_out_of_sample_error_is_that_of_the_model_fitted_without_the_held_out_count():
    runs = synthetic_runs(TRUE, noise=0.0)
    for r in runs:
        if r["workers"] == 8 and r["algorithm"] == "inc":
            r["times_s"] = r["cpu_s"] = [t * 1.3 for t in r["times_s"]]
    pts = points(runs)
    inc = check(pts, fit(pts, SETUP))["inc"]
    # Fitted on N = 2 and 4 alone, the model is exact there and 30% fast at N = 8.
    assert inc.by_workers[8].median == pytest.approx(0.3 / 1.3, rel=1e-6)
    assert inc.by_workers[8].max == pytest.approx(0.3 / 1.3, rel=1e-6)
    without = fit([p for p in pts if p.workers != 8], SETUP)
    for p, predicted in inc.held_out:
        if p.workers == 8:
            assert predicted == pytest.approx(without.predict("inc", 8, p.nbytes), rel=1e-12)
    assert check(pts, fit(pts, SETUP))["ring"].out_of_sample.max < 1e-6


def test_fit_refuses_too_few_points():
    with pytest.raises(ValueError, match="too few measured points"):
        fit(points(synthetic_runs(TRUE, 0.0)[:3]), SETUP)
    # MPI without enough points is left out, not fitted to noise.
    runs = [r for r in synthetic_runs(TRUE, 0.0) if r["algorithm"] != "mpi" or r["bytes"] == 64]
    assert set(fit(points(runs), SETUP).costs) == {"inc", "ring"}


def test_cli_writes_plots_summary_and_report(tmp_path, caplog):
    caplog.set_level("INFO", logger="analysis")
    results = write_bench(tmp_path / "bench.json", synthetic_runs(TRUE, 0.05))
    (tmp_path / "budget.json").write_text(json.dumps({"budget": [
        {"workers": 2, "bytes": 256, "calls": 3, "call_s": 1e-3, "call_p99_s": 2e-3, "start_skew_s": 1e-4,
         "worker_call_s": 9e-4, "parts": {"send_s": 1e-4}}]}))
    assert main([str(results), "-o", str(tmp_path / "out")]) == 0
    for name in ("completion_time.png", "speedup.png", "fabric_speedup.png"):
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((tmp_path / "out" / "model.json").read_text())
    assert set(summary["fit"]) == set(summary["out_of_sample"]) == set(MODELLED)
    for algorithm in MODELLED:
        assert summary["fit"][algorithm]["points"] == 27 and summary["fit"][algorithm]["median_abs_rel_error"] < 0.05
        held_out = summary["out_of_sample"][algorithm]
        assert set(held_out["by_workers"]) == {"2", "4", "8"} and held_out["max_abs_rel_error"] < 0.25
        assert len(held_out["worst"]) == 3 and held_out["worst"][0]["rel_error"] == held_out["max_abs_rel_error"]
        assert summary["measured_model"]["costs_s"][algorithm] == pytest.approx(TRUE.costs[algorithm], rel=0.25)
    assert summary["stalled"] == []
    assert "inc in sample" in caplog.text and "leaving one N out" in caplog.text
    medians = {r["algorithm"]: np.median(r["times_s"]) for r in synthetic_runs(TRUE, 0.05)
               if r["workers"] == 2 and r["bytes"] == 64}
    assert summary["measured_speedup"]["mpi"]["2"]["64"] == pytest.approx(medians["mpi"] / medians["inc"])
    report = (tmp_path / "out" / "results.md").read_text()
    assert "abc1234 with uncommitted changes" in report and "| 64 B | 5 |" in report
    assert "| inc | paced_packets | per packet past the first window" in report and "No point stalled." in report
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
    results = write_bench(tmp_path / "bench.json", synthetic_runs(TRUE, 0.0))
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
    runs = synthetic_runs(TRUE, 0.0)
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


def test_one_worker_count_is_fitted_but_not_checked_out_of_sample(tmp_path):
    """With nothing to hold out, the summary says so (null) instead of an error it cannot know."""
    runs = [r for r in synthetic_runs(TRUE, 0.0) if r["workers"] == 4]
    assert main([str(write_bench(tmp_path / "bench.json", runs)), "-o", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "model.json").read_text())
    assert summary["fit"]["inc"]["points"] == 9 and summary["fit"]["inc"]["max_abs_rel_error"] < 1e-6
    assert summary["out_of_sample"]["inc"]["median_abs_rel_error"] is None
    assert summary["out_of_sample"]["inc"]["by_workers"] == {} and summary["out_of_sample"]["inc"]["worst"] == []
    assert "not checked (one worker count)" in (tmp_path / "results.md").read_text()
