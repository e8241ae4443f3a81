"""Block floating point: the N-way int32 sum never overflows at the agreed exponent,
and the dequantised sum is within the documented bound (written out here) of the exact one."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hosts import quantize
from hosts.inc import INC_K


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
