"""Block floating point for float AllReduce: each K-element chunk travels as int32
q = round(x * 2^s) with a shared exponent E (all |x| < 2^E) and s = 30 - ceil(log2 N) - E,
so the switch's N-way int32 sum cannot overflow. Error bound: hosts/numerics.py, docs/protocol.md.
"""
from __future__ import annotations

import math

import numpy as np

EXPONENT_MIN = -128     # an all-zero chunk: no constraint
EXPONENT_MAX = 127      # int8; values at or above 2^127 cannot be represented
WIRE_BITS = 30          # |q| < 2^(WIRE_BITS - L): N of them sum below 2^30, a bit to spare for rounding
EXPONENT_SLACK = 4      # a chunk sent at an exponent this much above the agreed one is not redone
KEPT_BASES = 4          # float calls of distinct lengths whose agreed exponents guess the next such call


def headroom_bits(num_workers: int) -> int:
    """Bits kept free so that the sum of `num_workers` values fits: ceil(log2 N)."""
    return max(0, math.ceil(math.log2(num_workers)))


def scale_bits(exponents: np.ndarray, num_workers: int) -> np.ndarray:
    """s per chunk: one bit of margin for rounding, headroom for the sum."""
    return WIRE_BITS - headroom_bits(num_workers) - np.asarray(exponents, dtype=np.int64)


def chunk_exponents(chunks: np.ndarray) -> np.ndarray:
    """Per row, the smallest E (clamped to int8) with every |x| < 2^E; non-finite rows get the maximum.

    EXPONENT_MIN stands for an all-zero row only: a row of tiny values (all below 2^-127, the
    subnormals) gets EXPONENT_MIN + 1, so it is still sent at a scale that keeps its digits.
    """
    # No floating-point warnings to silence here: abs, max and frexp pass inf and nan through.
    maxabs = np.abs(np.asarray(chunks, np.float64)).max(axis=1)
    e = np.minimum(np.maximum(np.frexp(maxabs)[1], EXPONENT_MIN + 1), EXPONENT_MAX + 1).astype(np.int64)
    e[maxabs == 0] = EXPONENT_MIN
    finite = np.isfinite(maxabs)
    if not finite.all():       # frexp gives no exponent for inf and nan; float32 values are below 2^128 anyway
        e[~finite] = EXPONENT_MAX + 1
    return e


def quantize(chunks: np.ndarray, exponents: np.ndarray, num_workers: int) -> tuple[np.ndarray, np.ndarray]:
    """Int32 rows for float rows at the given exponents, and per row whether it fit.

    A row that does not fit (a value at or above 2^E, or not finite) is sent as zeros
    with FLAG_OVERFLOW, so the switch's result tells every worker to redo it.
    """
    x = chunks.astype(np.float64)
    fits = np.all(np.isfinite(x), axis=1) & (chunk_exponents(chunks) <= np.asarray(exponents))
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.rint(np.ldexp(x, scale_bits(exponents, num_workers)[:, None]))
    q[~fits] = 0
    return q.astype(np.int32), fits


def dequantize(sums: np.ndarray, exponents: np.ndarray, num_workers: int) -> np.ndarray:
    """Float64 rows, exact, from the switch's int32 sums at the exponents they were sent with;
    the caller rounds them once into the call's dtype (numerics.from_sums)."""
    return np.ldexp(sums.astype(np.float64), -scale_bits(exponents, num_workers)[:, None])

