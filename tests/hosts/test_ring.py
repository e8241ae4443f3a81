"""The host ring AllReduce baseline over loopback UDP sockets and through p4sim running
allreduce.p4 (forwarding only), with lost, duplicated and reordered packets, checked
against numpy's sum."""
from __future__ import annotations

import dataclasses
import queue
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

import numpy as np
import pytest
from p4sim import Switch

from hosts.inc import HEADER_SIZE, INC_K, OP_RING, OP_RING_ACK, IncHeader, pack, unpack
from hosts.inprocess import Faults, InProcessFabric
from hosts.ring import RingConfig, RingStats, RingWorker
from hosts.transport import UdpPeerTransport
from tests.hosts.conftest import counter, host, install_forwarding


class LossyPeers:
    """A PeerTransport that loses and duplicates sends at random."""

    def __init__(self, inner: UdpPeerTransport, loss: float, duplicate: float, seed: int) -> None:
        self.inner, self.loss, self.duplicate = inner, loss, duplicate
        self.rng = random.Random(seed)
        self.lock = threading.Lock()

    def send_to(self, peer: int, payload: bytes) -> None:
        with self.lock:
            lost, twice = self.rng.random() < self.loss, self.rng.random() < self.duplicate
        for _ in range(0 if lost else 2 if twice else 1):
            self.inner.send_to(peer, payload)

    def recv(self, timeout: float) -> bytes | None:
        return self.inner.recv(timeout)

    def close(self) -> None:
        self.inner.close()


def ring_allreduce(inputs: list[list[np.ndarray]], loss: float = 0.0, duplicate: float = 0.0,
                   stats: list[RingStats] | None = None, window: int = 8, timeout: float = 0.01,
                   last_stats: list[RingStats] | None = None,
                   call: Callable[[RingWorker, np.ndarray], Any] = RingWorker.allreduce) -> list[list[Any]]:
    """inputs[call][rank] -> outputs[call][rank] of `call` (default allreduce), one thread per
    rank; each rank's stats go to `stats`, those of its last call to `last_stats` (which all
    ranks then start together)."""
    n = len(inputs[0])
    sockets = [UdpPeerTransport([], bind=("127.0.0.1", 0)) for _ in range(n)]
    peers = [s.address for s in sockets]
    workers = []
    for rank, sock in enumerate(sockets):
        sock.peers = peers
        workers.append(RingWorker(RingConfig(job_id=1, rank=rank, num_workers=n, window=window, timeout=timeout,
                                             max_retries=500), LossyPeers(sock, loss, duplicate, seed=rank)))

    # Counting a call needs a common start, with each rank's counts read before it: else a
    # rank could ack its predecessor's first chunks before its own call began (the pool starts
    # its threads one by one), outside the worker's own `last_stats`.
    start = threading.Barrier(n)
    counts = [(RingStats(), RingStats()) for _ in range(n)]     # each rank's before and after its last call

    def run(rank: int) -> list[np.ndarray]:
        worker = workers[rank]
        outs = [call(worker, arrays[rank]) for arrays in inputs[:-1]]
        before = dataclasses.replace(worker.stats)
        if last_stats is not None:
            start.wait()
        outs.append(call(worker, inputs[-1][rank]))
        counts[rank] = (before, dataclasses.replace(worker.stats))
        return outs

    try:
        with ThreadPoolExecutor(n) as pool:
            per_rank = list(pool.map(run, range(n)))
    finally:
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(lambda w: w.close(), workers))
    if stats is not None:
        stats.extend(w.stats for w in workers)
    if last_stats is not None:
        last_stats.extend(RingStats(*(a - b for a, b in zip(dataclasses.astuple(after), dataclasses.astuple(before))))
                          for before, after in counts)
    return [[per_rank[r][c] for r in range(n)] for c in range(len(inputs))]


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("length", [1, INC_K - 1, INC_K + 1, 1000])
def test_ring_int32_sum_is_exact(n: int, length: int) -> None:
    rng = np.random.default_rng(n * 1000 + length)
    inputs = [[rng.integers(-10**6, 10**6, length, dtype=np.int32) for _ in range(n)]]
    for out in ring_allreduce(inputs)[0]:
        np.testing.assert_array_equal(out, np.sum(inputs[0], axis=0, dtype=np.int32))


