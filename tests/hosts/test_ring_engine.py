"""The ring baseline's compiled engine against its Python path: rings of C ranks, of Python
ranks and of both, on loopback UDP through relays that lose and duplicate packets, run the
same calls; every rank gets the same bits in every ring, and each rank sends the same data
packets (per seq) whichever engine it runs. Also for other K, since a ring needs no switch."""
from __future__ import annotations

import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np
import pytest

from hosts import engine
from hosts.agent import IncTimeoutError
from hosts.inc import FLAG_ACK_NOW, HEADER_SIZE, INC_K, OP_RING, unpack_header
from hosts.ring import RingConfig, RingWorker
from hosts.transport import UdpPeerTransport

N = 4
Call = Callable[[RingWorker, int], Any]


class LossyRelay:
    """Stands in for each rank's address: what reaches relay r goes on to rank r, or is lost,
    or goes twice; `data[r]` records the data packets rank r sent (seq -> payload), without
    FLAG_ACK_NOW: whether a chunk filled its sender's window depends on when acks came."""

    def __init__(self, targets: list[tuple[str, int]], loss: float, duplicate: float, seed: int) -> None:
        self.targets = targets
        self.rng = random.Random(seed)
        self.socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in targets]
        for s in self.socks:
            s.bind(("127.0.0.1", 0))
            s.settimeout(0.05)
        self.addresses = [s.getsockname() for s in self.socks]
        self.loss, self.duplicate = loss, duplicate
        self.data: list[dict[int, bytes]] = [{} for _ in targets]
        self.conflicts: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._relay, args=(r,)) for r in range(len(targets))]
        for t in self.threads:
            t.start()

    def _relay(self, r: int) -> None:
        while not self.stop.is_set():
            try:
                payload, _ = self.socks[r].recvfrom(4096)
            except socket.timeout:
                continue
            header = unpack_header(payload, (len(payload) - HEADER_SIZE) // 4)
            if header.opcode == OP_RING:
                data = payload[:1] + bytes((payload[1] & ~FLAG_ACK_NOW,)) + payload[2:]
                if self.data[header.worker_id].setdefault(header.seq, data) != data:
                    self.conflicts.append(f"rank {header.worker_id} sent seq {header.seq} twice, differently")
            if self.rng.random() < self.loss:
                continue
            for _ in range(2 if self.rng.random() < self.duplicate else 1):
                self.socks[r].sendto(payload, self.targets[r])

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        for s in self.socks:
            s.close()


def run_ring(engines: list[str], calls: list[Call], loss: float = 0.0, k: int = INC_K,
             **config: Any) -> tuple[list[list[Any]], list[dict[int, bytes]], list[str]]:
    """Every call on every rank (rank r on engines[r]): results [call][rank], data packets, engines."""
    n = len(engines)
    socks = [UdpPeerTransport([], bind=("127.0.0.1", 0)) for _ in range(n)]
    relay = LossyRelay([s.address for s in socks], loss, loss, seed=7)
    for s in socks:
        s.peers = relay.addresses
    options = {"window": 8, "timeout": 0.01, "max_retries": 500} | config
    try:
        workers = [RingWorker(RingConfig(1, r, n, elements_per_packet=k, engine=e, **options), socks[r])
                   for r, e in enumerate(engines)]
    except ValueError:
        relay.close()
        for s in socks:
            s.close()
        raise
    try:
        with ThreadPoolExecutor(n) as pool:
            per_rank = list(pool.map(lambda r: [call(workers[r], r) for call in calls], range(n)))
    finally:
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(lambda w: w.close(), workers))
        relay.close()
    assert not relay.conflicts, relay.conflicts
    return [[per_rank[r][c] for r in range(n)] for c in range(len(calls))], relay.data, [w.engine for w in workers]


def ring_calls(k: int) -> tuple[list[Call], list[np.ndarray]]:
    """The calls, and the int32 sums (numpy's) that the first of them must give."""
    rng = np.random.default_rng(k)
    calls: list[Call] = []
    sums = []
    for size in (1, k + 1, 40 * k + 3):
        for dtype in (np.int32, np.float32):
            xs = [(rng.standard_normal(size) * 1e3).astype(dtype) for _ in range(N)]
            calls.append(lambda w, r, xs=xs: w.allreduce(xs[r]))
            if dtype == np.int32:
                sums.append(np.sum(xs, axis=0, dtype=np.int32))
    xs = [rng.standard_normal((N * 9, 5)).astype(np.float32) for _ in range(N)]
    calls.append(lambda w, r: w.reduce_scatter(xs[r]))
    calls.append(lambda w, r: w.all_gather(xs[r][:7].astype(np.float16)))
    calls.append(lambda w, r: w.broadcast(xs[r], root=2))
    calls.append(lambda w, r: w.reduce(xs[r], root=1))
    calls.append(lambda w, r: w.barrier())
    return calls, sums


