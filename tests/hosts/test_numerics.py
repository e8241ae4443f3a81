"""hosts.numerics: the one tolerance every check uses is docs/protocol.md's bound (written out
independently in tests/hosts/documented.py), and a result outside it is reported wrong."""
from __future__ import annotations

import warnings
from fractions import Fraction

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from hosts import quantize
from hosts.numerics import (BFLOAT16, SumCheck, check_sum, from_sums, host_sum_tolerance, reduce_op, result_errors,
                            sum_tolerance)
from tests.hosts.documented import FINAL_ROUNDING, documented_bound, round_to

FLOATS = [np.dtype(np.float32), np.dtype(np.float16), BFLOAT16]


def inputs_for(n: int, dtype: np.dtype, length: int = 100, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng([seed, n])
    scale = 10.0 ** rng.integers(-2, 3, length)      # chunks of different magnitude
    return [(rng.standard_normal(length) * scale).astype(dtype) for _ in range(n)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_sum_tolerance_is_the_documented_bound(n: int, dtype: np.dtype) -> None:
    inputs = inputs_for(n, dtype)
    np.testing.assert_allclose(sum_tolerance(inputs), documented_bound(inputs), rtol=1e-12, atol=0)


# float16's half unit (2^-25) hides 2^-128's rounding in float64: float32 and bfloat16 only.
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BFLOAT16], ids=str)
@pytest.mark.parametrize("n", [1, 2, 8])
def test_an_all_zero_chunk_is_bounded_at_the_smallest_exponent(n: int, dtype: np.dtype) -> None:
    """Zero chunks are sent at 2^-128: their bound is that exponent's rounding, not zero."""
    inputs = [np.zeros(64, dtype) for _ in range(n)]
    inputs[0][40] = 3.0                  # the second chunk is not all zero
    bound = sum_tolerance(inputs)
    assert bound.tolist() == documented_bound(inputs).tolist()
    assert bound[0] > FINAL_ROUNDING[dtype][1]


def test_the_bound_keeps_the_inputs_shape_and_each_workers_share() -> None:
    inputs = [np.arange(-48.0, 48.0, dtype=np.float32).reshape(3, 32) * (w + 1) for w in range(3)]
    bound = sum_tolerance(inputs)
    assert bound.shape == (3, 32)
    assert bound.ravel().tolist() == documented_bound(inputs).tolist()
    assert host_sum_tolerance(inputs).shape == (3, 32)
    ints = [np.ones((2, 5), np.int32)] * 3
    assert sum_tolerance(ints).tolist() == host_sum_tolerance(ints).tolist() == np.zeros((2, 5)).tolist()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_one_worker_sum_is_bounded_too(dtype: np.dtype) -> None:
    """N = 1 (a world of one): the block rounding of one worker, and no host additions at all."""
    inputs = [np.linspace(-5, 5, 40).astype(dtype)]
    assert sum_tolerance(inputs).tolist() == documented_bound(inputs).tolist()
    assert host_sum_tolerance(inputs).tolist() == [FINAL_ROUNDING[dtype][1]] * 40
    assert sum_tolerance([np.arange(4, dtype=np.int32)]).tolist() == [0.0] * 4


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_host_bound_of_zeros_is_half_the_smallest_subnormal(dtype: np.dtype) -> None:
    inputs = [np.zeros(3, dtype)] * 4
    assert host_sum_tolerance(inputs).tolist() == [FINAL_ROUNDING[dtype][1]] * 3


def test_the_bound_follows_the_chunk_size_asked_for() -> None:
    """k elements share an exponent: a large value widens the bound of its own chunk only."""
    inputs = [np.full(8, 1e-3, np.float32), np.zeros(8, np.float32)]
    inputs[1][0] = 1000.0
    result = np.sum([t.astype(np.float64) for t in inputs], axis=0)
    result[5] += 1e-6            # within 1000's rounding, far beyond 1e-3's
    assert check_sum(result, inputs, k=8).correct
    assert not check_sum(result, inputs, k=4).correct
    error, bound = result_errors(result, inputs, k=4)
    assert bound.tolist() == documented_bound(inputs, k=4).tolist()


