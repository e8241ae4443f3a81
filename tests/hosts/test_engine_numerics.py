"""The compiled engine's numerics give the same bits as the Python path's (hosts/quantize.py,
hosts/numerics.py, numpy's and ml_dtypes' conversions), property-based over float32, float16
and bfloat16: normal, subnormal, huge, zero, inf and nan values, exact ties of the rounding
and their neighbours, and every exponent a header can carry."""
from __future__ import annotations

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from hosts import engine, numerics, quantize
from hosts.numerics import BFLOAT16

DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BFLOAT16]
BITS = {np.dtype(np.float32): np.uint32, np.dtype(np.float16): np.uint16, BFLOAT16: np.uint16}
SETTINGS = settings(max_examples=300, deadline=None)


@pytest.fixture(scope="module")
def lib():
    if engine.unavailable() is not None:
        pytest.fail(f"the compiled engine does not build here: {engine.unavailable()}")
    return engine.library()


def c_array(built, ctype: str, array: np.ndarray):
    return built.ffi.from_buffer(f"{ctype}[]", np.ascontiguousarray(array))


def values(dtype: np.dtype, shape: tuple[int, ...] | st.SearchStrategy) -> st.SearchStrategy[np.ndarray]:
    """Arrays of `dtype` drawn from all its bit patterns (every class of value is likely)."""
    bits = BITS[dtype]
    width = np.dtype(bits).itemsize * 8
    specials = [0, 1, (1 << (width - 1)), (1 << (width - 1)) | 1]     # +0, smallest subnormal, -0, its negative
    element = st.one_of(st.integers(0, (1 << width) - 1), st.sampled_from(specials))
    return hnp.arrays(bits, shape, elements=element).map(lambda a: a.view(dtype))


def rows(dtype: np.dtype) -> st.SearchStrategy[np.ndarray]:
    """m x k chunks, some rows of similar magnitude (so some fit the exponents below)."""
    shape = st.tuples(st.integers(1, 6), st.integers(1, 40))
    mixed = values(dtype, shape)
    scaled = st.tuples(shape, st.integers(-30, 30), st.integers(0, 2**32 - 1)).map(
        lambda t: saturated(np.random.default_rng(t[2]).standard_normal(t[0]) * 2.0 ** t[1], dtype))
    return st.one_of(mixed, scaled)


