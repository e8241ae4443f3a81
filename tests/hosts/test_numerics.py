"""hosts.numerics: the one tolerance every check uses is docs/protocol.md's bound (written out
independently in tests/hosts/documented.py), and a result outside it is reported wrong."""
from __future__ import annotations

from fractions import Fraction

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from hosts.numerics import BFLOAT16, check_sum, from_sums, host_sum_tolerance, sum_tolerance
from tests.hosts.documented import documented_bound, round_to

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
