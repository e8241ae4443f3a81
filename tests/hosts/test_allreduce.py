"""Worker.allreduce end to end: N worker threads through an InProcessFabric to p4sim running
allreduce.p4, against numpy's sum, with loss, duplication and reordering on the links."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from p4sim import Switch

from hosts.agent import IncOverflowError, IncTimeoutError, JobConfig, Worker
from hosts.inc import INC_K
from hosts.inprocess import Faults, InProcessFabric
from hosts.numerics import BFLOAT16
from tests.hosts.documented import documented_bound, exact_result, steady_bound, steady_exponents
from tests.hosts.conftest import Job, counter, host, install_forwarding, install_job

LOSSY = Faults(loss=0.05, duplicate=0.05, reorder=0.1, max_delay=0.003, seed=3)


def run_allreduce(switch: Switch, calls: list[list[np.ndarray]], *, faults: Faults = Faults(),
                  job: Job | None = None, window: int = 8, ops: list[str] | None = None) -> list[list[object]]:
    """calls[c][w] is worker w's input to call c, reduced with ops[c] (default all "sum");
    returns each worker's result (or exception) per call."""
    ops = ops or ["sum"] * len(calls)
    n = len(calls[0])
    job = job or Job(job_id=1, hosts=tuple(host(i) for i in range(1, n + 1)), num_slots=window)
    install_forwarding(switch, list(job.hosts))
    install_job(switch, job)
    with InProcessFabric(switch, list(job.hosts), faults) as fabric:
        workers = [Worker(JobConfig(job.job_id, w, n, window=window, timeout=0.05, give_up_after=20),
                          fabric.transport(w)) for w in range(n)]

        def run(w: int) -> list[object]:
            results: list[object] = []
            for call, op in zip(calls, ops):
                try:
                    results.append(workers[w].allreduce(call[w], op))
                except IncOverflowError as e:
                    results.append(e)
            return results

        with ThreadPoolExecutor(n) as pool:
            per_worker = list(pool.map(run, range(n)))
    return [[per_worker[w][c] for w in range(n)] for c in range(len(calls))]


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("length", [1, INC_K - 1, INC_K, INC_K + 1, 1500])
def test_int32_sum_is_exact(switch: Switch, n: int, length: int) -> None:
    rng = np.random.default_rng(n * 10000 + length)
    inputs = [rng.integers(-2**20, 2**20, length, dtype=np.int32) for _ in range(n)]
    for out in run_allreduce(switch, [inputs])[0]:
        assert out.dtype == np.int32
        np.testing.assert_array_equal(out, np.sum(inputs, axis=0, dtype=np.int32))


def test_large_int32_tensor_reuses_every_slot_many_times(switch: Switch) -> None:
    rng = np.random.default_rng(99)
    inputs = [rng.integers(-2**24, 2**24, 20000, dtype=np.int32) for _ in range(4)]
    for out in run_allreduce(switch, [inputs], window=16)[0]:
        np.testing.assert_array_equal(out, np.sum(inputs, axis=0, dtype=np.int32))


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("length", [1, INC_K - 1, INC_K + 1, 700])
def test_float32_sum_is_within_the_quantisation_bound(switch: Switch, n: int, length: int) -> None:
    rng = np.random.default_rng(n * 1000 + length)
    inputs = [(rng.standard_normal(length) * 10.0 ** rng.integers(-3, 4)).astype(np.float32) for _ in range(n)]
    exact = np.sum(np.array(inputs, np.float64), axis=0)
    bound = documented_bound(inputs)
    for out in run_allreduce(switch, [inputs])[0]:
        assert out.dtype == np.float32 and out.shape == (length,)
        assert np.all(np.abs(out - exact) <= bound)


def test_int32_survives_loss_duplicates_and_reordering_over_several_calls(switch: Switch) -> None:
    rng = np.random.default_rng(11)
    n = 4
    calls = [[rng.integers(-1000, 1000, size, dtype=np.int32) for _ in range(n)] for size in (600, 33, 600)]
    for call, outs in zip(calls, run_allreduce(switch, calls, faults=LOSSY, window=4)):
        for out in outs:
            np.testing.assert_array_equal(out, np.sum(call, axis=0, dtype=np.int32))
    # the faults were exercised: lost results were resent, duplicates dropped
    assert counter(switch, "MyIngress.results_resent") > 0
    assert counter(switch, "MyIngress.duplicate_drops") > 0


def test_float32_survives_loss_and_adapts_its_exponent_between_calls(switch: Switch) -> None:
    rng = np.random.default_rng(12)
    n = 3
    scales = (1.0, 1e4, 1e-4)      # each call's magnitude is wrong for the previous call's guess
    calls = [[(rng.standard_normal(200) * s).astype(np.float32) for _ in range(n)] for s in scales]
    for call, outs, s in zip(calls, run_allreduce(switch, calls, faults=LOSSY), scales):
        exact = np.sum(np.array(call, np.float64), axis=0)
        for out in outs:
            assert np.all(np.abs(out - exact) <= documented_bound(call))


