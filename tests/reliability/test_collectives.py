"""Issue 12, item 1, in process: Reduce, ReduceScatter, Broadcast, AllGather and Barrier as
the switch runs them (docs/protocol.md, "The other collectives"), 4 workers on an
InProcessFabric with loss, duplication and reordering on every link, against numpy (float
sums against float64 within the documented bound). Each worker's packets are recorded, to
show that only the data's owners send data and that non-roots get ACKs, not data.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import ml_dtypes
import numpy as np
import pytest
from p4sim import Switch

from hosts.agent import WINDOW_ACK_MIN_CHUNKS, IncOverflowError, JobConfig, Worker
from hosts.inc import (COLL_ALLREDUCE, COLL_BROADCAST, COLL_REDUCE, FLAG_EAGER, HEADER_SIZE, INC_K, OP_ACK,
                       OP_CONTRIB, OP_JOIN, OP_RESULT, PAYLOAD_SIZE, IncHeader, unpack_header)
from hosts.inprocess import Faults, InProcessFabric
from hosts.transport import Transport
from tests.hosts.conftest import Job, counter, host, install_forwarding, install_job
from tests.hosts.documented import documented_bound, eager_gates

N = 4
WINDOW = 8
LOSSY = Faults(loss=0.05, duplicate=0.05, reorder=0.1, max_delay=0.003, seed=12)
FLOATS = [np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
SUM_DTYPES = [np.dtype(np.int32), *FLOATS]
NUMPY_OPS = {"sum": np.sum, "min": np.min, "max": np.max}
CASES = [("sum", d) for d in SUM_DTYPES] + [(op, np.dtype(d)) for op in ("min", "max") for d in (np.int32, np.float32)]


@dataclass
class RecordingTransport:
    """A Transport that keeps the header and size of every payload it sends and receives, and
    both in the order they happened ("sent" or "received", the header)."""
    inner: Transport
    sent: list[tuple[IncHeader, int]] = field(default_factory=list)
    received: list[tuple[IncHeader, int]] = field(default_factory=list)
    events: list[tuple[str, IncHeader]] = field(default_factory=list)

    def send(self, payload: bytes) -> None:
        self.sent.append((unpack_header(payload), len(payload)))
        self.events.append(("sent", self.sent[-1][0]))
        self.inner.send(payload)

    def recv(self, timeout: float) -> bytes | None:
        data = self.inner.recv(timeout)
        if data is not None:
            self.received.append((unpack_header(data), len(data)))
            self.events.append(("received", self.received[-1][0]))
        return data

    def close(self) -> None:
        self.inner.close()


def run(switch: Switch, body: Callable[[Worker], object], faults: Faults = LOSSY, timeout: float = 0.05,
        min_rto: float = 0.02) -> tuple[list[object], list[RecordingTransport]]:
    """body(worker) on each of N workers in its own thread; each worker's result (or the
    IncOverflowError it raised) and its recorded transport."""
    job = Job(job_id=1, hosts=tuple(host(i) for i in range(1, N + 1)), num_slots=8)
    install_forwarding(switch, list(job.hosts))
    install_job(switch, job)
    with InProcessFabric(switch, list(job.hosts), faults) as fabric:
        transports = [RecordingTransport(fabric.transport(w)) for w in range(N)]
        workers = [Worker(JobConfig(job.job_id, w, N, window=WINDOW, timeout=timeout, min_rto=min_rto,
                                    max_rto=max(2.0, min_rto), give_up_after=30, eager_rounds=True),
                          transports[w])
                   for w in range(N)]

        def one(w: int) -> object:
            try:
                return body(workers[w])
            except IncOverflowError as e:
                return e

        with ThreadPoolExecutor(N) as pool:
            return list(pool.map(one, range(N))), transports


def inputs_for(dtype: np.dtype, length: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == np.int32:
        return [rng.integers(-2**20, 2**20, length, dtype=np.int32) for _ in range(N)]
    return [(rng.standard_normal(length) * 100).astype(dtype) for _ in range(N)]


def check_reduced(got: np.ndarray, inputs: list[np.ndarray], op: str, part: slice | None = None) -> None:
    """`got` against numpy's reduction of `inputs` (restricted to `part`): exact for int32 and
    for min and max, within docs/protocol.md's bound for float sums."""
    dtype = inputs[0].dtype
    assert got.dtype == dtype
    if op != "sum" or dtype == np.int32:
        expected = NUMPY_OPS[op](np.array(inputs), axis=0)
        np.testing.assert_array_equal(got, expected[part] if part else expected)
        return
    exact = np.sum(np.array(inputs, np.float64), axis=0)
    bound = documented_bound(inputs)
    if part:
        exact, bound = exact[part], bound[part]
    assert np.all(np.abs(got.astype(np.float64) - exact) <= bound)


