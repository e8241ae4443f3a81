"""The compiled engine (hosts/engine) against the Python path it must equal: jobs of C workers,
of Python workers and of both, on real UDP sockets through p4sim in process (tests/hosts/bridge.py),
with loss, duplication and reordering, run the same calls (every collective, op and dtype, the
errors included). Every job must give every worker the same bits, and every worker must put
the same packets on the wire whichever engine it runs: per seq, the same header and elements
(retransmissions aside, which only add the RETRANSMIT flag), and as a Reduce's root the same
flags and need for each item in its window ACKs (how many items each one covers is timing).
"""
from __future__ import annotations

import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
from p4sim import Program, Switch

from hosts import engine
from hosts.agent import IncOverflowError, IncTimeoutError, JobConfig, Worker
from hosts.inc import (FLAG_EAGER, FLAG_RESENT, FLAG_RETRANSMIT, FLAG_WINDOW_ACKS, HEADER_SIZE, INC_K, OP_JOIN,
                       OP_WINDOW_ACK, elements_view, unpack_header)
from hosts.inprocess import Faults, InProcessFabric
from hosts.numerics import BFLOAT16
from hosts.transport import UdpTransport
from tests.hosts.bridge import UdpBridge, free_udp_port, loopback_ip
from tests.hosts.conftest import Job, host, install_forwarding, install_job
from tests.hosts.documented import exact_result, steady_exponents
from tests.hosts.test_allreduce import wide_range

LOSSY = Faults(loss=0.04, duplicate=0.04, reorder=0.1, max_delay=0.003, seed=5)
N = 4

Call = Callable[[Worker, int], Any]


@dataclass
class JobRun:
    results: list[list[Any]]          # [call][worker]: the result, None, or the IncOverflowError raised
    sent: list[dict[int, bytes]]      # [worker]: seq -> the payload it sent for it, RETRANSMIT cleared
    payloads: list[list[bytes]]       # [worker]: every payload it sent, in order
    resent: list[int]                 # [worker]: payloads it sent more than once
    window_acked: list[dict[int, tuple[int, ...]]]   # [worker]: item seq -> what its window ACKs said of it
    engines: list[str]                # what each worker ran on


def run_job(program: Program, engines: list[str], calls: list[Call], faults: Faults = Faults(),
            window: int = 8, deliver: Callable[[int, bytes], list[bytes]] | None = None, **config: Any) -> JobRun:
    """Every call on every worker of a fresh job (worker w on engines[w]) through a fresh switch
    (`deliver`: UdpBridge's; `config`: JobConfig's, over timeout 0.05 s and give_up_after 20 s)."""
    n = len(engines)
    switch = Switch(program)
    job = Job(job_id=3, hosts=tuple(host(i) for i in range(1, n + 1)), num_slots=window)
    install_forwarding(switch, list(job.hosts))
    install_job(switch, job)
    port = free_udp_port()
    with InProcessFabric(switch, list(job.hosts), faults) as fabric, UdpBridge(fabric, n, port, deliver) as bridge:
        settings = {"timeout": 0.05, "give_up_after": 20} | config
        workers = [Worker(JobConfig(job.job_id, w, n, window=window, engine=e, **settings),
                          UdpTransport(bridge.address, (loopback_ip(w), port)))
                   for w, e in enumerate(engines)]
        try:
            def run(w: int) -> list[Any]:
                out: list[Any] = []
                for call in calls:
                    try:
                        out.append(call(workers[w], w))
                    except IncOverflowError as e:
                        out.append(e)
                return out

            with ThreadPoolExecutor(n) as pool:
                per_worker = list(pool.map(run, range(n)))
        finally:
            for worker in workers:
                worker.close()
        sent = [distinct_packets(payloads) for payloads in bridge.sent]
        acked = [window_acked(payloads) for payloads in bridge.sent]
        resent = [len(payloads) - len(distinct) - sum(map(is_window_ack, payloads))
                  for payloads, distinct in zip(bridge.sent, sent)]
    return JobRun([[per_worker[w][c] for w in range(n)] for c in range(len(calls))], sent, bridge.sent, resent,
                  acked, [w.engine for w in workers])