def test_ring_float32_survives_loss_and_duplicates_over_several_calls() -> None:
    rng = np.random.default_rng(7)
    n = 3
    inputs = [[rng.standard_normal(300).astype(np.float32) for _ in range(n)] for _ in range(3)]
    stats: list[RingStats] = []
    outputs = ring_allreduce(inputs, loss=0.1, duplicate=0.1, stats=stats)
    assert sum(s.retransmissions for s in stats) > 0     # the loss was there, and recovered from
    for call, outs in zip(inputs, outputs):
        expected = np.sum(np.array(call, np.float64), axis=0)
        for out in outs:
            assert out.dtype == np.float32 and out.shape == (300,)
            np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("rows", [1, INC_K + 3])
def test_ring_halves_and_pipelines_match_numpy_under_loss(n: int, rows: int) -> None:
    """The baselines of the switch's other collectives, two calls each (the ranks' chunk
    numbering must carry over between them), with lost and duplicated chunks."""
    rng = np.random.default_rng(n * 100 + rows)
    ints = [[rng.integers(-10**6, 10**6, (n * rows, 2), dtype=np.int32) for _ in range(n)] for _ in range(2)]
    floats = [[rng.standard_normal(n * rows).astype(np.float16) for _ in range(n)] for _ in range(2)]
    root = n - 1
    lossy = {"loss": 0.05, "duplicate": 0.05}
    scattered = ring_allreduce(ints, call=RingWorker.reduce_scatter, **lossy)
    gathered = ring_allreduce(floats, call=RingWorker.all_gather, **lossy)
    reduced = ring_allreduce(ints, call=lambda w, a: w.reduce(a, root), **lossy)
    broadcast = ring_allreduce(floats, call=lambda w, a: w.broadcast(a, root), **lossy)
    for c in range(2):
        total = np.sum(ints[c], axis=0, dtype=np.int32)
        for rank in range(n):
            np.testing.assert_array_equal(scattered[c][rank], total[rank * rows:(rank + 1) * rows])
            assert gathered[c][rank].dtype == np.float16
            np.testing.assert_array_equal(gathered[c][rank], np.stack(floats[c]))
            np.testing.assert_array_equal(broadcast[c][rank], floats[c][root])
            if rank == root:
                np.testing.assert_array_equal(reduced[c][rank], total)
            else:
                assert reduced[c][rank] is None


def test_ring_barrier_waits_for_the_last_rank() -> None:
    """A rank that calls late holds every other rank's barrier until it arrives."""
    n, late = 3, 0.3
    returned: list[float] = []
    start = time.monotonic()

    def barrier(worker: RingWorker, delay: float) -> None:
        time.sleep(delay)
        worker.barrier()
        returned.append(time.monotonic() - start)

    ring_allreduce([[0.0, 0.0, late]], call=barrier)
    assert len(returned) == n and min(returned) >= late


def test_ring_collectives_refuse_bad_roots_and_dtypes() -> None:
    worker = RingWorker(RingConfig(job_id=1, rank=0, num_workers=2), UdpPeerTransport([], bind=("127.0.0.1", 0)))
    try:
        with pytest.raises(ValueError, match="root must be a rank 0..1"):
            worker.broadcast(np.zeros(4, np.int32), 2)
        with pytest.raises(TypeError, match="not float64"):
            worker.reduce(np.zeros(4), 0)
        with pytest.raises(ValueError, match="divisible by 2"):
            worker.reduce_scatter(np.zeros(3, np.int32))
    finally:
        worker.close()


