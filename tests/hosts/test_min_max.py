"""AllReduce min and max (issue 12 item 1) through p4sim running allreduce.p4: int32 as it is and
float32 as order-preserving int32, so both equal numpy's minimum and maximum exactly, also with
loss, duplication and reordering; a NaN is reported on every worker, never returned."""
from __future__ import annotations

import numpy as np
import pytest
from p4sim import Switch

from hosts.agent import IncOverflowError, JobConfig, Worker
from hosts.inc import INC_K
from hosts.inprocess import Faults
from hosts.numerics import BFLOAT16, check_sum
from tests.hosts.conftest import counter
from tests.hosts.test_allreduce import LOSSY, run_allreduce

REDUCE = {"min": np.min, "max": np.max}


def run_ops(switch: Switch, calls: list[tuple[str, list[np.ndarray]]], faults: Faults = Faults()) -> list[list[object]]:
    """Each worker makes the same calls (op, its input); each worker's result or exception per call."""
    return run_allreduce(switch, [inputs for _, inputs in calls], faults=faults, ops=[op for op, _ in calls])


def float32_inputs(rng: np.random.Generator, n: int, length: int) -> list[np.ndarray]:
    """Signs mixed, magnitudes from subnormal to near float32's largest, zeros of both signs, infinities."""
    out = []
    for _ in range(n):
        x = np.ldexp(rng.uniform(-1, 1, length), rng.integers(-149, 128, length)).astype(np.float32)
        x[rng.random(length) < 0.05] = rng.choice([0.0, -0.0, np.inf, -np.inf])
        out.append(x)
    return out


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_int32_and_float32_min_max_equal_numpy_exactly(switch: Switch, op: str, n: int) -> None:
    rng = np.random.default_rng([n, len(op)])
    ints = [rng.integers(-2**31, 2**31, 3 * INC_K + 7, dtype=np.int64).astype(np.int32) for _ in range(n)]
    floats = float32_inputs(rng, n, 3 * INC_K + 7)
    int_outs, float_outs = run_ops(switch, [(op, ints), (op, floats)])
    for out in int_outs:
        assert out.dtype == np.int32
        np.testing.assert_array_equal(out, REDUCE[op](ints, axis=0))
    for out in float_outs:
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, REDUCE[op](floats, axis=0))
        assert check_sum(out, floats, op=op).correct


def test_min_max_and_sum_interleave_with_loss_on_the_same_slots(switch: Switch) -> None:
    rng = np.random.default_rng(3)
    n = 4
    calls = [("max", float32_inputs(rng, n, 500)),
             ("sum", [rng.integers(-1000, 1000, 500, dtype=np.int32) for _ in range(n)]),
             ("min", [rng.integers(-2**31, 2**31, 500, dtype=np.int64).astype(np.int32) for _ in range(n)])]
    for (op, inputs), outs in zip(calls, run_ops(switch, calls, faults=LOSSY)):
        expected = REDUCE[op](inputs, axis=0) if op in REDUCE else np.sum(inputs, axis=0, dtype=np.int32)
        for out in outs:
            np.testing.assert_array_equal(out, expected)
    assert counter(switch, "MyIngress.results_resent") > 0


def test_a_nan_is_reported_on_every_worker_and_they_stay_in_step(switch: Switch) -> None:
    inputs = [np.zeros(2 * INC_K, np.float32) for _ in range(3)]
    inputs[1][INC_K + 3] = np.nan
    after = [np.full(4, w, np.float32) for w in range(3)]
    first, second = run_ops(switch, [("max", inputs), ("max", after)])
    for err in first:
        assert isinstance(err, IncOverflowError) and err.chunks == [1] and "not a number" in str(err)
    for out in second:
        np.testing.assert_array_equal(out, np.full(4, 2, np.float32))


@pytest.mark.parametrize("op, dtype, error", [("min", np.float16, TypeError), ("max", BFLOAT16, TypeError),
                                               ("prod", np.int32, ValueError)])
def test_ops_the_switch_cannot_do_are_refused_before_sending(op: str, dtype, error: type) -> None:
    worker = Worker(JobConfig(1, 0, 2), transport=None)    # never reaches the transport
    with pytest.raises(error):
        worker.allreduce(np.ones(3, dtype), op)