def test_result_errors_are_against_the_float64_sum_and_the_bound_asked_for() -> None:
    inputs = inputs_for(3, np.dtype(np.float16), length=40, seed=4)
    exact = np.sum([t.astype(np.float64) for t in inputs], axis=0)
    result = (exact * (1 + 2.0**-12)).astype(np.float16)
    error, bound = result_errors(result, inputs)           # by default: a sum through the switch
    assert error.tolist() == np.abs(result.astype(np.float64) - exact).tolist()
    assert bound.tolist() == sum_tolerance(inputs).tolist()
    assert result_errors(result, inputs, summed_on_hosts=True)[1].tolist() == host_sum_tolerance(inputs).tolist()


def test_an_int32_sum_on_the_hosts_wraps_as_numpy_and_through_the_switch_must_not() -> None:
    inputs = [np.array([2**30, -(2**30), 7], np.int32)] * 3
    wrapped = np.sum(inputs, axis=0, dtype=np.int32)        # 3 * 2^30 wraps to -2^30
    assert check_sum(wrapped, inputs, summed_on_hosts=True) == SumCheck(0.0, True)
    assert check_sum(wrapped, inputs) == SumCheck(2.0**32, False)
    assert check_sum(inputs[0], inputs[:1]) == SumCheck(0.0, True)   # one worker: nothing to add


def test_a_result_of_another_shape_or_of_nothing() -> None:
    inputs = [np.ones(4, np.float32)] * 2
    assert check_sum(np.ones(3, np.float32), inputs) == SumCheck(np.inf, False)
    assert check_sum(np.ones(3, np.float32), inputs, op="max") == SumCheck(np.inf, False)
    empty = [np.zeros(0, np.float32)] * 2
    assert check_sum(np.zeros(0, np.float32), empty) == SumCheck(0.0, True)


def test_reduce_op_names_what_it_takes() -> None:
    assert [reduce_op(op, np.dtype(np.int32)) for op in ("sum", "min", "max")] == [0, 1, 2]
    with pytest.raises(ValueError, match=r"^op must be one of sum, min, max, not 'avg'$"):
        reduce_op("avg", np.dtype(np.int32))
    with pytest.raises(TypeError, match=r"^allreduce min takes int32, float32 arrays, not float16$"):
        reduce_op("min", np.dtype(np.float16))


