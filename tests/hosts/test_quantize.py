"""Block floating point: the N-way int32 sum never overflows at the agreed exponent, the
dequantised sum is within the documented bound (written out here) of the exact one, and the
one quantizer (hosts/quantize.py: the agent's, and the compiled engine's equal) is the
documented rounding bit for bit, property-based against exact rationals."""
from __future__ import annotations

import math
from fractions import Fraction

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from hosts import quantize
from hosts.inc import INC_K
from hosts.numerics import BFLOAT16


@pytest.mark.parametrize("num_workers", [1, 2, 3, 8, 32])
@pytest.mark.parametrize("magnitude", [1e-30, 1e-3, 1.0, 7.5e4, 1e30])
def test_sum_at_agreed_exponent_fits_and_is_within_bound(num_workers: int, magnitude: float) -> None:
    rng = np.random.default_rng(num_workers)
    xs = [(rng.standard_normal((6, INC_K)) * magnitude).astype(np.float32) for _ in range(num_workers)]
    xs[0][0, 0] = np.float32(magnitude * 4)          # one large element sets a row's exponent
    exponents = np.max([quantize.chunk_exponents(x) for x in xs], axis=0)
    qs = [quantize.quantize(x, exponents, num_workers) for x in xs]
    assert all(fits.all() for _, fits in qs)
    wide = np.sum([q.astype(np.int64) for q, _ in qs], axis=0)
    assert np.abs(wide).max() < 2**31
    got = quantize.dequantize(wide.astype(np.int32), exponents, num_workers)
    exact = np.sum([x.astype(np.float64) for x in xs], axis=0)
    # docs/protocol.md: each worker is off by half a unit 2^-s, s = 30 - ceil(log2 N) - E
    half_unit = 0.5 * 2.0 ** (exponents - 30 + math.ceil(math.log2(num_workers)))
    assert np.all(np.abs(got - exact) <= num_workers * half_unit[:, None])


def test_chunk_exponent_is_a_strict_upper_bound() -> None:
    rows = np.array([[0.0] * INC_K, [1.0] + [0] * 31, [-0.75] + [0] * 31, [np.inf] + [0] * 31], np.float32)
    assert quantize.chunk_exponents(rows).tolist() == [quantize.EXPONENT_MIN, 1, 0, quantize.EXPONENT_MAX + 1]


def test_values_beyond_the_exponent_are_reported_not_wrapped() -> None:
    rows = np.array([[3.0] + [0] * 31, [np.nan] + [0] * 31, [0.5] + [0] * 31], np.float32)
    q, fits = quantize.quantize(rows, np.array([1, 5, 0]), 4)
    assert fits.tolist() == [False, False, True]
    assert not q[:2].any()


def oracle_exponent(row: list[Fraction | None]) -> int:
    """docs/protocol.md: the smallest E with every |x| < 2^E, within -127..128; -128 for an
    all-zero row, 128 for a row with inf or nan (None here)."""
    if any(v is None for v in row):
        return 128
    largest = max(abs(v) for v in row)
    if largest == 0:
        return -128
    e = -127
    while largest >= Fraction(2) ** e and e < 128:
        e += 1
    return e


def as_fractions(rows: np.ndarray) -> list[list[Fraction | None]]:
    return [[Fraction(float(v)) if np.isfinite(v) else None for v in row] for row in rows.astype(np.float64)]


FLOAT_BITS = {np.dtype(np.float32): np.uint32, np.dtype(np.float16): np.uint16, BFLOAT16: np.uint16}


def float_rows(dtype: np.dtype) -> st.SearchStrategy[np.ndarray]:
    """Rows of any bit patterns (subnormal, huge, zero, inf, nan), or of one magnitude."""
    bits = FLOAT_BITS[dtype]
    width = np.dtype(bits).itemsize * 8
    shape = st.tuples(st.integers(1, 5), st.integers(1, 33))
    anything = hnp.arrays(bits, shape, elements=st.integers(0, (1 << width) - 1)).map(lambda a: a.view(dtype))
    similar = st.tuples(shape, st.integers(-20, 20), st.integers(0, 2**32 - 1)).map(
        lambda t: (np.random.default_rng(t[2]).standard_normal(t[0]) * 2.0 ** t[1]).astype(dtype))
    return st.one_of(anything, similar)


@pytest.mark.parametrize("dtype", list(FLOAT_BITS), ids=str)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_the_quantizer_is_the_documented_rounding_bit_for_bit(dtype: np.dtype, data: st.DataObject) -> None:
    """hosts/quantize.py, which the agent sends with, against docs/protocol.md in exact rationals:
    each chunk's exponent, q = round(x * 2^s) to nearest with ties to even, s = 30 - L - E, zeros
    with `fits` False where a value is not below 2^E, and the dequantised sums exactly."""
    with np.errstate(over="ignore"):
        rows = data.draw(float_rows(dtype))
    n = data.draw(st.integers(1, 32))
    values = as_fractions(rows)
    local = [oracle_exponent(row) for row in values]
    found = quantize.chunk_exponents(rows.astype(np.float64))
    assert found.tolist() == local and found.dtype.kind == "i"
    exponents = [max(-128, min(127, e + data.draw(st.integers(-2, 5)))) for e in local]
    q, fits = quantize.quantize(rows.astype(np.float64), np.array(exponents), n)
    assert q.dtype == np.int32
    s = [30 - math.ceil(math.log2(n)) - e for e in exponents]
    for c, row in enumerate(values):
        fit = local[c] <= exponents[c] and local[c] < 128
        assert bool(fits[c]) == fit
        assert q[c].tolist() == ([round(v * Fraction(2) ** s[c]) for v in row] if fit else [0] * len(row))
    sums = data.draw(hnp.arrays(np.int32, rows.shape))
    got = quantize.dequantize(sums, np.array(exponents), n)
    assert [[Fraction(float(v)) for v in row] for row in got] == \
        [[Fraction(int(v)) / Fraction(2) ** s[c] for v in row] for c, row in enumerate(sums)]


def test_values_beyond_float32_get_the_exponent_of_inf() -> None:
    """Float64 rows (the agent widens its chunks) above 2^128 cannot be sent, as inf cannot."""
    rows = np.array([[2.0**128, 0.0], [1e300, 1.0], [-(2.0**127), 0.0]])
    assert quantize.chunk_exponents(rows).tolist() == [128, 128, 128]
    assert quantize.quantize(rows, np.array([127, 127, 127]), 2)[1].tolist() == [False, False, False]


def test_exponents_read_off_the_wire_as_int8_scale_in_full() -> None:
    """s = 30 - L - E for every int8 E: 158 at E = -128 does not wrap around in int8."""
    exponents = np.array([-128, -1, 0, 127], np.int8)
    assert quantize.scale_bits(exponents, 1).tolist() == [158, 31, 30, -97]
    assert quantize.scale_bits(exponents, 5).tolist() == [155, 28, 27, -100]
    sums = np.array([[1], [-1], [2**30 - 1], [3]], np.int32)
    got = quantize.dequantize(sums, exponents, 1)
    assert [Fraction(float(v)) for v in got[:, 0]] == [Fraction(1, 2**158), Fraction(-1, 2**31),
                                                        Fraction(2**30 - 1, 2**30), Fraction(3 * 2**97)]