def same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture(scope="module")
def compiled() -> None:
    if engine.unavailable() is not None:
        pytest.fail(f"the compiled engine does not build here: {engine.unavailable()}")


@pytest.mark.parametrize("k", [INC_K, 7, 100])
def test_mixed_rings_agree_bit_for_bit_and_send_the_same_chunks(compiled: None, k: int) -> None:
    calls, sums = ring_calls(k)
    runs = [run_ring(engines, calls, loss=0.03, k=k)
            for engines in (["python"] * N, ["c"] * N, ["python", "c", "c", "python"])]
    assert [engines for _, _, engines in runs] == [["python"] * N, ["c"] * N, ["python", "c", "c", "python"]]
    reference, sent, _ = runs[0]
    for results, data, engines in runs:
        for r in range(N):
            assert data[r] == sent[r], f"rank {r} on {engines[r]} sent other chunks"
            for c in range(len(calls)):
                assert same(results[c][r], reference[c][r]), f"call {c} rank {r} on {engines[r]}"
    for c, expected in zip((0, 2, 4), sums):
        for r in range(N):
            np.testing.assert_array_equal(reference[c][r], expected)


def test_the_c_ring_is_numpy_s_sum_and_recovers_from_loss(compiled: None) -> None:
    rng = np.random.default_rng(1)
    inputs = [rng.integers(-2**31, 2**31, 5000, dtype=np.int64).astype(np.int32) for _ in range(N)]
    results, _, engines = run_ring(["c"] * N, [lambda w, r: (w.allreduce(inputs[r]), w.stats)], loss=0.05)
    assert engines == ["c"] * N
    for out, stats in results[0]:
        np.testing.assert_array_equal(out, np.sum(inputs, axis=0, dtype=np.int32))     # wrapping, as numpy's
    assert sum(stats.retransmissions for _, stats in results[0]) > 0


def test_a_c_ring_rank_without_its_neighbour_times_out_with_a_clear_error(compiled: None) -> None:
    socks = [UdpPeerTransport([], bind=("127.0.0.1", 0)) for _ in range(2)]
    for s in socks:
        s.peers = [t.address for t in socks]
    worker = RingWorker(RingConfig(1, 0, 2, timeout=0.01, max_retries=5), socks[0])
    try:
        assert worker.engine == "c"
        with pytest.raises(IncTimeoutError, match=r"ring rank 0: no chunks from rank 1 for 0\.1 s; are all 2 ranks up\?"):
            worker.allreduce(np.ones(3 * INC_K, np.int32))
    finally:
        worker.close(linger=0)
        socks[1].close()


def timed_allreduce(engines: list[str], **config: Any) -> float:
    """Seconds for two ranks (on `engines`) to AllReduce 40 chunks, checked, and close."""
    xs = [np.arange(40 * INC_K, dtype=np.int32) * (r + 1) for r in range(2)]
    start = time.monotonic()
    results, _, _ = run_ring(engines, [lambda w, r: w.allreduce(xs[r])], **config)
    took = time.monotonic() - start
    for out in results[0]:
        np.testing.assert_array_equal(out, xs[0] + xs[1])
    return took


@pytest.mark.parametrize("engines", [["python"] * 2, ["c"] * 2])
def test_a_window_under_the_ack_batch_never_waits_out_the_ack_delay(compiled: None, engines: list[str]) -> None:
    """A window (4) below the in-order chunks per ack (64), as after a cut: the chunk that fills
    it asks for its ack now (FLAG_ACK_NOW). Without that, each of the call's 10 windows a rank
    sends would wait out the 2 s ack delay: 20 s, where the call takes milliseconds."""
    took = timed_allreduce(engines, window=4, ack_every=64, ack_delay=2.0, timeout=5.0, max_rto=10.0)
    assert took < 10.0, f"the call took {took:.1f} s: its windows waited for delayed acks"


@pytest.mark.parametrize("engines", [["python"] * 2, ["c"] * 2])
def test_a_closing_rank_sends_the_ack_its_peer_lingers_for(compiled: None, engines: list[str]) -> None:
    """A window (64) above a rank's chunks in the call (40) and above the chunks per ack: its
    chunks are acknowledged only by the 6 s delayed ack, which the peer still owes when the call
    ends. Each rank's close sends what it owes first, so neither lingers out the delay (nor, with
    the peer's engine stopped, ten timeouts: 70 s) for acks the other had not sent yet. (The
    Python path's close also waits up to half a timeout for its thread's read: 3.5 s.)"""
    took = timed_allreduce(engines, window=64, ack_every=64, ack_delay=6.0, timeout=7.0, max_rto=14.0)
    assert took < 5.0, f"the call and the ranks' close took {took:.1f} s: a close waited for a delayed ack"
