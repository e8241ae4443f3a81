"""The dtypes an AllReduce sums, and how far from the exact sum a result may be: the one
tolerance docs/protocol.md states, used by every check of a result (`hosts.worker --check`,
bench, the fabric's demo, tests). int32 is exact; float dtypes travel as block floating point.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from hosts import quantize
from hosts.inc import INC_K, REDUCE_OPS

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


@dataclass(frozen=True)
class FloatFormat:
    """What the final rounding of a float sum into its dtype costs."""
    precision: int              # significand bits, the implicit one included
    smallest_subnormal: int     # log2 of the smallest positive value


FLOAT_FORMATS: dict[np.dtype, FloatFormat] = {
    np.dtype(np.float32): FloatFormat(24, -149),
    np.dtype(np.float16): FloatFormat(11, -24),
    BFLOAT16: FloatFormat(8, -133),
}
SUM_DTYPES: tuple[np.dtype, ...] = (np.dtype(np.int32), *FLOAT_FORMATS)
# The switch's min and max compare int32: exact for int32 and (as ordered bits) float32.
REDUCE_DTYPES: dict[str, tuple[np.dtype, ...]] = {
    "sum": SUM_DTYPES, "min": (np.dtype(np.int32), np.dtype(np.float32)),
    "max": (np.dtype(np.int32), np.dtype(np.float32))}
_SIGN_CLEARED = np.int32(0x7FFFFFFF)


@dataclass(frozen=True)
class SumCheck:
    """A result against the float64 sum of its inputs."""
    max_abs_error: float
    correct: bool


_REDUCE_CODES = {name: code for code, name in REDUCE_OPS.items()}


def reduce_op(op: str, dtype: np.dtype) -> int:
    """The header's reduce_op for `op` on `dtype`; TypeError or ValueError if there is none."""
    codes = _REDUCE_CODES
    if op not in codes:
        raise ValueError(f"op must be one of {', '.join(codes)}, not {op!r}")
    if dtype not in REDUCE_DTYPES[op]:
        raise TypeError(f"allreduce {op} takes {', '.join(map(str, REDUCE_DTYPES[op]))} arrays, not {dtype}")
    return codes[op]


def to_ordered(array: np.ndarray) -> np.ndarray:
    """int32 whose signed order is the values' order: int32 as is; float32 bits, with the
    magnitude bits of negative values flipped (sign-magnitude to two's complement order)."""
    if array.dtype == np.int32:
        return array
    bits = np.ascontiguousarray(array, np.float32).view(np.int32)
    return np.where(bits < 0, bits ^ _SIGN_CLEARED, bits)


def from_ordered(ordered: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The inverse of `to_ordered` (flipping is its own inverse)."""
    if dtype == np.int32:
        return ordered
    return np.where(ordered < 0, ordered ^ _SIGN_CLEARED, ordered).astype(np.int32).view(np.float32)


def as_words(array: np.ndarray) -> np.ndarray:
    """The array's bytes as int32 words, zero padded to a whole word (for collectives that
    move data without combining it: bit for bit for any dtype)."""
    raw = np.frombuffer(np.ascontiguousarray(array).tobytes(), np.uint8)
    padded = np.zeros(-(-raw.size // 4) * 4, np.uint8)
    padded[:raw.size] = raw
    return padded.view(np.int32)


def from_words(words: np.ndarray, like: np.ndarray) -> np.ndarray:
    """The inverse of `as_words`: an array of `like`'s shape and dtype."""
    raw = np.ascontiguousarray(words, np.int32).view(np.uint8)[:like.nbytes]
    return raw.view(like.dtype).reshape(like.shape).copy()


