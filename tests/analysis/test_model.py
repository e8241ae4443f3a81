"""The latency model's shape, its fit on synthetic measurements, and the analysis CLI."""
import json

import numpy as np
import pytest

from analysis.__main__ import main
from analysis.model import Fabric, fit, predict

SOFTWARE = Fabric(alpha_s=300e-6, bandwidth_Bps=5e7, host_packet_s=20e-6,
                  switch_packet_s=30e-6, payload_bytes=128)


def synthetic_runs(fabric: Fabric, noise: float, seed: int = 1) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [dict(algorithm=a, workers=n, bytes=s,
                 times_s=[predict(fabric, a, n, s) * (1 + noise * rng.standard_normal()) for _ in range(5)])
            for a in ("inc", "ring") for n in (2, 4, 8) for s in (256, 4096, 65536, 1 << 20)]


def test_line_rate_fabric_speedup_tends_to_ring_bandwidth_factor():
    real = Fabric.describe(link_gbps=400, switch_latency_ns=500, host_overhead_us=1)
    for n in (8, 64):
        big = predict(real, "ring", n, 1 << 32) / predict(real, "inc", n, 1 << 32)
        assert big == pytest.approx(2 * (n - 1) / n, rel=0.01)


def test_small_message_speedup_counts_latency_steps():
    real = Fabric.describe(link_gbps=400, switch_latency_ns=500, host_overhead_us=1)
    small = predict(real, "ring", 64, 64) / predict(real, "inc", 64, 64)
    assert small == pytest.approx(2 * 63, rel=0.01)
    assert predict(real, "tree", 64, 64) / predict(real, "inc", 64, 64) == pytest.approx(12, rel=0.01)


def test_fit_recovers_parameters_of_noiseless_measurements():
    fitted = fit(synthetic_runs(SOFTWARE, noise=0.0), payload_bytes=128)
    assert fitted.max_abs_rel_error < 1e-6
    assert fitted.fabric.alpha_s == pytest.approx(SOFTWARE.alpha_s, rel=1e-3)
    assert fitted.fabric.switch_packet_s == pytest.approx(SOFTWARE.switch_packet_s, rel=1e-3)


def test_fit_refuses_too_few_points():
    with pytest.raises(ValueError, match="at least 4"):
        fit(synthetic_runs(SOFTWARE, 0.0)[:3], payload_bytes=128)


def test_cli_writes_plots_and_summary(tmp_path):
    results = tmp_path / "bench.json"
    results.write_text(json.dumps({"config": {"payload_bytes": 128}, "runs": synthetic_runs(SOFTWARE, 0.05)}))
    assert main([str(results), "-o", str(tmp_path / "out")]) == 0
    for name in ("completion_time.png", "speedup.png", "fabric_speedup.png"):
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((tmp_path / "out" / "model.json").read_text())
    assert summary["fit"]["median_abs_rel_error"] < 0.05
    assert summary["measured_speedup"]["8"]["256"] > summary["measured_speedup"]["2"]["256"]


def test_cli_rejects_a_file_that_is_not_a_bench_result(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit) as e:
        main([str(bad)])
    assert e.value.code == 2
    assert "not a usable bench result" in capsys.readouterr().err