def test_no_numpy_warnings_for_values_beyond_a_dtype() -> None:
    """inf, nan and sums beyond the dtype are results to report, not warnings to print."""
    signaling_nan = np.array([0x7FF4000000000000], np.uint64).view(np.float64)[0]     # ldexp: invalid
    rows = np.array([[np.inf, 1.0], [signaling_nan, 0.0], [1e300, -1e30]])     # 1e300 * 2^38 overflows
    halves = np.array([[np.inf, 1.0], [np.nan, 0.0]], np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quantize.chunk_exponents(halves)
        quantize.quantize(rows, np.array([-10, -10, -10]), 4)
        out, finite = from_sums(np.array([[1e10, 1.0], [1.0, 2.0]]), np.dtype(np.float16))
        infinite = [np.array([np.inf, -np.inf], np.float32)] * 2
        check_sum(np.array([np.inf, -np.inf], np.float32), infinite, op="max")
    assert finite.tolist() == [False, True]


def test_the_bound_at_eight_workers_is_two_to_the_minus_twenty_of_the_chunk_max() -> None:
    inputs = [np.zeros(32, np.float32) for _ in range(8)]
    inputs[3][7] = 1.0
    # 2^-20 from the block, then the float32 rounding of a sum of 1 (and of its error)
    expected = 2.0**-20 + (1.0 + 2.0**-20) * 2.0**-24 + 2.0**-150
    assert sum_tolerance(inputs)[7] == pytest.approx(expected, rel=1e-12)


def test_int32_tolerance_is_zero_and_a_wrong_element_is_caught() -> None:
    inputs = [np.arange(40, dtype=np.int32) * (w + 1) for w in range(3)]
    right = np.sum(inputs, axis=0, dtype=np.int32)
    assert check_sum(right, inputs).correct
    wrong = right.copy()
    wrong[39] += 1
    assert not check_sum(wrong, inputs).correct and check_sum(wrong, inputs).max_abs_error == 1.0


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_a_result_just_outside_the_bound_is_wrong_just_inside_is_right(dtype: np.dtype) -> None:
    inputs = inputs_for(4, dtype, seed=1)
    exact = np.sum([t.astype(np.float64) for t in inputs], axis=0)
    bound = documented_bound(inputs)
    inside = exact + 0.9 * bound
    outside = inside.copy()
    outside[50] = exact[50] + 1.1 * bound[50]
    assert check_sum(inside, inputs).correct
    assert not check_sum(outside, inputs).correct


def test_a_float32_sum_added_up_on_the_hosts_passes_the_host_bound() -> None:
    inputs = inputs_for(8, np.dtype(np.float32), length=5000, seed=2)
    ring_order = inputs[0].copy()
    for t in inputs[1:]:
        ring_order = ring_order + t          # float32 additions, as the ring baseline does
    assert check_sum(ring_order, inputs, summed_on_hosts=True).correct
    magnitude = np.sum([np.abs(t.astype(np.float64)) for t in inputs], axis=0)
    np.testing.assert_allclose(host_sum_tolerance(inputs), 7 * 2.0**-24 * magnitude + 2.0**-150, rtol=1e-12)


@pytest.mark.parametrize("op, reduce", [("min", np.min), ("max", np.max)])
def test_min_and_max_must_equal_numpy_exactly(op: str, reduce) -> None:
    inputs = inputs_for(3, np.dtype(np.float32), seed=3)
    right = reduce(inputs, axis=0)
    assert check_sum(right, inputs, op=op).correct
    wrong = right.copy()
    wrong[7] = np.nextafter(wrong[7], np.float32(np.inf))       # one unit off
    assert not check_sum(wrong, inputs, op=op).correct
    # The error in float64: a float32 difference would round it.
    far = right.copy()
    far[3] = np.float32(1e-8) + right[3] if right[3] == 0 else right[3] * np.float32(1 + 2.0**-20)
    off = abs(float(far[3]) - float(right[3]))
    assert check_sum(far, inputs, op=op).max_abs_error == off


def near_ties(dtype: np.dtype) -> st.SearchStrategy[np.ndarray]:
    """Sums just off, and exactly on, the midpoint between two neighbours of `dtype` (where a
    rounding through another format first, or towards zero, gives another value), and others."""
    bits = np.uint32 if dtype == np.float32 else np.uint16
    neighbours = hnp.arrays(bits, st.integers(1, 16), elements=st.integers(0, 0x7F7FFFFF if bits == np.uint32
                                                                            else 0x7BFF if dtype == np.float16
                                                                            else 0x7F7F))

    def around(a: np.ndarray) -> np.ndarray:
        low = a.view(dtype).astype(np.float64)
        high = np.nextafter(a.view(dtype), np.array(np.inf, dtype)).astype(np.float64)
        finite = np.isfinite(high)            # the largest value has no neighbour above
        mid = (low[finite] + high[finite]) / 2
        off = (high[finite] - low[finite]) * 2.0**-20
        return np.concatenate([mid, mid + off, mid - off, -mid])
    return st.one_of(neighbours.map(around),
                     hnp.arrays(np.float64, st.integers(1, 16), elements=st.floats(-1e40, 1e40)))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_sums_are_rounded_once_to_nearest_into_the_dtype(dtype: np.dtype, data: st.DataObject) -> None:
    """numerics.from_sums, the last step of every float sum: docs/protocol.md's single rounding
    to nearest, ties to even (written out in exact rationals), inf beyond the range, reported."""
    with np.errstate(over="ignore"):
        values = data.draw(near_ties(dtype))
    got, finite = from_sums(values[None, :], dtype)
    expected = [round_to(Fraction(float(v)), dtype) for v in values]
    assert got[0].astype(np.float64).tolist() == expected
    assert bool(finite[0]) == all(np.isfinite(expected))
