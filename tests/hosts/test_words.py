"""The words that collectives which only move data (Broadcast, AllGather) send: any array's bytes
as int32 words, zero padded to a whole word, and back bit for bit (hosts/numerics.py). Kills the
mutants of as_words and from_words that the sum tests never reach (docs/results/mutation.md)."""
import ml_dtypes
import numpy as np
import pytest

from hosts.numerics import as_words, from_words


@pytest.mark.parametrize("dtype, n", [(np.uint8, 1), (np.uint8, 5), (np.float16, 3), (ml_dtypes.bfloat16, 2),
                                      (np.int32, 4), (np.float32, 0), (np.float64, 3)])
def test_words_are_the_bytes_zero_padded_and_come_back_bit_for_bit(dtype, n):
    rng = np.random.default_rng(n)
    array = rng.integers(0, 256, n * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)
    words = as_words(array)
    raw = array.tobytes()
    assert words.dtype == np.int32 and words.size == -(-len(raw) // 4)
    assert words.tobytes() == raw + b"\0" * (4 * words.size - len(raw))
    back = from_words(words, array)
    assert back.dtype == array.dtype and back.shape == array.shape and back.tobytes() == raw
    assert back is not words and not np.shares_memory(back, words)


def test_a_strided_view_travels_as_its_elements_and_comes_back_in_its_shape():
    array = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]
    words = as_words(array)
    assert list(words.view(np.int16)) == [0, 2, 4, 6, 8, 10]
    assert np.array_equal(from_words(words, array), array)