def test_lossless_ring_sends_one_ack_per_several_chunks_and_no_retransmission() -> None:
    """The acks are cumulative and delayed: with a window of 16, at most one per 8 in-order
    chunks (plus one per step's tail), so the ring's speed is bounded by its data packets."""
    n, length = 4, 64 * INC_K
    rng = np.random.default_rng(5)
    inputs = [[rng.integers(-1000, 1000, length, dtype=np.int32) for _ in range(n)]]
    stats: list[RingStats] = []
    (outs,) = ring_allreduce(inputs, stats=stats, window=16, timeout=0.5)
    for out in outs:
        np.testing.assert_array_equal(out, np.sum(inputs[0], axis=0, dtype=np.int32))
    # Each rank sends its 2(N-1) segments of 16 chunks once.
    assert [s.chunks for s in stats] == [2 * (n - 1) * length // INC_K // n] * n
    assert sum(s.retransmissions for s in stats) == 0
    steps = 2 * (n - 1)
    for s in stats:
        assert s.acks <= s.chunks // 8 + steps, s


@pytest.mark.parametrize("n, length", [(4, 1), (8, 3 * INC_K)])
def test_message_of_fewer_chunks_than_ranks_sends_each_chunk_once_per_step(n: int, length: int) -> None:
    """Empty segments send nothing: 2(N-1) x chunks data packets in all, not 2(N-1) x N."""
    rng = np.random.default_rng(n)
    inputs = [[rng.integers(-1000, 1000, length, dtype=np.int32) for _ in range(n)]]
    last: list[RingStats] = []
    (outs, _) = ring_allreduce(inputs + inputs, last_stats=last, timeout=0.5)
    for out in outs:
        np.testing.assert_array_equal(out, np.sum(inputs[0], axis=0, dtype=np.int32))
    # The second call's own count, not the first's too.
    assert sum(s.chunks for s in last) == 2 * (n - 1) * -(-length // INC_K)
    assert sum(s.retransmissions for s in last) == 0


class DropFirst:
    """A PeerTransport that loses its first `count` sends."""

    def __init__(self, inner: UdpPeerTransport, count: int) -> None:
        self.inner, self.count = inner, count

    def send_to(self, peer: int, payload: bytes) -> None:
        if self.count > 0:
            self.count -= 1
            return
        self.inner.send_to(peer, payload)

    def recv(self, timeout: float) -> bytes | None:
        return self.inner.recv(timeout)

    def close(self) -> None:
        self.inner.close()


def test_ring_times_its_round_trips_and_backs_off_after_a_timeout() -> None:
    """Rank 0's first chunk is lost with nothing after it to reveal the hole: only its timer
    can resend it, and the expiry cuts the window; later acks bring round-trip samples, and
    the measured timeout stays at least twice the ack delay."""
    sockets = [UdpPeerTransport([], bind=("127.0.0.1", 0)) for _ in range(2)]
    for sock in sockets:
        sock.peers = [s.address for s in sockets]
    config = [RingConfig(job_id=1, rank=r, num_workers=2, window=16, timeout=0.05) for r in range(2)]
    workers = [RingWorker(config[0], DropFirst(sockets[0], 1)), RingWorker(config[1], sockets[1])]
    rng = np.random.default_rng(2)
    calls = [[rng.integers(-1000, 1000, length, dtype=np.int32) for _ in range(2)] for length in (INC_K, 64 * INC_K)]
    try:
        with ThreadPoolExecutor(2) as pool:
            outs = list(pool.map(lambda r: [workers[r].allreduce(c[r]) for c in calls], range(2)))
        rto = workers[0].rto
    finally:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda w: w.close(), workers))
    for r in range(2):
        for c, call in enumerate(calls):
            np.testing.assert_array_equal(outs[r][c], np.sum(call, axis=0, dtype=np.int32))
    assert workers[0].stats.retransmissions >= 1 and workers[0].cwnd.losses >= 1
    assert rto.samples > 0 and rto.rto >= 2 * config[0].ack_delay_s


def test_ring_config_refuses_an_ack_delay_the_sender_would_time_out_on() -> None:
    with pytest.raises(ValueError, match="below the timeout"):
        RingConfig(job_id=1, rank=0, num_workers=2, timeout=0.01, ack_delay=0.01)


