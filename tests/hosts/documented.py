"""docs/protocol.md's block floating point and its error bounds, and its eager rounds' gates,
written out here from the document and not from hosts/ (so a less precise quantiser, a lost bit
or a wrong exponent, a laxer hosts.numerics, or a gate too few or too many, fails the tests):
exact rationals and integers, no numpy rounding.
"""
from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np

K = 32   # elements per packet, the block that shares an exponent

# "relative to the chunk's largest value ... at most N * 2^(L + slack - 30)", L = ceil(log2 N), slack 4
BLOCK_RELATIVE = {1: 2.0**-26, 2: 2.0**-24, 3: 3 * 2.0**-24, 4: 2.0**-22, 5: 5 * 2.0**-23, 6: 6 * 2.0**-23,
                  7: 7 * 2.0**-23, 8: 2.0**-20}
# "plus half a unit of the result's dtype": (relative, absolute for subnormal results)
FINAL_ROUNDING = {np.dtype(np.float32): (2.0**-24, 2.0**-150), np.dtype(np.float16): (2.0**-11, 2.0**-25),
                  np.dtype(ml_dtypes.bfloat16): (2.0**-8, 2.0**-134)}
# (significand bits with the implicit one, smallest normal exponent, largest finite value's exponent)
FORMATS = {np.dtype(np.float32): (24, -126, 127), np.dtype(np.float16): (11, -14, 15),
           np.dtype(ml_dtypes.bfloat16): (8, -126, 127)}
MARGIN = 1        # "plus exponent_margin (1)"


def headroom(n: int) -> int:
    """L = ceil(log2 N), by counting."""
    return next(b for b in range(6) if 2**b >= n)


def documented_bound(inputs: list[np.ndarray], k: int = K) -> np.ndarray:
    """Per element of the flattened inputs, any call: the chunk's largest |x| over all workers (at
    least 2^-128, the smallest exponent a chunk is sent at) times BLOCK_RELATIVE, plus the final rounding."""
    n = len(inputs)
    x = np.array([t.astype(np.float64).ravel() for t in inputs])
    padded = np.zeros((n, -(-x.shape[1] // k) * k))
    padded[:, :x.shape[1]] = np.abs(x)
    chunk_max = np.maximum(padded.reshape(n, -1, k).max(axis=(0, 2)), 2.0**-128)
    block = np.repeat(chunk_max * BLOCK_RELATIVE[n], k)[:x.shape[1]]
    relative, absolute = FINAL_ROUNDING[inputs[0].dtype]
    return block + (np.abs(x.sum(axis=0)) + block) * relative + absolute


def agreed_exponents(inputs: list[np.ndarray], k: int = K) -> list[int]:
    """Per chunk, "the exponent they agree on": the smallest E with every worker's |x| < 2^E,
    at least -127 (all-zero chunks: -128)."""
    values = [[Fraction(float(v)) for v in t.astype(np.float64).ravel()] for t in inputs]
    size = len(values[0])
    out = []
    for start in range(0, size, k):
        largest = max(abs(v) for w in values for v in w[start:start + k])
        if largest == 0:
            out.append(-128)
            continue
        e = -127
        while largest >= Fraction(2) ** e:
            e += 1
        out.append(e)
    return out


def steady_exponents(inputs: list[np.ndarray], k: int = K) -> list[int]:
    """The exponent each chunk is sent at when the call repeats one of the same length and
    magnitudes: "that call's agreed exponent of chunk c ... plus exponent_margin"."""
    return [min(e + MARGIN, 127) for e in agreed_exponents(inputs, k)]


def steady_bound(inputs: list[np.ndarray], k: int = K) -> np.ndarray:
    """Per element, the bound of such a call, tight: each worker rounds to the nearest unit
    2^-s, s = 30 - L - E, so N of them are off by at most N * 2^(E - 31 + L); then the final rounding."""
    n = len(inputs)
    exact = np.abs(np.sum([t.astype(np.float64) for t in inputs], axis=0)).ravel()
    block = np.repeat([n * 2.0 ** (e - 31 + headroom(n)) for e in steady_exponents(inputs, k)], k)[:exact.size]
    relative, absolute = FINAL_ROUNDING[inputs[0].dtype]
    return (block + (exact + block) * relative + absolute).reshape(inputs[0].shape)


def exact_result(inputs: list[np.ndarray], exponents: list[int], k: int = K) -> np.ndarray:
    """The sum a call must return, bit for bit, when chunk c goes at exponents[c]: each worker
    sends round(x * 2^s) (to nearest, ties to even), the switch adds the integers, and the sum
    times 2^-s is rounded once (to nearest, ties to even) into the dtype."""
    n, dtype = len(inputs), inputs[0].dtype
    values = [[Fraction(float(v)) for v in t.astype(np.float64).ravel()] for t in inputs]
    out = []
    for i in range(len(values[0])):
        s = 30 - headroom(n) - exponents[i // k]
        total = sum(round(w[i] * Fraction(2) ** s) for w in values)     # round(): ties to even
        out.append(round_to(Fraction(total) / Fraction(2) ** s, dtype))
    return np.array(out, np.float64).astype(dtype).reshape(inputs[0].shape)


def round_to(x: Fraction, dtype: np.dtype) -> float:
    """x rounded to nearest (ties to even) in `dtype`, as a float (inf beyond its range)."""
    precision, emin, emax = FORMATS[np.dtype(dtype)]
    if x == 0:
        return 0.0
    e = emin
    while abs(x) >= Fraction(2) ** (e + 1) and e < emax + 1:
        e += 1
    unit = Fraction(2) ** (max(e, emin) - precision + 1)
    rounded = round(x / unit) * unit
    if abs(rounded) >= Fraction(2) ** (emax + 1):
        return float("inf") if x > 0 else float("-inf")
    return float(rounded)


def eager_gates(m: int, window: int) -> list[int]:
    """"Eager rounds": the items of an m-chunk eager call that every worker sends (i mod P = P - 1,
    P = W - W div 4, and the last)."""
    period = window - window // 4
    return sorted(set(range(period - 1, m, period)) | {m - 1})
