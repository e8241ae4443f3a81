"""float16 and bfloat16 AllReduce: converted on the host to the switch's block floating point
and rounded back once, within docs/protocol.md's bound of the float64 sum (written out in
tests/hosts/documented.py); a sum beyond the dtype's range is reported, never returned as inf."""
from __future__ import annotations

import numpy as np
import pytest
from p4sim import Switch

from hosts.agent import IncOverflowError
from hosts.inc import INC_K
from hosts.numerics import BFLOAT16
from tests.hosts.documented import documented_bound
from tests.hosts.test_allreduce import LOSSY, run_allreduce

HALVES = [np.dtype(np.float16), BFLOAT16]


def tensors(rng: np.random.Generator, n: int, length: int, dtype: np.dtype, scale: float) -> list[np.ndarray]:
    return [(rng.standard_normal(length) * scale).astype(dtype) for _ in range(n)]


def assert_within_bound(outs: list[np.ndarray], inputs: list[np.ndarray]) -> None:
    exact = np.sum([t.astype(np.float64) for t in inputs], axis=0)
    bound = documented_bound(inputs)
    for out in outs:
        assert out.dtype == inputs[0].dtype and out.shape == inputs[0].shape
        assert np.all(np.abs(out.astype(np.float64) - exact) <= bound)
        np.testing.assert_array_equal(out.view(np.uint16), outs[0].view(np.uint16))   # same bits everywhere


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("length", [1, INC_K + 1, 300])
def test_half_precision_sum_is_within_the_documented_bound(switch: Switch, dtype: np.dtype, n: int,
                                                           length: int) -> None:
    rng = np.random.default_rng([n, length])
    inputs = tensors(rng, n, length, dtype, 10.0 ** rng.integers(-3, 3))
    assert_within_bound(run_allreduce(switch, [inputs])[0], inputs)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_precision_survives_loss_and_changes_of_magnitude(switch: Switch, dtype: np.dtype) -> None:
    rng = np.random.default_rng(21)
    calls = [tensors(rng, 3, 200, dtype, s) for s in (1.0, 300.0, 1e-3)]
    for inputs, outs in zip(calls, run_allreduce(switch, calls, faults=LOSSY)):
        assert_within_bound(outs, inputs)


def test_float16_subnormal_inputs_keep_their_digits(switch: Switch) -> None:
    tiny = [np.array([2.0**-24, 3 * 2.0**-24, -2.0**-20, 2.0**-15], np.float16) for _ in range(4)]
    for out in run_allreduce(switch, [tiny])[0]:
        np.testing.assert_array_equal(out, np.array([2.0**-22, 3 * 2.0**-22, -2.0**-18, 2.0**-13], np.float16))


def test_float16_sum_beyond_65504_is_reported_then_the_workers_stay_in_step(switch: Switch) -> None:
    big = np.full(3 * INC_K, 1.0, np.float16)
    big[INC_K + 4] = 40000.0                 # fits float16; two of them do not
    after = [np.full(5, 0.25, np.float16)] * 2
    first, second = run_allreduce(switch, [[big, big], after])
    for err in first:
        assert isinstance(err, IncOverflowError) and err.chunks == [1] and "float16's range" in str(err)
    for out in second:
        np.testing.assert_array_equal(out, np.full(5, 0.5, np.float16))


@pytest.mark.parametrize("bad", [np.inf, np.nan, 2.0**127], ids=str)
def test_bfloat16_values_beyond_range_or_not_finite_are_reported(switch: Switch, bad: float) -> None:
    inputs = [np.ones(2 * INC_K, BFLOAT16) for _ in range(2)]
    inputs[1][INC_K] = bad
    for err in run_allreduce(switch, [inputs])[0]:
        assert isinstance(err, IncOverflowError) and err.chunks == [1]


def test_bfloat16_sum_beyond_its_range_is_reported_not_inf(switch: Switch) -> None:
    inputs = [np.full(10, 2.0**126 * 1.5, BFLOAT16) for _ in range(4)]      # each fits, the sum 6 * 2^126 does not
    for err in run_allreduce(switch, [inputs])[0]:
        assert isinstance(err, IncOverflowError) and "bfloat16's range" in str(err)