def test_ring_through_allreduce_p4_only_forwards(switch: Switch) -> None:
    """The baseline's packets cross the switch as ordinary traffic, lossy links included."""
    n = 4
    hosts = [host(i) for i in range(1, n + 1)]
    install_forwarding(switch, hosts)
    rng = np.random.default_rng(3)
    inputs = [rng.integers(-1000, 1000, 400, dtype=np.int32) for _ in range(n)]
    with InProcessFabric(switch, hosts, Faults(loss=0.05, duplicate=0.05, reorder=0.1, seed=1)) as fabric:
        workers = [RingWorker(RingConfig(job_id=1, rank=r, num_workers=n, window=8, timeout=0.01, max_retries=500),
                              fabric.peer_transport(r)) for r in range(n)]
        try:
            with ThreadPoolExecutor(n) as pool:
                outs = list(pool.map(lambda r: workers[r].allreduce(inputs[r]), range(n)))
        finally:
            with ThreadPoolExecutor(n) as pool:
                list(pool.map(lambda w: w.close(), workers))
    for out in outs:
        np.testing.assert_array_equal(out, np.sum(inputs, axis=0, dtype=np.int32))
    assert all(v == 0 for name, c in switch.state.counters.items() for v in c.packets
               if name != "MyIngress.l2_miss_drops")
    assert counter(switch, "MyIngress.l2_miss_drops") == 0
    assert switch.stats["tx"] > 0



