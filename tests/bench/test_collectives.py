"""python -m bench.collectives: bad arguments end in one usage line, each trial's check
(bench.calls) tells right results from wrong ones, and a small run in Mininet writes every
collective's checked points for the switch and the ring."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import calls

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args, message", [
    (["--workers", "9"], "--workers must be 2..8"),
    (["--reps", "0"], "--reps and --reps-large at least 1"),
    (["--sizes", "2"], "each size must be at least 4 bytes"),
    (["--sizes", "1k"], "sizes are comma-separated byte counts"),
    (["--collectives", "allreduce"], "invalid choice: 'allreduce'"),
    (["--timeout", "0"], "--timeout and --trial-timeout positive"),
])
def test_collectives_bench_refuses_bad_arguments_in_one_line(args, message):
    proc = subprocess.run([sys.executable, "-m", "bench.collectives", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m bench.collectives: error: ") and message in last, proc.stderr
    assert "Traceback" not in proc.stderr


def test_collectives_bench_refuses_an_unwritable_output(tmp_path):
    (tmp_path / "file").write_text("")
    proc = subprocess.run([sys.executable, "-m", "bench.collectives", "-o", str(tmp_path / "file" / "c.json")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "cannot write" in proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("algorithm", ["inc", "ring"])
def test_trial_checks_accept_numpy_results_and_reject_a_changed_element(algorithm):
    n, trial = 4, {"algorithm": algorithm, "bytes": 1024, "dtype": "float32", "seed": 3}
    inputs = [calls.tensor({**trial, "collective": "reduce"}, w, n) for w in range(n)]
    total = np.sum(np.array(inputs, np.float64), axis=0).astype(np.float32)
    part = total.size // n
    right = {"reduce": total, "reduce-scatter": total[part:2 * part], "broadcast": inputs[calls.ROOT],
             "all-gather": np.stack([x[:total.size // n] for x in inputs])}
    for collective, result in right.items():
        t = {**trial, "collective": collective}
        assert calls.is_right(result, t, rank=1 if collective == "reduce-scatter" else calls.ROOT, workers=n)
        wrong = result.copy()
        wrong.flat[5] += 1.0
        assert not calls.is_right(wrong, t, rank=1 if collective == "reduce-scatter" else calls.ROOT, workers=n)
    # Off the root, Reduce gives nothing; so does Barrier everywhere.
    assert calls.is_right(None, {**trial, "collective": "reduce"}, rank=2, workers=n)
    assert not calls.is_right(total, {**trial, "collective": "reduce"}, rank=2, workers=n)
    assert calls.is_right(None, {**trial, "collective": "barrier"}, rank=0, workers=n)


@pytest.mark.mininet
def test_collectives_bench_in_mininet_writes_checked_points(tmp_path, fabric_slot_free):
    """Every rank checks every trial's result before it counts: 4 per point at N = 4, 1 rep."""
    out = tmp_path / "collectives.json"
    proc = subprocess.run([sys.executable, "-m", "bench.collectives", "--workers", "4", "--sizes", "256",
                           "--reps", "1", "-o", str(out)], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    points = {(r["collective"], r["algorithm"], r["bytes"]): r for r in result["runs"]}
    assert set(points) == {(c, a, 0 if c == "barrier" else 256)
                           for c in ("reduce", "reduce-scatter", "broadcast", "all-gather", "barrier")
                           for a in ("inc", "ring")}
    for r in points.values():
        assert r["workers"] == 4 and len(r["times_s"]) == 1 and r["checked_results"] == 4
        assert 0 < r["median_s"] <= r["p99_s"]
    # The ring's ReduceScatter is the AllReduce's first half: 3 steps of one 8-element part
    # (one chunk) per rank; the switch's Barrier sends the ring nothing.
    assert points[("reduce-scatter", "ring", 256)]["agent_totals"]["chunks"] == 4 * 3
    assert set(result["config"]["baselines"]) == {"reduce", "reduce-scatter", "broadcast", "all-gather", "barrier"}
    assert isinstance(result["environment"]["dirty"], bool) and result["environment"]["versions"]["p4inc"]
    assert (tmp_path / "collectives.png").stat().st_size > 0
