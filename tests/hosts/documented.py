"""docs/protocol.md's error bound for float sums, written out here from the document and not
from hosts/ (so a less precise quantiser, or a laxer hosts.numerics, fails the tests)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

K = 32   # elements per packet, the block that shares an exponent

# "relative to the chunk's largest value ... at most N * 2^(L + slack - 30)", L = ceil(log2 N), slack 4
BLOCK_RELATIVE = {1: 2.0**-26, 2: 2.0**-24, 3: 3 * 2.0**-24, 4: 2.0**-22, 5: 5 * 2.0**-23, 6: 6 * 2.0**-23,
                  7: 7 * 2.0**-23, 8: 2.0**-20}
# "plus half a unit of the result's dtype": (relative, absolute for subnormal results)
FINAL_ROUNDING = {np.dtype(np.float32): (2.0**-24, 2.0**-150), np.dtype(np.float16): (2.0**-11, 2.0**-25),
                  np.dtype(ml_dtypes.bfloat16): (2.0**-8, 2.0**-134)}


def documented_bound(inputs: list[np.ndarray]) -> np.ndarray:
    """Per element of the flattened inputs: the chunk's largest |x| over all workers (at least
    2^-128, the smallest exponent a chunk is sent at) times BLOCK_RELATIVE, plus the final rounding."""
    n = len(inputs)
    x = np.array([t.astype(np.float64).ravel() for t in inputs])
    padded = np.zeros((n, -(-x.shape[1] // K) * K))
    padded[:, :x.shape[1]] = np.abs(x)
    chunk_max = np.maximum(padded.reshape(n, -1, K).max(axis=(0, 2)), 2.0**-128)
    block = np.repeat(chunk_max * BLOCK_RELATIVE[n], K)[:x.shape[1]]
    relative, absolute = FINAL_ROUNDING[inputs[0].dtype]
    return block + (np.abs(x.sum(axis=0)) + block) * relative + absolute