class QueuePeers:
    """A PeerTransport fed by the test: `inbox` is what the worker receives, `sent` what it
    sends, as (peer, payload)."""

    def __init__(self) -> None:
        self.inbox: queue.Queue[bytes] = queue.Queue()
        self.sent: queue.Queue[tuple[int, bytes]] = queue.Queue()

    def send_to(self, peer: int, payload: bytes) -> None:
        self.sent.put((peer, payload))

    def recv(self, timeout: float) -> bytes | None:
        try:
            return self.inbox.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        pass

    def chunk(self, seq: int) -> None:
        """Rank 0's chunk `seq` to rank 1, its elements all `seq`."""
        self.inbox.put(pack(IncHeader(opcode=OP_RING, job_id=1, worker_id=0, count=INC_K, slot=0, pool_version=0,
                                      seq=seq), np.full(INC_K, seq, np.int32)))

    def expect_ack(self, cumulative: int, above: list[int]) -> np.ndarray:
        """Check the next ack sent back to rank 0 against docs/protocol.md: the cumulative seq,
        and a bitmap whose bit i of element w is chunk cumulative + 1 + 32w + i; its K words."""
        peer, payload = self.sent.get(timeout=5)
        header, elements = unpack(payload)
        assert (peer, header.opcode, header.worker_id, header.seq) == (0, OP_RING_ACK, 1, cumulative)
        expected = np.zeros(INC_K, np.uint32)      # K words of 32 bits
        for s in above:
            d = s - cumulative - 1
            expected[d // 32] |= np.uint32(1 << (d % 32))
        used = int(np.flatnonzero(expected)[-1]) + 1 if expected.any() else 0
        # up to its last nonzero word, in whole blocks of 32; the receiver takes the rest for zeros
        assert header.count == used and elements.size == -(-used // 32) * 32
        words = np.zeros(INC_K, np.uint32)
        words[:elements.size] = elements.view(np.uint32)
        np.testing.assert_array_equal(words, expected)
        return words


def quiet_rank_one(peers: QueuePeers) -> RingWorker:
    """Rank 1 of 2, acking every 8 in-order chunks; its delayed ack would wait 1.5 s, longer
    than any test here takes to send the next chunk."""
    return RingWorker(RingConfig(job_id=1, rank=1, num_workers=2, window=16, timeout=2.0, ack_delay=1.5,
                                 max_rto=4.0), peers)


def test_ack_bitmap_lists_exactly_the_chunks_received_above_the_hole() -> None:
    """Out-of-order and duplicate chunks are acked at once, listing the chunks above the
    cumulative seq up to the bitmap's last bit (not the one after it); the chunks are then
    delivered in seq order."""
    peers = QueuePeers()
    worker = quiet_rank_one(peers)
    try:
        for s in (0, 1, 3):
            peers.chunk(s)
        peers.expect_ack(2, [3])
        peers.chunk(40)
        peers.expect_ack(2, [3, 40])
        peers.chunk(2)       # fills the hole: 0..3 in order, 40 still above it
        peers.chunk(3)       # seen before: the sender may lack an ack
        peers.expect_ack(4, [40])
        last_bit = 4 + 32 * INC_K
        peers.chunk(last_bit + 1)
        peers.expect_ack(4, [40])
        peers.chunk(last_bit)
        assert peers.expect_ack(4, [40, last_bit])[-1] == 1 << 31
        for s in range(4, 40):
            peers.chunk(s)
        delivered = worker.broadcast(np.zeros((41, INC_K), np.int32), root=0)
        np.testing.assert_array_equal(delivered, np.repeat(np.arange(41, dtype=np.int32)[:, None], INC_K, axis=1))
    finally:
        worker.close(linger=0)


class LooksCounted(dict[int, np.ndarray]):
    """The received chunks, counting the entries anything walks through."""

    looks = 0

    def __iter__(self) -> Iterator[int]:
        for key in super().__iter__():
            self.looks += 1
            yield key

    def keys(self) -> Iterator[int]:  # type: ignore[override]
        return iter(self)

    def items(self) -> Iterator[tuple[int, np.ndarray]]:  # type: ignore[override]
        return ((k, self[k]) for k in self)

    def values(self) -> Iterator[np.ndarray]:  # type: ignore[override]
        return (self[k] for k in self)


def test_acks_of_in_order_chunks_look_at_none_of_the_received_chunks() -> None:
    """An ack costs the chunks out of order, not the step's: 400 chunks in order, held
    unconsumed, get their 50 acks (one per 8, nothing above the cumulative seq) without a walk
    over the received chunks (listing them for every ack was quadratic in a step's chunks)."""
    peers = QueuePeers()
    worker = quiet_rank_one(peers)
    received = LooksCounted()
    worker._received = received
    try:
        for s in range(400):
            peers.chunk(s)
        for k in range(1, 51):
            peers.expect_ack(8 * k, [])
        assert received.looks == 0 and len(received) == 400
    finally:
        worker.close(linger=0)


class WakeCounted(threading.Condition):
    """A condition counting how often a waiter woke up."""

    wakes = 0

    def wait(self, timeout: float | None = None) -> bool:
        woken = super().wait(timeout)
        self.wakes += 1
        return woken


def test_a_call_waiting_for_chunks_wakes_once_they_are_all_in() -> None:
    """Rank 1's AllGather sends its 16 chunks (one window, no ack needed) and waits for rank
    0's 16, which come in one by one: it is woken once, by the last (a wake-up per chunk is
    a context switch per chunk on shared cores)."""
    peers = QueuePeers()
    worker = quiet_rank_one(peers)
    worker._cv, worker._arrived = WakeCounted(worker._lock), WakeCounted(worker._lock)
    mine = np.arange(16 * INC_K, dtype=np.int32)
    try:
        with ThreadPoolExecutor(1) as pool:
            gathered = pool.submit(worker.all_gather, mine)
            for _ in range(16):
                assert unpack(peers.sent.get(timeout=5)[1])[0].opcode == OP_RING
            time.sleep(0.05)         # the call is waiting now
            for s in range(16):
                peers.chunk(s)
                time.sleep(0.005)
            result = gathered.result(timeout=5)
        np.testing.assert_array_equal(result[0], np.repeat(np.arange(16, dtype=np.int32), INC_K))
        np.testing.assert_array_equal(result[1], mine)
        assert (worker._arrived.wakes, worker._cv.wakes) == (1, 0)
    finally:
        worker.close(linger=0)


def test_a_short_tensor_s_ring_chunk_carries_only_its_blocks() -> None:
    """A 5-element AllGather chunk travels as one block of 32 with count 5, not as K elements;
    a chunk that comes in as one block is the whole row, zeros after it."""
    peers = QueuePeers()
    worker = quiet_rank_one(peers)
    mine, theirs = np.arange(1, 6, dtype=np.int32), np.arange(-5, 0, dtype=np.int32)
    try:
        with ThreadPoolExecutor(1) as pool:
            gathered = pool.submit(worker.all_gather, mine)
            payload = peers.sent.get(timeout=5)[1]
            header = unpack(payload)[0]
            assert (header.opcode, header.count, len(payload)) == (OP_RING, 5, HEADER_SIZE + 4 * 32)
            peers.inbox.put(pack(IncHeader(opcode=OP_RING, job_id=1, worker_id=0, count=5, slot=0, pool_version=0,
                                           seq=0), theirs))
            result = gathered.result(timeout=5)
        np.testing.assert_array_equal(result[0], theirs)
        np.testing.assert_array_equal(result[1], mine)
    finally:
        worker.close(linger=0)
