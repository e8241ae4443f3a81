"""Issue 5, item 4: int32 sums that overflow are reported on every worker, never wrapped;
float32 inputs spanning 2^-140 .. 2^124 stay within docs/protocol.md's error bound, and
values or sums beyond float32's range are reported, never returned as inf or nan.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest
from p4sim import Switch

from hosts.agent import IncOverflowError
from hosts.inc import INC_K
from tests.hosts.documented import documented_bound
from tests.hosts.test_allreduce import run_allreduce

log = logging.getLogger(__name__)

N = 4
CHUNKS = 40


def test_int32_overflow_is_reported_on_every_worker_for_exactly_the_chunks_that_overflow(switch: Switch) -> None:
    rng = np.random.default_rng(4)
    inputs = [rng.integers(-2**20, 2**20, CHUNKS * INC_K, dtype=np.int32) for _ in range(N)]
    overflowing = sorted(rng.choice(CHUNKS, 7, replace=False).tolist())
    for c in overflowing:        # one element, all >= 2^30: any two already wrap, whatever the order
        element = c * INC_K + rng.integers(INC_K)
        for w in range(N):
            inputs[w][element] = rng.integers(2**30, 2**31 - 1)
    # At the edges of int32 without any partial sum leaving it: exact, not reported.
    edges = [np.array([2**30, -2**30], np.int32), np.array([2**30 - 1, -2**30], np.int32),
             np.zeros(2, np.int32), np.zeros(2, np.int32)]
    first, second = run_allreduce(switch, [inputs, edges])
    log.info("int32: %d of %d chunks overflow; every worker reported %s", len(overflowing), CHUNKS,
             [e.chunks for e in first])
    for err in first:
        assert isinstance(err, IncOverflowError) and err.chunks == overflowing
    for out in second:
        np.testing.assert_array_equal(out, np.array([2**31 - 1, -2**31], np.int32))


def wide_range_inputs(rng: np.random.Generator, exponents: np.ndarray) -> list[np.ndarray]:
    """Per worker, chunk c around 2^exponents[c], elements spread over 2^-20..2^0 of it,
    signs mixed, some exact zeros; each worker's own scale differs by up to 2^-6."""
    out = []
    for _ in range(N):
        shape = (CHUNKS, INC_K)
        spread = rng.uniform(-20, 0, shape) + exponents[:, None] - rng.integers(0, 7, (CHUNKS, 1))
        x = np.ldexp(rng.choice([-1.0, 1.0], shape), spread.astype(int)) * rng.uniform(0.5, 1, shape)
        x[rng.random((CHUNKS, INC_K)) < 0.1] = 0.0
        out.append(x.astype(np.float32).ravel())
    return out


def test_float32_with_a_wide_dynamic_range_stays_within_the_stated_bound(switch: Switch) -> None:
    rng = np.random.default_rng(7)
    exponents = rng.integers(-140, 125, CHUNKS)
    # The second call's scales are shuffled, so the exponent guessed from the first call is
    # too small for some chunks (overflow, pass 2) and far too large for others (pass 2).
    calls = [wide_range_inputs(rng, exponents), wide_range_inputs(rng, rng.permutation(exponents))]
    for c, (inputs, outs) in enumerate(zip(calls, run_allreduce(switch, calls))):
        exact = np.sum(np.array(inputs, np.float64), axis=0)
        bound = documented_bound(inputs)
        error = np.array([np.abs(out.astype(np.float64) - exact) for out in outs])
        log.info("float32 call %d: chunk scales 2^%d..2^%d; worst error %.3g of the bound, largest %.3g",
                 c, exponents.min(), exponents.max(), (error / bound).max(), error.max())
        for out in outs:
            assert out.dtype == np.float32
            np.testing.assert_array_equal(out, outs[0])      # every worker gets the same bits
        assert np.all(error <= bound)


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan, 2.0**127, 3.0e38], ids=str)
def test_float32_values_beyond_range_are_reported_on_every_worker(switch: Switch, bad: float) -> None:
    inputs = [np.ones(3 * INC_K, np.float32) for _ in range(N)]
    inputs[2][INC_K + 5] = bad
    after = [np.full(5, 0.5, np.float32) for _ in range(N)]
    first, second = run_allreduce(switch, [inputs, after])
    for err in first:
        assert isinstance(err, IncOverflowError) and err.chunks == [1]
    for out in second:       # still in step
        np.testing.assert_array_equal(out, np.full(5, 2.0, np.float32))


def test_float32_sum_beyond_float32_range_is_reported_not_inf(switch: Switch) -> None:
    inputs = [np.full(10, 1.0e38, np.float32) for _ in range(N)]     # each fits, their sum does not
    for err in run_allreduce(switch, [inputs])[0]:
        assert isinstance(err, IncOverflowError) and "float32's range" in str(err)
