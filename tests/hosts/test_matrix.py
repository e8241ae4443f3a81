"""hosts/matrix.py: the collective x op x dtype matrix one worker runs. Its checker fails on
wrong results (judged here against tests/hosts/documented.py's bound, written apart from
hosts/), and the whole matrix passes through p4sim in process with lossy links."""
from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from p4sim import Switch

from hosts.agent import IncOverflowError, JobConfig, Worker
from hosts.inprocess import Faults, InProcessFabric
from hosts.matrix import Combination, check, combinations, matrix_inputs, run_matrix
from tests.hosts.conftest import Job, host, install_forwarding, install_job
from tests.hosts.documented import documented_bound
from tests.hosts.test_cli import ROOT, run_inc_workers

N = 3


def test_matrix_covers_every_collective_op_and_dtype_with_varied_roots() -> None:
    names = [c.name for c in combinations(4)]
    reducing = [f"{c}.{op}.{d}" for c in ("allreduce", "reduce", "reduce-scatter")
                for d, ops in [("int32", "sum min max"), ("float32", "sum min max"), ("float16", "sum"),
                               ("bfloat16", "sum")] for op in ops.split()]
    moving = [f"{c}.{d}" for c in ("broadcast", "all-gather") for d in ("int32", "float32", "float16", "bfloat16")]
    stripped = sorted(n.rsplit(".root", 1)[0] for n in names if not n.endswith("overflow"))
    assert stripped == sorted(reducing + moving + ["barrier.int32"])
    assert {c.root for c in combinations(4) if c.collective in ("reduce", "broadcast")} == {0, 1, 2, 3}
    assert [c.name for c in combinations(4) if c.overflow] == ["allreduce.sum.int32.overflow",
                                                              "allreduce.sum.float16.overflow"]


def exact_for(combo: Combination, inputs: list[np.ndarray], me: int) -> np.ndarray:
    """numpy's answer, rounded once into the dtype (test's own oracle, not hosts.matrix's)."""
    if combo.collective == "reduce-scatter":
        inputs = [x.reshape(len(inputs), -1)[me] for x in inputs]
    if combo.op in ("min", "max"):
        return getattr(np, combo.op)(inputs, axis=0)
    return np.sum(np.array(inputs, np.float64), axis=0).astype(inputs[0].dtype)


@pytest.mark.parametrize("collective, op, dtype", [
    ("allreduce", "sum", "int32"), ("allreduce", "sum", "float32"), ("reduce-scatter", "sum", "float16"),
    ("allreduce", "sum", "bfloat16"), ("allreduce", "min", "float32"), ("reduce-scatter", "max", "int32")])
def test_checker_passes_numpy_and_fails_a_result_past_the_documented_bound(collective, op, dtype) -> None:
    combo = Combination(collective, dtype, op)
    inputs = matrix_inputs(combo, 5, N, 200, seed=1)
    right = exact_for(combo, inputs, me=1)
    assert check(combo, inputs, 1, right).passed
    wrong = right.copy()
    if dtype == "int32" or op != "sum":
        wrong[7] = np.nextafter(wrong[7], np.inf) if dtype == "float32" else wrong[7] + 1
    else:
        part = [x.reshape(N, -1)[1] for x in inputs] if collective == "reduce-scatter" else inputs
        wrong[7] = float(right[7]) + 2 * documented_bound(part)[7] + abs(float(right[7])) * 2.0**-6
    outcome = check(combo, inputs, 1, wrong)
    assert not outcome.passed and outcome.error > outcome.bound and "off by" in outcome.detail