def data_senders(transport: RecordingTransport) -> set[tuple[int, int]]:
    """(collective, root) of every packet with data this worker sent."""
    return {(h.collective, h.root) for h, size in transport.sent if size == PAYLOAD_SIZE and h.opcode == OP_CONTRIB}


@pytest.mark.parametrize("op, dtype", CASES, ids=[f"{op}-{d}" for op, d in CASES])
def test_reduce_scatter_gives_each_worker_its_part_and_only_its_part(switch: Switch, op: str,
                                                                     dtype: np.dtype) -> None:
    part = 3 * INC_K - 1                      # each part: 3 chunks, the last one short
    inputs = inputs_for(dtype, N * part, seed=len(op) + dtype.itemsize)
    results, transports = run(switch, lambda w: w.reduce_scatter(inputs[w.config.worker_id], op))
    for w, (got, transport) in enumerate(zip(results, transports)):
        assert got.shape == (part,)
        # The bound is per chunk, and the chunks are the parts' own: check each part alone.
        check_reduced(got, [x[w * part:(w + 1) * part] for x in inputs], op)
        data = [h for h, size in transport.received if h.opcode == OP_RESULT]
        assert data and all(h.root == w and h.collective == COLL_REDUCE for h in data)
        assert any(h.opcode == OP_ACK for h, _ in transport.received)


def one_call(call: Callable[[Worker], object]) -> Callable[[Worker], tuple[object, int]]:
    """`call`'s result, and the chunks it took (a float call may redo some: seqs count those too)."""
    def body(w: Worker) -> tuple[object, int]:
        got = call(w)
        assert w.last_stats is not None
        return got, w.last_stats.chunks
    return body


@pytest.mark.parametrize("op, dtype", CASES, ids=[f"{op}-{d}" for op, d in CASES])
def test_a_small_reduce_scatter_is_one_allreduce_of_the_whole_array(switch: Switch, op: str,
                                                                   dtype: np.dtype) -> None:
    """Parts of K + 1 elements would take two chunks each, 2 N in all and too few per owner for
    window ACKs; the whole array takes N + 1: the workers run an AllReduce and keep their parts
    (within the AllReduce's bound, whose chunks span parts)."""
    part = INC_K + 1
    inputs = inputs_for(dtype, N * part, seed=30 + len(op) + dtype.itemsize)
    results, transports = run(switch, one_call(lambda w: w.reduce_scatter(inputs[w.config.worker_id], op)))
    for w, ((got, chunks), transport) in enumerate(zip(results, transports)):
        assert got.shape == (part,)
        check_reduced(got, inputs, op, slice(w * part, (w + 1) * part))
        assert {h.collective for h, _ in transport.sent} == {COLL_ALLREDUCE} and chunks == N + 1


@pytest.mark.parametrize("dtype", [np.dtype(np.int32), np.dtype(np.float16)], ids=str)
def test_a_small_all_gather_is_one_allreduce_of_the_packed_arrays(switch: Switch, dtype: np.dtype) -> None:
    """Each worker's 9 words would take a chunk of its own, N in all; packed side by side they
    take two: each worker sends its words at its offset and zeros elsewhere, and the sum is
    every worker's array, bit for bit."""
    rng = np.random.default_rng(40 + dtype.itemsize)
    length = 9 * 4 // dtype.itemsize
    inputs = [random_bits(rng, dtype, length) for _ in range(N)]
    results, transports = run(switch, one_call(lambda w: w.all_gather(inputs[w.config.worker_id])))
    for (got, chunks), transport in zip(results, transports):
        assert got.dtype == dtype and got.tobytes() == np.stack(inputs).tobytes()
        assert {h.collective for h, _ in transport.sent} == {COLL_ALLREDUCE} and chunks == -(-N * 9 // INC_K)


@pytest.mark.parametrize("op, dtype", CASES, ids=[f"{op}-{d}" for op, d in CASES])
def test_reduce_returns_the_result_at_the_root_alone(switch: Switch, op: str, dtype: np.dtype) -> None:
    root = 2
    inputs = inputs_for(dtype, 3 * INC_K + 1, seed=7 + dtype.itemsize)
    results, transports = run(switch, lambda w: w.reduce(inputs[w.config.worker_id], root, op))
    for w, (got, transport) in enumerate(zip(results, transports)):
        kinds = {h.opcode for h, _ in transport.received}
        if w == root:
            check_reduced(got, inputs, op)
            assert OP_ACK not in kinds
        else:
            assert got is None
            assert kinds == {OP_ACK} and all(size == HEADER_SIZE for _, size in transport.received)


def test_reduce_scatter_overflow_is_reported_on_every_worker(switch: Switch) -> None:
    inputs = [np.full(N * INC_K, 2**30, np.int32) for _ in range(N)]      # every part wraps
    results, _ = run(switch, lambda w: w.reduce_scatter(inputs[w.config.worker_id]))
    for got in results:
        assert isinstance(got, IncOverflowError)


def random_bits(rng: np.random.Generator, dtype: np.dtype, count: int) -> np.ndarray:
    """`count` values of `dtype` with random bit patterns (NaNs and all)."""
    return rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8).view(dtype)