def sum_tolerance(inputs: Sequence[np.ndarray], exponent_slack: int = quantize.EXPONENT_SLACK,
                  k: int = INC_K) -> np.ndarray:
    """Per element, how far the AllReduce sum of `inputs` (one array per worker) may be from
    the exact sum (docs/protocol.md, "Error bound"): 0 for int32; for floats, the block's
    rounding N * 2^(L + slack - 30) * (its K-element chunk's largest |x| over all workers,
    at least 2^-128), then half a unit of the result's dtype."""
    n = len(inputs)
    dtype = np.dtype(inputs[0].dtype)
    shape = inputs[0].shape
    if dtype == np.int32:
        return np.zeros(shape)
    fmt = FLOAT_FORMATS[dtype]
    x = np.array([np.asarray(t, np.float64).ravel() for t in inputs])
    size = x.shape[1]
    chunks = -(-size // k)
    padded = np.zeros((n, chunks * k))
    padded[:, :size] = np.abs(x)
    chunk_max = np.maximum(padded.reshape(n, chunks, k).max(axis=(0, 2)), 2.0 ** quantize.EXPONENT_MIN)
    relative = n * 2.0 ** (quantize.headroom_bits(n) + exponent_slack - quantize.WIRE_BITS)
    block = np.repeat(chunk_max * relative, k)[:size]
    exact = np.abs(x.sum(axis=0))
    final = (exact + block) * 2.0 ** -fmt.precision + 2.0 ** (fmt.smallest_subnormal - 1)
    return (block + final).reshape(shape)


def host_sum_tolerance(inputs: Sequence[np.ndarray]) -> np.ndarray:
    """Per element, how far a sum added up on hosts in the inputs' float dtype (the ring and MPI
    baselines) may be: N - 1 roundings, in any order, at most (N - 1) * 2^-p * sum |x|
    (docs/protocol.md, the ring baseline); 0 for int32, which wraps as numpy's sum does."""
    dtype = np.dtype(inputs[0].dtype)
    if dtype == np.int32:
        return np.zeros(inputs[0].shape)
    fmt = FLOAT_FORMATS[dtype]
    magnitude = np.sum([np.abs(np.asarray(t, np.float64)) for t in inputs], axis=0)
    return (len(inputs) - 1) * 2.0 ** -fmt.precision * magnitude + 2.0 ** (fmt.smallest_subnormal - 1)


def check_sum(result: np.ndarray, inputs: Sequence[np.ndarray], summed_on_hosts: bool = False,
              op: str = "sum", k: int = INC_K) -> SumCheck:
    """`result` against the float64 (int64) sum of `inputs`: within `sum_tolerance`, or for
    a baseline that adds on the hosts (`summed_on_hosts`), `host_sum_tolerance`. min and max
    are exact: they must equal numpy's."""
    errors = result_errors(result, inputs, summed_on_hosts, op, k)
    if errors is None:
        return SumCheck(np.inf, False)
    error, bound = errors
    return SumCheck(float(np.max(error, initial=0.0)), bool(np.all(error <= bound)))


def result_errors(result: np.ndarray, inputs: Sequence[np.ndarray], summed_on_hosts: bool = False,
                  op: str = "sum", k: int = INC_K) -> tuple[np.ndarray, np.ndarray] | None:
    """Per element, how far `result` is from numpy's float64 (int64) sum, min or max of
    `inputs`, and the bound it must stay within (`check_sum`; `k` elements per packet share
    an exponent); None if the shapes differ."""
    if op != "sum":
        exact = (np.min if op == "min" else np.max)(np.array(inputs), axis=0)
        if result.shape != exact.shape:
            return None
        with np.errstate(invalid="ignore"):      # inf - inf where both are inf: equal, no error
            error = np.where(result == exact, 0.0, np.abs(np.asarray(result, np.float64) - exact))
        return error, np.zeros(exact.shape)
    wide = np.int64 if np.dtype(inputs[0].dtype) == np.int32 else np.float64
    exact = np.sum([np.asarray(t, wide) for t in inputs], axis=0)
    if result.shape != exact.shape:
        return None
    if summed_on_hosts and wide is np.int64:      # the ring wraps around, as numpy's int32 sum
        exact = exact.astype(np.int32)
    error = np.abs(np.asarray(result, np.float64) - exact)
    return error, host_sum_tolerance(inputs) if summed_on_hosts else sum_tolerance(inputs, k=k)


def from_sums(values: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Float64 sums in `dtype` (rounded once, to nearest), and per row whether they stayed
    finite: a sum beyond the dtype's range must be reported, never returned as inf."""
    with np.errstate(over="ignore"):
        out = values.astype(dtype)
    return out, np.all(np.isfinite(out.astype(np.float64)), axis=-1)