def saturated(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`x` in `dtype`, values beyond its range becoming inf (as they may in a caller's array)."""
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def widen(built, dtype: np.dtype, a: np.ndarray) -> np.ndarray:
    out = np.empty(a.size)
    built.lib.eng_widen(engine.DTYPES[dtype], c_array(built, "uint8_t", a.view(np.uint8)), a.size,
                        c_array(built, "double", out))
    return out


def narrow(built, dtype: np.dtype, d: np.ndarray) -> np.ndarray:
    out = np.empty(d.size, BITS[dtype])
    built.lib.eng_narrow(engine.DTYPES[dtype], c_array(built, "double", d), d.size,
                         c_array(built, "uint8_t", out.view(np.uint8)))
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@SETTINGS
@given(data=st.data())
def test_widening_is_numpy_s(lib, dtype: np.dtype, data: st.DataObject) -> None:
    a = data.draw(values(dtype, st.integers(1, 64)))
    with np.errstate(invalid="ignore"):         # ml_dtypes warns of the nans it converts
        expected = a.astype(np.float64)
    got = widen(lib, dtype, a)
    assert np.array_equal(np.isnan(got), np.isnan(expected))
    finite = ~np.isnan(expected)
    assert got[finite].view(np.uint64).tolist() == expected[finite].view(np.uint64).tolist()


def ties_and_neighbours(dtype: np.dtype) -> st.SearchStrategy[np.ndarray]:
    """Doubles exactly halfway between two neighbouring values of `dtype`, and one double ulp to
    either side: where round-to-nearest-even must decide."""
    def build(a: np.ndarray) -> np.ndarray:
        wide = a.astype(np.float64)
        wide = wide[np.isfinite(wide)]
        up = np.nextafter(wide.astype(dtype), np.array(np.inf, dtype)).astype(np.float64)
        mid = (wide + up) / 2                          # exact: the dtype has far fewer bits than a double
        mid = mid[np.isfinite(mid)]
        return np.concatenate([mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf)])
    return values(dtype, st.integers(1, 32)).map(build)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@SETTINGS
@given(data=st.data())
def test_rounding_to_the_dtype_is_numpy_s_and_ml_dtypes_(lib, dtype: np.dtype, data: st.DataObject) -> None:
    doubles = hnp.arrays(np.float64, st.integers(1, 64), elements=st.floats(allow_nan=False, allow_subnormal=True))
    d = data.draw(st.one_of(doubles, ties_and_neighbours(dtype)))
    with np.errstate(over="ignore"):
        expected = d.astype(dtype).view(BITS[dtype])
    assert narrow(lib, dtype, d).tolist() == expected.tolist()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nan_rounds_to_nan(lib, dtype: np.dtype) -> None:
    got = narrow(lib, dtype, np.array([np.nan, -np.nan, np.frombuffer(bytes.fromhex("010000000000f07f"), "<f8")[0]]))
    assert np.isnan(got.view(dtype).astype(np.float64)).all()


def c_chunk_exponents(built, chunks: np.ndarray) -> np.ndarray:
    out = np.empty(chunks.shape[0], np.int16)
    built.lib.eng_chunk_exponents(c_array(built, "double", chunks), chunks.shape[0], chunks.shape[1],
                                  c_array(built, "int16_t", out))
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@SETTINGS
@given(data=st.data())
def test_block_floating_point_is_the_python_quantizer_s(lib, dtype: np.dtype, data: st.DataObject) -> None:
    """Exponents, wire values (and which rows fit) and the dequantised sums: the same bits."""
    chunks = data.draw(rows(dtype)).astype(np.float64)
    m, k = chunks.shape
    n = data.draw(st.integers(1, 32))
    local = quantize.chunk_exponents(chunks)
    assert c_chunk_exponents(lib, chunks).tolist() == local.tolist()
    # Around each row's own exponent (fits, or just does not), or anywhere a header can say.
    near = np.clip(local + np.array(data.draw(st.lists(st.integers(-2, 6), min_size=m, max_size=m))), -128, 127)
    anywhere = np.array(data.draw(st.lists(st.integers(-128, 127), min_size=m, max_size=m)))
    exponents = data.draw(st.sampled_from([near, anywhere])).astype(np.int16)
    q, fits = quantize.quantize(chunks, exponents.astype(np.int64), n)
    got_q, got_fits = np.empty((m, k), np.int32), np.empty(m, np.uint8)
    lib.lib.eng_quantize(c_array(lib, "double", chunks), m, k, c_array(lib, "int16_t", exponents), n,
                         c_array(lib, "int32_t", got_q), c_array(lib, "uint8_t", got_fits))
    assert got_fits.astype(bool).tolist() == fits.tolist()
    assert got_q.tolist() == q.tolist()
    sums = data.draw(hnp.arrays(np.int32, (m, k)))
    got = np.empty((m, k))
    lib.lib.eng_dequantize(c_array(lib, "int32_t", sums), m, k, c_array(lib, "int16_t", exponents), n,
                           c_array(lib, "double", got))
    assert got.view(np.uint64).tolist() == quantize.dequantize(sums, exponents, n).view(np.uint64).tolist()


@SETTINGS
@given(a=values(np.dtype(np.float32), st.integers(1, 64)))
def test_order_preserving_int32_is_numerics_(lib, a: np.ndarray) -> None:
    bits = a.view(np.int32)
    out = np.empty(a.size, np.int32)
    lib.lib.eng_to_ordered(c_array(lib, "int32_t", bits), a.size, c_array(lib, "int32_t", out))
    assert out.tolist() == numerics.to_ordered(a).tolist()
    assert numerics.from_ordered(out, np.dtype(np.float32)).view(np.int32).tolist() == bits.tolist()


@pytest.mark.parametrize("n", range(1, 33))
def test_headroom_is_ceil_log2_n(lib, n: int) -> None:
    assert lib.lib.eng_headroom_bits(n) == quantize.headroom_bits(n)