def distinct_packets(payloads: list[bytes]) -> dict[int, bytes]:
    """seq -> payload, each retransmission the same packet but for its RETRANSMIT flag (window
    ACKs aside: window_acked)."""
    out: dict[int, bytes] = {}
    for p in payloads:
        if is_window_ack(p):
            continue
        first = p[:1] + bytes([p[1] & ~FLAG_RETRANSMIT]) + p[2:]
        seq = unpack_header(p, (len(p) - HEADER_SIZE) // 4).seq
        assert out.setdefault(seq, first) == first, f"seq {seq} sent with different contents"
    return out


def is_window_ack(payload: bytes) -> bool:
    return payload[0] & 0xF == OP_WINDOW_ACK


def window_acked(payloads: list[bytes]) -> dict[int, tuple[int, ...]]:
    """A root's window ACKs, item by item: seq -> their header (but seq and count) and the flags
    and need they give it, without the flags that say a round or its answer went twice (loss
    decides those). Each item the root owns once, others' never."""
    out: dict[int, tuple[int, ...]] = {}
    for p in filter(is_window_ack, payloads):
        h = unpack_header(p, (len(p) - HEADER_SIZE) // 4)
        codes = elements_view(p)
        for i in range(h.count):
            if codes[i]:
                seq = (h.seq - h.count + i) & 0xFFFFFFFF
                assert seq not in out, f"seq {seq} window-acked twice"
                out[seq] = (h.flags, h.job_id, h.worker_id, h.slot, h.pool_version, h.exponent, h.need,
                            h.reduce_op, h.collective, h.root, int(codes[i]) & ~((FLAG_RETRANSMIT | FLAG_RESENT) << 8))
    return out


def same(a: Any, b: Any) -> bool:
    """Bit for bit the same result, or the same error naming the same chunks."""
    if isinstance(a, IncOverflowError) or isinstance(b, IncOverflowError):
        return type(a) is type(b) and str(a) == str(b) and a.chunks == b.chunks
    if a is None or b is None:
        return a is b
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def inputs(seed: int, size: int, dtype: np.dtype, scale: float = 100.0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == np.int32:
        return [rng.integers(-2**24, 2**24, size, dtype=np.int32) for _ in range(N)]
    return [(rng.standard_normal(size) * scale * 2.0 ** rng.integers(-8, 8, size)).astype(dtype) for _ in range(N)]


def matrix_calls() -> list[Call]:
    """Every collective, op and dtype once or more: first calls and repeated lengths (the exponent
    guess from the last call), magnitudes that change (redone chunks), and every error."""
    calls: list[Call] = []
    seed = 0
    for dtype in (np.dtype(np.int32), np.dtype(np.float32), np.dtype(np.float16), BFLOAT16):
        for size, scale in ((1, 1.0), (INC_K + 1, 1.0), (300, 1.0), (300, 1e3 if dtype != np.float16 else 30.0)):
            xs = inputs(seed := seed + 1, size, dtype, scale)
            calls.append(lambda wk, w, xs=xs: wk.allreduce(xs[w]))
    # Buckets that come round, as DDP's do, more lengths than the engines keep exponents for.
    buckets = [inputs(seed := seed + 1, size * INC_K + 3, np.dtype(np.float32), scale)
               for size, scale in ((2, 1e4), (5, 1e-3), (3, 1.0), (4, 1e2), (6, 1e-1))]
    for xs in buckets[:2] * 2 + buckets + buckets[::-1]:
        calls.append(lambda wk, w, xs=xs: wk.allreduce(xs[w]))
    for op in ("min", "max"):
        for dtype in (np.int32, np.float32):
            xs = inputs(seed := seed + 1, 3 * INC_K + 7, np.dtype(dtype))
            calls.append(lambda wk, w, xs=xs, op=op: wk.allreduce(xs[w], op))
    xs = inputs(seed := seed + 1, 2 * INC_K, np.dtype(np.float32))
    xs[2][INC_K + 3] = np.nan
    calls.append(lambda wk, w, xs=xs: wk.allreduce(xs[w], "max"))
    for dtype in (np.int32, np.float32, BFLOAT16):
        xs = inputs(seed := seed + 1, N * (2 * INC_K + 5), np.dtype(dtype))
        calls.append(lambda wk, w, xs=xs: wk.reduce_scatter(xs[w]))
        calls.append(lambda wk, w, xs=xs: wk.reduce(xs[w], root=2))
    xs = inputs(seed := seed + 1, 3 * INC_K - 5, np.dtype(np.float16))
    calls.append(lambda wk, w, xs=xs: wk.broadcast(xs[w], root=1))
    calls.append(lambda wk, w, xs=xs: wk.all_gather(xs[w][:INC_K + 2]))
    calls.append(lambda wk, w: wk.barrier())
    big = np.full(3 * INC_K, 2**30, np.int32)
    calls.append(lambda wk, w: wk.allreduce(big))                       # int32 overflow
    bad = np.ones(3 * INC_K, np.float32)
    bad[INC_K + 1] = np.inf
    calls.append(lambda wk, w: wk.allreduce(bad if w == 1 else np.ones(3 * INC_K, np.float32)))
    halves = np.full(2 * INC_K, 40000.0, np.float16)
    calls.append(lambda wk, w: wk.allreduce(halves))                    # beyond float16's range
    calls.append(lambda wk, w: wk.allreduce(np.arange(5, dtype=np.int32)))   # still in step
    return calls


def assert_jobs_agree(runs: list[JobRun]) -> None:
    reference = runs[0]
    for run in runs:
        for w in range(len(run.sent)):
            for seq in sorted(set(run.sent[w]) | set(reference.sent[w])):
                mine, theirs = run.sent[w].get(seq), reference.sent[w].get(seq)
                if None in (mine, theirs) and (asks_again(mine) or asks_again(theirs)):
                    continue     # sent only where a timer ran out, which the engines time apart
                assert run.sent[w].get(seq) == reference.sent[w].get(seq), \
                    f"worker {w} on {run.engines[w]} sent seq {seq} as {describe(run.sent[w].get(seq))}, " \
                    f"on {reference.engines[w]} as {describe(reference.sent[w].get(seq))}"
        for w in range(len(run.window_acked)):
            assert run.window_acked[w] == reference.window_acked[w], \
                f"worker {w} on {run.engines[w]} window-acked {describe_acked(run.window_acked[w])}, " \
                f"on {reference.engines[w]} {describe_acked(reference.window_acked[w])}"
        for c, per_worker in enumerate(run.results):
            for w, got in enumerate(per_worker):
                assert same(got, reference.results[c][w]), f"call {c} worker {w} on {run.engines[w]}: {got!r}"


def asks_again(payload: bytes | None) -> bool:
    """A JOIN for an eager Broadcast round, which a worker sends only for a result it lost."""
    if payload is None:
        return False
    header = unpack_header(payload, (len(payload) - HEADER_SIZE) // 4)
    return header.opcode == OP_JOIN and bool(header.flags & FLAG_EAGER)


def describe_acked(acked: dict[int, tuple[int, ...]]) -> str:
    return ", ".join(f"{seq}: {code[:-1]} {code[-1] >> 8:#x}/{code[-1] & 0xFF}" for seq, code in sorted(acked.items()))


def describe(payload: bytes | None) -> str:
    return "nothing" if payload is None else f"{unpack_header(payload, (len(payload) - HEADER_SIZE) // 4)}"


@pytest.fixture(scope="module")
def compiled() -> None:
    if engine.unavailable() is not None:
        pytest.fail(f"the compiled engine does not build here: {engine.unavailable()}")


def test_the_engine_is_chosen_for_udp_sockets_and_python_elsewhere(compiled: None, program: Program) -> None:
    transport = UdpTransport(("127.0.0.1", 9), ("127.0.0.1", 0))
    try:
        assert Worker(JobConfig(1, 0, 2), transport).engine == "c"
        assert Worker(JobConfig(1, 0, 2, engine="python"), transport).engine == "python"
    finally:
        transport.close()
    with InProcessFabric(Switch(program), [host(1)]) as fabric:
        assert Worker(JobConfig(1, 0, 1), fabric.transport(0)).engine == "python"
    with pytest.raises(ValueError, match="engine must be one of c, python"):
        JobConfig(1, 0, 2, engine="rust")


def test_mixed_jobs_give_every_worker_the_same_bits_and_send_the_same_packets(compiled: None,
                                                                            program: Program) -> None:
    calls = matrix_calls()     # its AllGather comes after a Broadcast: eager rounds, on both engines
    runs = [run_job(program, engines, calls, LOSSY, eager_rounds=True)
            for engines in (["python"] * N, ["c"] * N, ["c", "python", "c", "python"])]
    assert [r.engines for r in runs] == [["python"] * N, ["c"] * N, ["c", "python", "c", "python"]]
    assert_jobs_agree(runs)
    assert all(resent > 0 for run in runs for resent in run.resent), "the loss was not exercised"
    assert all(run.window_acked[2] for run in runs), "no Reduce was acknowledged by its root"
    results = runs[0].results
    ints = [call[0] for call in results[:4]]       # the int32 sums: numpy's
    assert all(r.dtype == np.int32 for r in ints)
    np.testing.assert_array_equal(ints[2], np.sum(inputs(3, 300, np.dtype(np.int32)), axis=0, dtype=np.int32))
    # The errors are the ones each call must raise (and the workers stayed in step after them).
    assert results[-5] == [None] * N                                               # barrier
    assert all("int32 sum overflowed in 3 chunk(s)" in str(r) for r in results[-4])
    assert all(isinstance(r, IncOverflowError) and r.chunks == [1] for r in results[-3])   # inf
    assert all("float16's range" in str(r) for r in results[-2])
    np.testing.assert_array_equal(results[-1][0], np.arange(5, dtype=np.int32) * N)


def eager_requests(payloads: list[bytes], seqs: range) -> list[int]:
    """The seqs of the eager JOINs (requests for a lost result) among `payloads`, in order."""
    return [h.seq for h in (unpack_header(p, (len(p) - HEADER_SIZE) // 4) for p in payloads)
            if h.seq in seqs and h.opcode == OP_JOIN and h.flags & FLAG_EAGER]


@pytest.mark.parametrize("engine_name", ["python", "c"])
def test_a_late_root_draws_a_few_requests_not_one_per_item_and_rto(compiled: None, program: Program,
                                                                   engine_name: str) -> None:
    """An eager Broadcast whose root starts 0.3 s after the others: their silent items wait for a
    sign of loss, so only the oldest asks, each time after twice as long (0.02 s, 0.04 s, ...),
    not every silent item every RTO (a request storm the switch drops as early)."""
    late, length = 0.3, 20 * INC_K
    xs = inputs(31, length, np.dtype(np.int32))

    def late_broadcast(wk: Worker, w: int) -> np.ndarray:
        if w == 1:
            time.sleep(late)
        return wk.broadcast(xs[w], root=1)

    calls: list[Call] = [lambda wk, w: wk.barrier(), lambda wk, w: wk.broadcast(xs[w], root=1), late_broadcast]
    run = run_job(program, [engine_name] * N, calls, eager_rounds=True, min_rto=0.02)
    assert all(out.tobytes() == xs[1].tobytes() for call in run.results[1:] for out in call)
    late_seqs = range(1 + 20, 1 + 2 * 20)          # the barrier, the first Broadcast's 20 chunks, then these
    for w in (0, 2, 3):
        asked = eager_requests(run.payloads[w], late_seqs)
        assert 1 <= len(asked) <= 6, f"worker {w} on {engine_name} asked {asked}"


@pytest.mark.parametrize("engine_name", ["python", "c"])
def test_a_lost_result_that_holds_up_a_gate_is_asked_for_again(compiled: None, program: Program,
                                                                engine_name: str) -> None:
    """An eager AllGather of 2 chunks per worker (window 8: gates are items 0, 5 and 7): worker 2
    loses item 1's result, root 0's last chunk. No later result of root 0 shows it lost, and gate 5
    waits for it (items up to 5 - 8 // 4 - 1 answered first), so only the oldest item's timer,
    run from the last progress, can ask for it."""
    xs = inputs(32, 2 * INC_K, np.dtype(np.int32))
    lost_seq = 2                                   # the barrier is seq 0, the AllGather's items 1..8
    dropped: list[int] = []

    def deliver(w: int, payload: bytes) -> list[bytes]:
        if w == 2 and not dropped and unpack_header(payload, INC_K).seq == lost_seq:
            dropped.append(lost_seq)
            return []
        return [payload]

    calls: list[Call] = [lambda wk, w: wk.barrier(), lambda wk, w: wk.all_gather(xs[w])]
    run = run_job(program, [engine_name] * N, calls, deliver=deliver, eager_rounds=True)
    assert dropped == [lost_seq]
    assert all(out.tobytes() == np.stack(xs).tobytes() for out in run.results[1])
    assert lost_seq in eager_requests(run.payloads[2], range(1, 9))


@pytest.mark.parametrize("engine_name", ["python", "c"])
def test_eager_results_that_come_before_their_call_are_kept_for_it(compiled: None, program: Program,
                                                                  engine_name: str) -> None:
    """Worker 2 is still in a Barrier (its ACK comes late) when root 0, done with it, starts an
    eager Broadcast of 4 chunks (window 8: items 0-2 eager, 3 the gate), so worker 2 reads three
    results before its Broadcast has items for them. It keeps them and takes them as it makes
    those items: no timeout and no request (dropped, each would wait an RTO and be asked for)."""
    late, chunks = 2, 4
    xs = inputs(33, chunks * INC_K, np.dtype(np.int32))
    eager_seqs = {1, 2, 3}                      # the Barrier is seq 0, the Broadcast's items 1..4
    passed: set[int] = set()
    held: list[bytes] = []

    def deliver(w: int, payload: bytes) -> list[bytes]:
        seq = unpack_header(payload, INC_K).seq
        if w != late:
            return [payload]
        if seq == 0 and passed != eager_seqs:       # the Barrier's ACK (or its answer again)
            held.append(payload)
            return []
        passed.update({seq} & eager_seqs)
        if passed != eager_seqs:
            return [payload]
        out = [payload, *held]
        held.clear()
        return out

    calls: list[Call] = [lambda wk, w: wk.barrier(),
                         lambda wk, w: (wk.broadcast(xs[w], root=0), wk.last_stats)]
    run = run_job(program, [engine_name] * N, calls, deliver=deliver, eager_rounds=True, timeout=0.5)
    assert passed == eager_seqs and not held
    assert all(out.tobytes() == xs[0].tobytes() for out, _ in run.results[1])
    stats = run.results[1][late][1]
    assert (stats.early_results, stats.timeouts, stats.retransmits, stats.early_drops) == (3, 0, 0, 0), stats
    assert eager_requests(run.payloads[late], range(1, 1 + chunks)) == []


def reduce_calls(stats: dict[tuple[int, int], Any]) -> list[Call]:
    """Reduce and ReduceScatter calls in a row, each worker's stats kept in `stats` by (worker, call):
    the first learns that the switch takes window ACKs, the others are acknowledged by their roots.
    Long enough for several window ACKs per root and call, of int32, min and float items (redone
    ones among them: the magnitudes change from call to call)."""
    calls: list[Call] = []

    def kept(call: Call) -> Call:
        c = len(calls)

        def run(wk: Worker, w: int) -> Any:
            try:
                return call(wk, w)
            finally:
                stats[w, c] = wk.last_stats
        return run

    ints = inputs(41, N * 9 * INC_K, np.dtype(np.int32))
    calls.append(kept(lambda wk, w: wk.reduce(ints[w], root=1)))
    calls.append(kept(lambda wk, w: wk.reduce_scatter(ints[w])))
    calls.append(kept(lambda wk, w: wk.reduce(ints[w], root=3)))
    for seed, scale in ((42, 1e4), (43, 1e-3), (44, 1.0)):
        xs = inputs(seed, N * 8 * INC_K + 8, np.dtype(np.float32), scale)    # 9 chunks a root
        calls.append(kept(lambda wk, w, xs=xs: wk.reduce_scatter(xs[w])))
        calls.append(kept(lambda wk, w, xs=xs: wk.reduce(xs[w], root=0)))
    calls.append(kept(lambda wk, w: wk.reduce(ints[w], root=2, op="min")))
    return calls


def test_reduces_acknowledged_by_their_roots_agree_between_engines(compiled: None, program: Program) -> None:
    """From the second Reduce on, each chunk's root acknowledges it to the others in window ACKs:
    under loss, C, Python and mixed jobs send the same packets, and the same flags and need for
    each item in their window ACKs, and get the same bits."""
    runs, all_stats = [], []
    for engines in (["python"] * N, ["c"] * N, ["python", "c", "python", "c"]):
        stats: dict[tuple[int, int], Any] = {}
        runs.append(run_job(program, engines, reduce_calls(stats), LOSSY, window=16))
        all_stats.append(stats)
    assert_jobs_agree(runs)
    assert all(resent > 0 for run in runs for resent in run.resent), "the loss was not exercised"
    ints = inputs(41, N * 9 * INC_K, np.dtype(np.int32))
    np.testing.assert_array_equal(runs[0].results[0][1], np.sum(ints, axis=0, dtype=np.int32))
    np.testing.assert_array_equal(runs[0].results[-1][2], np.min(ints, axis=0))
    for run, stats in zip(runs, all_stats):
        calls = len(run.results)
        assert all(stats[w, 0].window_acks == 0 for w in range(N)), "the first Reduce used window ACKs"
        for c in range(1, calls):
            # Every worker is a root of a ReduceScatter, and the others take the roots' window ACKs.
            assert all(stats[w, c].window_acks > 0 for w in range(N)), (run.engines, c, stats)
        assert all(run.window_acked[w] for w in range(N)), run.engines


def test_a_job_that_declines_window_acks_acknowledges_nothing(compiled: None, program: Program) -> None:
    """JobConfig.window_acks False: the switch's Reduce results say it takes window ACKs, but no
    worker flags a chunk for them or sends one; the switch acknowledges every chunk as before."""
    stats: dict[tuple[int, int], Any] = {}
    run = run_job(program, ["c", "python", "c", "python"], reduce_calls(stats)[:3], window_acks=False)
    assert not any(p[1] & FLAG_WINDOW_ACKS or is_window_ack(p) for sent in run.payloads for p in sent)
    assert all(s.window_acks == 0 for s in stats.values())
    np.testing.assert_array_equal(run.results[0][1], np.sum(inputs(41, N * 9 * INC_K, np.dtype(np.int32)),
                                                          axis=0, dtype=np.int32))


def test_an_engine_that_spins_before_sleeping_sends_the_same_packets(compiled: None, program: Program) -> None:
    """JobConfig.spin and spin_large change when the engine sleeps, not what it sends or gets:
    under loss, C workers that read for 2 ms (small calls) or 1 ms (larger ones) before each
    sleep agree with the Python path bit for bit."""
    large = inputs(99, (engine.POLL_CHUNKS + 1) * INC_K, np.dtype(np.float32))      # polls spin_large
    calls = matrix_calls()[:12] + [lambda wk, w: wk.allreduce(large[w])]
    runs = [run_job(program, ["python"] * N, calls, LOSSY),
            run_job(program, ["c"] * N, calls, LOSSY, spin=0.002, spin_large=0.001)]
    assert runs[1].engines == ["c"] * N
    assert_jobs_agree(runs)
    assert all(resent > 0 for run in runs for resent in run.resent), "the loss was not exercised"
    for bad in ({"spin": -0.001}, {"spin_large": -0.001}):
        with pytest.raises(ValueError, match="spin and spin_large must be"):
            JobConfig(1, 0, 2, **bad)


@pytest.mark.parametrize("k", [1, 7, 64])
def test_other_elements_per_packet_agree_between_engines(compiled: None, program: Program, k: int) -> None:
    """K is the job's: both engines cut, pack and read packets of k elements (through a
    LoopbackAggregator, which takes any K, since the P4 program is built for its own)."""
    from tests.workloads.aggregator import LoopbackAggregator
    calls = matrix_calls()[:16]
    runs = []
    for engines in (["python"] * N, ["c", "python", "c", "python"]):
        aggregator = LoopbackAggregator(job_id=1, num_workers=N, k=k)
        workers = [Worker(JobConfig(1, w, N, window=8, timeout=0.05, elements_per_packet=k, engine=e),
                          UdpTransport(aggregator.address, ("127.0.0.1", 0))) for w, e in enumerate(engines)]
        try:
            with ThreadPoolExecutor(N) as pool:
                per_worker = list(pool.map(lambda w: [call(workers[w], w) for call in calls], range(N)))
        finally:
            for worker in workers:
                worker.close()
            aggregator.close()
        assert [w.engine for w in workers] == engines
        runs.append(per_worker)
    for w in range(N):
        for c in range(len(calls)):
            assert same(runs[0][w][c], runs[1][w][c]), (w, c)
    assert workers[0].last_stats.chunks == -(-300 // k)


def test_a_missing_peer_times_out_with_the_python_path_s_error(compiled: None, program: Program) -> None:
    switch = Switch(program)
    job = Job(job_id=1, hosts=(host(1), host(2)), num_slots=2)
    install_forwarding(switch, list(job.hosts))
    install_job(switch, job)
    port = free_udp_port()
    with InProcessFabric(switch, list(job.hosts)) as fabric, UdpBridge(fabric, 2, port) as bridge:
        worker = Worker(JobConfig(1, 0, 2, window=2, timeout=0.001, give_up_after=0.2),
                        UdpTransport(bridge.address, (loopback_ip(0), port)))
        try:
            assert worker.engine == "c"
            with pytest.raises(IncTimeoutError, match=r"job 1 worker 0: no result for seq 0 \(chunk 0 of the call\)"):
                worker.allreduce(np.ones(5, np.int32))
            assert worker.next_seq == 1 and worker.last_stats.timeouts > 0 and worker.last_stats.retransmits > 0
        finally:
            worker.close()


def test_without_a_compiler_the_worker_runs_python_and_says_why_once(monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setattr("shutil.which", lambda name: None)
    engine.library.cache_clear()
    engine.unavailable.cache_clear()
    transport = UdpTransport(("127.0.0.1", 9), ("127.0.0.1", 0))
    try:
        with caplog.at_level(logging.WARNING, logger="hosts.engine"):
            workers = [Worker(JobConfig(1, 0, 2), transport) for _ in range(3)]
        assert [w.engine for w in workers] == ["python"] * 3
        lines = [r.getMessage() for r in caplog.records if r.name == "hosts.engine"]
        assert len(lines) == 1 and "no C compiler found" in lines[0] and "using the Python engine" in lines[0]
    finally:
        transport.close()
        engine.library.cache_clear()
        engine.unavailable.cache_clear()


def test_sends_the_kernel_refuses_are_dropped_counted_and_named_in_the_timeout(compiled: None) -> None:
    """A broadcast address without SO_BROADCAST: every send fails (EACCES), none raises."""
    transport = UdpTransport(("255.255.255.255", 9), ("127.0.0.1", 0))
    worker = Worker(JobConfig(1, 0, 2, window=4, timeout=0.005, min_rto=0.005, give_up_after=0.1), transport)
    try:
        assert worker.engine == "c"
        with pytest.raises(IncTimeoutError, match=r"the socket last refused a send: Permission denied \(errno 13\)"):
            worker.allreduce(np.ones(100, np.int32))
        stats = worker.last_stats
        assert stats.send_drops == stats.packets_sent > 4 and transport.counters.dropped == stats.send_drops
    finally:
        worker.close()


SO_NO_CHECK = 11      # Linux: no UDP checksums on this socket's sends, and so no UDP_SEGMENT


def test_a_socket_that_refuses_segmentation_offload_sends_its_datagrams_one_by_one(compiled: None) -> None:
    """The engine sends a run of same-size datagrams to one address as one UDP_SEGMENT send. A
    socket the kernel will not segment for (here: SO_NO_CHECK) is noted at its first refusal and
    sends the same datagrams one per send: nothing is lost, and both workers get the sum."""
    from tests.workloads.aggregator import LoopbackAggregator
    aggregator = LoopbackAggregator(job_id=1, num_workers=2, k=64)
    transports = [UdpTransport(aggregator.address, ("127.0.0.1", 0)) for _ in range(2)]
    transports[1].sock.setsockopt(socket.SOL_SOCKET, SO_NO_CHECK, 1)
    workers = [Worker(JobConfig(1, w, 2, window=32, timeout=0.05, elements_per_packet=64), t)
               for w, t in enumerate(transports)]
    rng = np.random.default_rng(3)
    inputs = [rng.integers(-1000, 1000, 64 * 40, dtype=np.int32) for _ in range(2)]
    try:
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda w: [workers[w].allreduce(inputs[w]) for _ in range(2)], range(2)))
    finally:
        for worker in workers:
            worker.close()
        aggregator.close()
    for per_call in results:
        for result in per_call:
            np.testing.assert_array_equal(result, inputs[0] + inputs[1])
    assert [w._engine.counters.gso_refused for w in workers] == [0, 1]
    assert [w.last_stats.send_drops for w in workers] == [0, 0]


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BFLOAT16], ids=str)
def test_a_repeated_float_call_on_the_engine_is_the_documented_sum_bit_for_bit(compiled: None, program: Program,
                                                                              dtype: np.dtype) -> None:
    inputs = wide_range(np.random.default_rng(9), N, 10, dtype)
    run = run_job(program, ["c"] * N, [lambda wk, w: wk.allreduce(inputs[w])] * 2)
    expected = exact_result(inputs, steady_exponents(inputs))
    assert all(out.tobytes() == expected.tobytes() for out in run.results[1])


def test_stats_timer_and_window_read_after_two_calls_are_the_second_s(compiled: None, program: Program) -> None:
    """A compiled worker copies its `last_stats`, `rto` and `cwnd` from the engine when they are
    first asked for after a call (a small call's Python is each worker's, on shared cores): read
    after each of two calls they describe that call, as the Python path's do."""
    small, large = np.arange(10, dtype=np.float32), np.arange(3 * INC_K, dtype=np.int32)

    def two_calls(wk: Worker, w: int) -> tuple[Any, ...]:
        wk.allreduce(small)
        assert wk.last_stats is not None and (wk.last_stats.dtype, wk.last_stats.chunks) == ("float32", 1)
        wk.allreduce(large)
        return wk.last_stats, wk.rto.srtt, wk.rto.rto, wk.cwnd.cwnd

    run = run_job(program, ["c", "python", "c", "python"], [two_calls])
    for (stats, srtt, rto, cwnd), on in zip(run.results[0], run.engines):
        assert (stats.dtype, stats.elements, stats.chunks) == ("int32", 3 * INC_K, 3), on
        assert stats.packets_sent == stats.chunks + stats.retransmits and stats.results >= stats.chunks, on
        assert stats.rtt_samples <= stats.chunks and (stats.rtt_samples > 0 or stats.retransmits > 0), on
        assert stats.send_waits == stats.send_drops == 0, on
        assert (stats.srtt_s, stats.final_rto_s, stats.final_window) == (srtt, rto, cwnd), on
    assert run.engines == ["c", "python", "c", "python"]