def test_a_float_part_beyond_range_raises_at_its_owner_alone(switch: Switch) -> None:
    """Each input fits float32, worker 1's part of the sum does not: only worker 1 has that data."""
    inputs = [np.ones(N * INC_K, np.float32) for _ in range(N)]
    for x in inputs:
        x[INC_K:2 * INC_K] = 1.0e38
    results, _ = run(switch, lambda w: w.reduce_scatter(inputs[w.config.worker_id]))
    assert isinstance(results[1], IncOverflowError) and "float32's range" in str(results[1])
    for w in (0, 2, 3):
        np.testing.assert_array_equal(results[w], np.full(INC_K, N, np.float32))


BIT_EXACT = [np.dtype(d) for d in (np.int32, np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.uint8)]


@pytest.mark.parametrize("dtype", BIT_EXACT, ids=str)
def test_broadcast_is_bit_for_bit_and_only_the_root_sends_data(switch: Switch, dtype: np.dtype) -> None:
    root = 3
    rng = np.random.default_rng(dtype.itemsize)
    source = random_bits(rng, dtype, 5 * 41).reshape(5, 41)
    inputs = [source if w == root else np.zeros_like(source) for w in range(N)]
    results, transports = run(switch, lambda w: w.broadcast(inputs[w.config.worker_id], root))
    for w, (got, transport) in enumerate(zip(results, transports)):
        assert got.dtype == dtype and got.shape == source.shape
        assert got.tobytes() == source.tobytes()
        assert data_senders(transport) == ({(COLL_BROADCAST, root)} if w == root else set())
        assert {h.opcode for h, _ in transport.sent} == ({OP_CONTRIB} if w == root else {OP_JOIN})


@pytest.mark.parametrize("dtype", BIT_EXACT, ids=str)
def test_all_gather_stacks_every_workers_array_bit_for_bit(switch: Switch, dtype: np.dtype) -> None:
    rng = np.random.default_rng(10 + dtype.itemsize)
    length = (2 * INC_K + 9) * 4 // dtype.itemsize      # 3 chunks of words each, the last one short
    inputs = [random_bits(rng, dtype, length) for _ in range(N)]
    results, transports = run(switch, lambda w: w.all_gather(inputs[w.config.worker_id]))
    for w, (got, transport) in enumerate(zip(results, transports)):
        assert got.dtype == dtype and got.shape == (N, length)
        assert got.tobytes() == np.stack(inputs).tobytes()
        assert data_senders(transport) == {(COLL_BROADCAST, w)}


def test_barrier_returns_only_after_the_last_worker_arrived(switch: Switch) -> None:
    arrived = threading.Event()

    def body(worker: Worker) -> float:
        if worker.config.worker_id == N - 1:
            time.sleep(0.3)
            arrived.set()
        worker.barrier()
        assert arrived.is_set()
        worker.barrier()                 # and again: each barrier is its own round
        return time.monotonic()

    results, transports = run(switch, body)
    assert all(isinstance(r, float) for r in results)
    for transport in transports:
        assert all(size == HEADER_SIZE for _, size in transport.sent + transport.received)


def test_collectives_in_sequence_share_the_jobs_slots(switch: Switch) -> None:
    """Every collective once, then an AllReduce: the seq, slot and version rules carry over."""
    inputs = inputs_for(np.dtype(np.float32), N * 2 * INC_K, seed=3)      # ReduceScatter in parts' own chunks

    def body(w: Worker) -> list[object]:
        me = w.config.worker_id
        return [w.reduce_scatter(inputs[me]), w.all_gather(inputs[me][:10]), w.broadcast(inputs[me], 0),
                w.reduce(inputs[me], 1, "max"), w.barrier(), w.allreduce(inputs[me])]

    results, _ = run(switch, body)
    for w, (scattered, gathered, broadcast, reduced, _, summed) in enumerate(results):
        check_reduced(scattered, [x[w * 2 * INC_K:(w + 1) * 2 * INC_K] for x in inputs], "sum")
        np.testing.assert_array_equal(gathered, np.stack([x[:10] for x in inputs]))
        np.testing.assert_array_equal(broadcast, inputs[0])
        if w == 1:
            check_reduced(reduced, inputs, "max")
        check_reduced(summed, inputs, "sum")