def test_int32_overflow_is_raised_on_every_worker_not_wrapped(switch: Switch) -> None:
    big = np.full(40, 2**30, np.int32)
    small = np.ones(40, np.int32)
    calls = [[big, big], [small, small]]
    first, second = run_allreduce(switch, calls)
    for err in first:
        assert isinstance(err, IncOverflowError) and err.chunks == [0, 1]
    for out in second:      # the workers stay in step after the error
        np.testing.assert_array_equal(out, small * 2)


def test_float32_not_finite_is_raised_on_every_worker(switch: Switch) -> None:
    bad = np.ones(10, np.float32)
    bad[3] = np.inf
    outs = run_allreduce(switch, [[bad, np.ones(10, np.float32)]])[0]
    assert all(isinstance(e, IncOverflowError) for e in outs)


def test_two_jobs_at_once_on_disjoint_slot_ranges(switch: Switch) -> None:
    jobs = [Job(job_id=1, hosts=(host(1), host(2)), slot_base=0, num_slots=4, mcast_grp=101),
            Job(job_id=2, hosts=(host(3), host(4)), slot_base=4, num_slots=4, mcast_grp=102)]
    all_hosts = [h for j in jobs for h in j.hosts]
    install_forwarding(switch, all_hosts)
    for job in jobs:
        install_job(switch, job)
    rng = np.random.default_rng(5)
    inputs = [rng.integers(-100, 100, 500, dtype=np.int32) for _ in all_hosts]
    with InProcessFabric(switch, all_hosts) as fabric:
        workers = [Worker(JobConfig(j.job_id, w, 2, window=4, timeout=0.01), fabric.transport(2 * k + w))
                   for k, j in enumerate(jobs) for w in range(2)]
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda i: workers[i].allreduce(inputs[i]), range(4)))
    for k in range(2):
        for w in range(2):
            np.testing.assert_array_equal(outs[2 * k + w], inputs[2 * k] + inputs[2 * k + 1])


def test_missing_peer_times_out_with_a_clear_error(switch: Switch) -> None:
    job = Job(job_id=1, hosts=(host(1), host(2)), num_slots=2)
    install_forwarding(switch, list(job.hosts))
    install_job(switch, job)
    with InProcessFabric(switch, list(job.hosts)) as fabric:
        worker = Worker(JobConfig(1, 0, 2, window=2, timeout=0.001, give_up_after=0.05), fabric.transport(0))
        with pytest.raises(IncTimeoutError, match="no result"):
            worker.allreduce(np.ones(5, np.int32))


def test_wrong_dtype_is_refused() -> None:
    worker = Worker(JobConfig(1, 0, 2), transport=None)    # never reaches the transport
    with pytest.raises(TypeError, match="int32, float32, float16, bfloat16 arrays, not float64"):
        worker.allreduce(np.ones(3, np.float64))


def wide_range(rng: np.random.Generator, n: int, chunks: int, dtype: np.dtype) -> list[np.ndarray]:
    """Per worker, chunk c around 2^e_c (e_c random, the same for all workers), its elements
    spread over 2^-16 .. 1 of that, signs mixed: small elements, whose digits the final
    rounding keeps, show every bit the block quantisation loses."""
    scale = rng.integers(-10, 10, chunks)
    if dtype == np.float16:
        scale = rng.integers(-2, 6, chunks)
    out = []
    for _ in range(n):
        spread = rng.uniform(-16, 0, (chunks, INC_K)) + scale[:, None]
        out.append((rng.choice([-1.0, 1.0], (chunks, INC_K)) * 2.0 ** spread).astype(dtype).ravel())
    return out


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16), BFLOAT16], ids=str)
@pytest.mark.parametrize("n", [2, 3, 8])
def test_a_repeated_float_call_is_the_documented_sum_bit_for_bit(switch: Switch, dtype: np.dtype, n: int) -> None:
    """A call as long as the last, of similar magnitudes, goes at the exponents that call agreed
    plus the margin (docs/protocol.md): then the result is a function of the inputs alone,
    written out in tests/hosts/documented.py, and within its tight bound; the bound is reached
    (to within a factor of 4), so it is not loose either."""
    inputs = wide_range(np.random.default_rng([n, dtype.itemsize]), n, 12, dtype)
    _, second = run_allreduce(switch, [inputs, inputs])
    expected = exact_result(inputs, steady_exponents(inputs))
    exact = np.sum([t.astype(np.float64) for t in inputs], axis=0)
    bound = steady_bound(inputs)
    for out in second:
        assert out.tobytes() == expected.tobytes()
    error = np.abs(second[0].astype(np.float64) - exact)
    assert np.all(error <= bound) and (error / bound).max() > 0.25