def test_checker_fails_wrong_bytes_shapes_and_missing_or_extra_results() -> None:
    bc = Combination("broadcast", "bfloat16", root=2)
    inputs = matrix_inputs(bc, 0, N, 50, seed=2)
    assert check(bc, inputs, 0, inputs[2].copy()).passed
    flipped = inputs[2].copy()
    flipped.view(np.uint16)[3] ^= 1
    assert not check(bc, inputs, 0, flipped).passed
    assert not check(bc, inputs, 0, inputs[2].astype(np.float32)).passed      # right values, wrong dtype
    ag = Combination("all-gather", "int32")
    assert not check(ag, inputs := matrix_inputs(ag, 1, N, 40, seed=2), 0, np.stack(inputs)[:, :-1]).passed
    reduce = Combination("reduce", "int32", "sum", root=1)
    inputs = matrix_inputs(reduce, 2, N, 40, seed=2)
    assert check(reduce, inputs, 0, None).passed and check(reduce, inputs, 1, exact_for(reduce, inputs, 1)).passed
    assert not check(reduce, inputs, 0, exact_for(reduce, inputs, 0)).passed     # a non-root got data
    assert not check(reduce, inputs, 1, None).passed                              # the root got nothing
    assert not check(reduce, inputs, 1, TimeoutError("lost")).passed


@pytest.mark.parametrize("dtype", ["int32", "float16"])
def test_an_overflowing_sum_passes_only_when_reported(dtype: str) -> None:
    combo = Combination("allreduce", dtype, "sum", overflow=True)
    inputs = matrix_inputs(combo, 0, 2, 40, seed=3)
    with np.errstate(over="ignore"):
        wrapped = np.sum(inputs, axis=0, dtype=inputs[0].dtype)       # int32 wraps, float16 goes to inf
    assert np.all(np.isfinite(np.array(inputs, np.float64)))
    assert check(combo, inputs, 0, IncOverflowError("overflow", [0])).passed
    assert not check(combo, inputs, 0, wrapped).passed


def test_the_whole_matrix_passes_through_p4sim_with_lossy_links(switch: Switch) -> None:
    job = Job(job_id=7, hosts=tuple(host(i) for i in range(1, N + 1)), num_slots=8)
    install_forwarding(switch, list(job.hosts))
    install_job(switch, job)
    with InProcessFabric(switch, list(job.hosts), Faults(loss=0.05, duplicate=0.02, reorder=0.05, seed=4)) as fabric:
        workers = [Worker(JobConfig(job.job_id, w, N, window=8, timeout=0.05, give_up_after=20), fabric.transport(w))
                   for w in range(N)]
        with ThreadPoolExecutor(N) as pool:
            outcomes = list(pool.map(lambda w: run_matrix(w, size=40, seed=5), workers))
    for per_worker in outcomes:
        assert [o.combination for o in per_worker] == combinations(N)
        assert [o.combination.name for o in per_worker if not o.passed] == []
        assert sum(o.retransmits for o in per_worker) > 0      # the loss was felt
    # Floats came within the bound, and no closer than exact: the worst error is reported.
    float_sums = [o for o in outcomes[0] if o.combination.op == "sum" and o.combination.dtype != "int32"
                  and o.result is not None]
    assert all(0 <= o.error <= o.bound for o in float_sums) and any(o.error > 0 for o in float_sums)


def test_matrix_cli_reports_every_combination_and_writes_the_results(switch: Switch, tmp_path) -> None:
    n = 2
    reports = run_inc_workers(switch, n, ["--matrix", "--size", "33", "--seed", "6", "--output", str(tmp_path / "w{w}.npz")])
    combos = combinations(n)
    for w, r in enumerate(reports):
        assert r["failed"] == [] and [c["name"] for c in r["matrix"]] == [c.name for c in combos]
        assert all(c["passed"] for c in r["matrix"]) and r["packets_sent"] >= len(combos)
        with np.load(tmp_path / f"w{w}.npz") as results:
            index = [c.name for c in combos].index("allreduce.sum.int32")
            inputs = matrix_inputs(combos[index], index, n, 33, seed=6)
            np.testing.assert_array_equal(results["allreduce.sum.int32"], np.sum(inputs, axis=0))
            assert "barrier.int32" not in results.files


def test_matrix_refuses_options_it_does_not_take() -> None:
    p = subprocess.run([sys.executable, "-m", "hosts.worker", "--job-id", "1", "--worker-id", "0", "--workers", "2",
                        "--matrix", "--size", "10", "--collective", "reduce"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--matrix needs --size" in p.stderr and "Traceback" not in p.stderr