def test_bad_arguments_are_refused_before_anything_is_sent(switch: Switch) -> None:
    def body(w: Worker) -> list[str]:
        errors = []
        for call in (lambda: w.reduce_scatter(np.zeros(N + 1, np.float32)),
                     lambda: w.reduce(np.zeros(3, np.float32), N),
                     lambda: w.broadcast(np.zeros(3, np.float32), -1),
                     lambda: w.reduce_scatter(np.zeros(N, np.float16), "min")):
            with pytest.raises((ValueError, TypeError)) as e:
                call()
            errors.append(str(e.value))
        return errors

    results, transports = run(switch, body, Faults())
    assert all(not t.sent for t in transports)
    assert "divisible by 4" in results[0][0] and "root must be a worker 0..3" in results[0][1]


@pytest.mark.parametrize("collective", ["broadcast", "all_gather"])
def test_eager_rounds_are_bit_for_bit_under_loss_and_the_others_join_only_the_gates(switch: Switch,
                                                                                    collective: str) -> None:
    """After a first call has shown that the switch runs eager rounds (FLAG_EAGER), the data's
    owner alone sends each chunk; the others JOIN the gates and ask again (an eager JOIN) only for
    chunks not their own. How few asks a lossless run makes: the counter test below."""
    rng = np.random.default_rng(21)
    length = 4 * INC_K + 5 if collective == "all_gather" else 20 * INC_K + 3
    inputs = [random_bits(rng, np.dtype(np.float32), length) for _ in range(N)]
    calls = 3
    starts: dict[int, int] = {}

    def body(w: Worker) -> list[np.ndarray]:
        w.barrier()                          # the switch's answer says it runs eager rounds
        starts[w.config.worker_id] = w.next_seq
        me = w.config.worker_id
        return [w.broadcast(inputs[me], 1) if collective == "broadcast" else w.all_gather(inputs[me])
                for _ in range(calls)]

    results, transports = run(switch, body)
    expected = inputs[1] if collective == "broadcast" else np.stack(inputs)
    for got in results:
        assert all(one.tobytes() == expected.tobytes() for one in got)
    per_owner = -(-length // INC_K)
    m = per_owner * (N if collective == "all_gather" else 1)
    first = starts[0]
    gates = {first + c * m + g for c in range(calls) for g in eager_gates(m, WINDOW)}
    for w, transport in enumerate(transports):
        sent = [h for h, _ in transport.sent if first <= h.seq < first + calls * m]
        owned = {first + c * m + i for c in range(calls) for i in range(m)
                 if (i // per_owner if collective == "all_gather" else 1) == w}
        assert {h.seq for h in sent if not h.flags & FLAG_EAGER} == gates
        assert {h.seq for h in sent if h.flags & FLAG_EAGER and h.opcode == OP_CONTRIB} == owned - gates
        asked = {h.seq for h in sent if h.flags & FLAG_EAGER and h.opcode == OP_JOIN}
        assert not asked & (owned | gates)
        # The first eager call follows a Barrier, not an eager call: its items from WINDOW on wait
        # for its first gate's result (slot copies of the Barrier's time are reused from there).
        first_gate = first + eager_gates(m, WINDOW)[0]
        got_gate = transport.events.index(next(e for e in transport.events
                                                if e[0] == "received" and e[1].seq == first_gate))
        assert all(h.seq < first + WINDOW for kind, h in transport.events[:got_gate]
                   if kind == "sent" and first <= h.seq < first + m)


# docs/protocol.md, "Packets per collective": one call of m chunks (N workers, G gates), lossless.
DOCUMENTED_PASSES = {
    "allreduce": lambda m, g: (N * m, m),
    "reduce": lambda m, g: (N * m, m),
    "reduce_scatter": lambda m, g: (N * m, m),
    "small_reduce_scatter": lambda m, g: (N * m, m),      # an AllReduce
    "broadcast": lambda m, g: (N * g + m - g, m),
    "all_gather": lambda m, g: (N * g + m - g, m),
    "small_all_gather": lambda m, g: (N * m, m),          # an AllReduce
    "barrier": lambda m, g: (N, 1),
}
CALLS: dict[str, tuple[Callable[[Worker, np.ndarray], object], int]] = {   # the call, and its chunks
    "allreduce": (lambda w, x: w.allreduce(x), 20 * INC_K + 1),
    "reduce": (lambda w, x: w.reduce(x, 2), 20 * INC_K + 1),
    "reduce_scatter": (lambda w, x: w.reduce_scatter(x), N * 5 * INC_K),
    "small_reduce_scatter": (lambda w, x: w.reduce_scatter(x), N * (INC_K + 1)),
    "broadcast": (lambda w, x: w.broadcast(x, 3), 30 * INC_K),
    "all_gather": (lambda w, x: w.all_gather(x), 7 * INC_K + 1),
    "small_all_gather": (lambda w, x: w.all_gather(x), 5),
    "barrier": (lambda w, x: w.barrier(), 0),
}


def chunks_of(name: str, length: int) -> int:
    if name == "barrier":
        return 1
    if name == "reduce_scatter":
        return N * -(-(length // N) // INC_K)
    if name.startswith("small_"):
        return -(-length * (N if name == "small_all_gather" else 1) // INC_K)
    return -(-length // INC_K) * (N if name == "all_gather" else 1)


@pytest.mark.parametrize("name", list(CALLS))
def test_switch_counters_equal_the_documented_packet_counts_in_a_lossless_run(switch: Switch, name: str) -> None:
    """A Barrier (which tells the workers that the switch runs eager rounds), then the call: the
    switch adds exactly the documented contributions and multicasts one result per chunk."""
    call, length = CALLS[name]
    inputs = inputs_for(np.dtype(np.int32), length, seed=5)

    def body(w: Worker) -> int:
        w.barrier()
        call(w, inputs[w.config.worker_id])
        assert w.last_stats is not None and w.last_stats.retransmits == 0
        return w.last_stats.packets_sent

    # Timers far beyond an in-process round trip: nothing is sent again in a lossless run.
    sent, transports = run(switch, body, Faults(), timeout=5.0, min_rto=2.0)
    m = chunks_of(name, length)
    contributions, results = DOCUMENTED_PASSES[name](m, len(eager_gates(m, WINDOW)))
    barrier = DOCUMENTED_PASSES["barrier"](1, 1)
    assert counter(switch, "MyIngress.contributions") == barrier[0] + contributions == N + sum(sent)
    assert counter(switch, "MyIngress.results_multicast") == barrier[1] + results
    for name_ in ("stale_drops", "duplicate_drops", "results_resent", "malformed_drops"):
        assert counter(switch, f"MyIngress.{name_}") == 0
    for transport in transports:
        assert len(transport.received) == 1 + results


@pytest.mark.parametrize("op, dtype", CASES, ids=[f"{op}-{d}" for op, d in CASES])
def test_window_acks_keep_reduce_and_reduce_scatter_exact_under_loss(switch: Switch, op: str,
                                                                      dtype: np.dtype) -> None:
    """After a first Reduce has shown that the switch takes window ACKs (FLAG_WINDOW_ACKS), each
    root acknowledges its chunks to the others itself (docs/protocol.md, "Window ACKs"): the
    results stay exact under loss, duplication and reordering, and every worker sends or takes
    window ACKs in every later call with WINDOW_ACK_MIN_CHUNKS chunks per root; a shorter one
    keeps its per-chunk ACKs."""
    part = WINDOW_ACK_MIN_CHUNKS * INC_K + 3        # a chunk more than the least a root needs
    inputs = [inputs_for(dtype, N * part, seed=40 + i + dtype.itemsize) for i in range(3)]
    short = inputs_for(dtype, (WINDOW_ACK_MIN_CHUNKS - 1) * INC_K, seed=44)

    def body(w: Worker) -> list:
        me = w.config.worker_id
        out = []
        for root, x in zip((0, 3, None, 1), [*inputs, short]):
            got = w.reduce(x[me], root, op) if root is not None else w.reduce_scatter(x[me], op)
            out.append((got, w.last_stats.window_acks))
        return out

    results, _ = run(switch, body)
    for w, calls in enumerate(results):
        assert not isinstance(calls, Exception), calls
        (first, acks0), (second, acks1), (part_of_third, acks2), (fourth, acks3) = calls
        assert (acks0, acks3) == (0, 0) and acks1 > 0 and acks2 > 0
        if w == 0:
            check_reduced(first, inputs[0], op)
        if w == 3:
            check_reduced(second, inputs[1], op)
        if w == 1:
            check_reduced(fourth, short, op)
        check_reduced(part_of_third, [x[w * part:(w + 1) * part] for x in inputs[2]], op)
