"""The baseline the switch is measured against: a host ring AllReduce (reduce-scatter, then
all-gather, 2(N-1) steps) over UDP between hosts, with the INC packet format and the same
K-element chunks. Its transport is the best reliable one we could give it: a window of
chunks in flight, delayed cumulative acks with a selective-ack bitmap (one ack per several
chunks, as TCP does, and at once for the chunk that fills the sender's window), fast
retransmission of a hole, and the INC agent's measured retransmission timeout and congestion
window (hosts/pacing.py); the switch only forwards.
The same ring gives the baselines of the switch's other collectives: ReduceScatter and
AllGather are its two halves, Broadcast and Reduce pipelines along it, Barrier a one-element
AllReduce. Like the INC agent, on a kernel UDP socket it runs in the compiled engine
(hosts/engine), with the same packets, so the two compare algorithms, not languages.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hosts import engine, numerics
from hosts.agent import IncTimeoutError
from hosts.engine import DEFAULT_SPIN, DEFAULT_SPIN_LARGE
from hosts.inc import (FLAG_ACK_NOW, INC_K, MAX_WORKERS, OP_RING, OP_RING_ACK, IncFormatError, IncHeader,
                       check_elements_per_packet, pack, unpack)
from hosts.pacing import CongestionWindow, RtoEstimator
from hosts.transport import PeerTransport, UdpPeerTransport

log = logging.getLogger(__name__)

DUP_THRESHOLD = 3            # chunks selectively acked above a hole before it is sent again at once


def used_words(words: np.ndarray) -> int:
    """The words a ring packet needs: up to the last nonzero one, its count. It carries them in
    whole blocks and the receiver takes the rest for zeros, so a short tensor's padding costs no
    bytes, as an INC packet carries only its count's blocks (engine/ring.c used_words)."""
    nonzero = np.flatnonzero(words)
    return int(nonzero[-1]) + 1 if nonzero.size else 0


@dataclass(frozen=True)
class RingConfig:
    job_id: int
    rank: int
    num_workers: int
    window: int = 16             # unacknowledged chunks to the next rank, at most
    timeout: float = 0.02        # seconds before a chunk is sent again, until round trips are measured
    max_rto: float = 2.0         # the measured timeout's ceiling, seconds
    max_retries: int = 200       # also: a step with nothing new for timeout * (max_retries + 1) fails
    ack_every: int | None = None     # in-order chunks per ack (default: half the window)
    ack_delay: float | None = None   # longest an in-order chunk waits for its ack (default: timeout / 4)
    elements_per_packet: int = INC_K     # K: a chunk's elements, as INC's packets of the same job
    engine: str = "c"                    # as JobConfig.engine: the compiled engine on a UDP socket, or Python
    spin: float = DEFAULT_SPIN           # as JobConfig.spin: seconds a small call reads before it sleeps
    spin_large: float = DEFAULT_SPIN_LARGE   # ... and a larger call

    def __post_init__(self) -> None:
        check_elements_per_packet(self.elements_per_packet)
        if self.engine not in engine.ENGINES:
            raise ValueError(f"engine must be one of {', '.join(engine.ENGINES)}, not {self.engine!r}")
        if not 1 <= self.num_workers <= MAX_WORKERS:
            raise ValueError(f"num_workers must be 1..{MAX_WORKERS}, not {self.num_workers}")
        if not 0 <= self.rank < self.num_workers:
            raise ValueError(f"rank must be 0..{self.num_workers - 1}, not {self.rank}")
        if not 1 <= self.window <= self.sack_seqs or self.timeout <= 0 or self.max_retries < 0:
            raise ValueError(f"window must be 1..{self.sack_seqs}, timeout positive, max_retries not negative")
        if self.max_rto < 2 * self.ack_delay_s:
            raise ValueError(f"max_rto must be at least twice the ack delay ({2 * self.ack_delay_s:g} s)")
        if not all(0 <= s < self.timeout * (self.max_retries + 1) for s in (self.spin, self.spin_large)):
            raise ValueError(f"spin and spin_large must be 0 or more seconds, shorter than a stall, "
                             f"not {self.spin} and {self.spin_large}")
        if self.ack_every is not None and self.ack_every < 1:
            raise ValueError(f"ack_every must be at least 1, not {self.ack_every}")
        if self.ack_delay is not None and not 0 <= self.ack_delay < self.timeout:
            raise ValueError("ack_delay must be at least 0 and below the timeout, or the sender resends "
                             "what arrived")

    @property
    def sack_seqs(self) -> int:
        """An ack's K elements are a bitmap of this many seqs after its cumulative one."""
        return 32 * self.elements_per_packet

    @property
    def chunks_per_ack(self) -> int:
        return self.ack_every if self.ack_every is not None else max(1, self.window // 2)

    @property
    def ack_delay_s(self) -> float:
        return self.ack_delay if self.ack_delay is not None else self.timeout / 4

    def new_rto(self) -> RtoEstimator:
        """Round trips include a delayed ack's wait: a timeout below twice that would resend what arrived."""
        return RtoEstimator(initial=self.timeout, min_rto=2 * self.ack_delay_s, max_rto=self.max_rto)


@dataclass
class _Unacked:
    payload: bytes
    sent: float              # when last sent
    deadline: float
    tries: int = 1


@dataclass
class RingStats:
    """What the ring sent, for tests and benchmarks: data chunks (with their retransmissions) and acks."""
    chunks: int = 0
    retransmissions: int = 0
    acks: int = 0

    def since(self, before: RingStats) -> RingStats:
        return RingStats(self.chunks - before.chunks, self.retransmissions - before.retransmissions,
                         self.acks - before.acks)


@dataclass
class RingWorker:
    """One rank of a ring. Like `Worker`, every rank must make the same calls in the same order.

    Each directed link (rank r to r+1) numbers its chunks 0, 1, 2, ... without gaps, so the
    receiver can acknowledge all chunks below a seq at once. A service thread acknowledges
    and collects the previous rank's chunks and retransmits this rank's, also between calls:
    a rank whose call has returned may still owe its successor a lost chunk. Call `close`.
    """
    config: RingConfig
    transport: PeerTransport
    stats: RingStats = field(default_factory=RingStats)      # since the start
    last_stats: RingStats | None = None                      # during the last call (acks may follow it)
    rto: RtoEstimator = field(init=False)                    # both measured over the link to the next rank,
    cwnd: CongestionWindow = field(init=False)               # carried from call to call
    _send_next: int = field(default=0, repr=False)    # seq of this rank's next chunk to the next rank
    _recv_next: int = field(default=0, repr=False)    # seq of the next chunk a call expects from the previous
    _unacked: dict[int, _Unacked] = field(default_factory=dict, repr=False)    # by seq, to the next rank
    _received: dict[int, np.ndarray] = field(default_factory=dict, repr=False)  # by seq, not yet consumed
    _cumulative: int = field(default=0, repr=False)   # every chunk below this seq has arrived
    # Seqs received above the cumulative one, what an ack's bitmap lists: kept apart from
    # `_received`, so an ack costs the chunks out of order (none when in order), not the step's.
    _out_of_order: set[int] = field(default_factory=set, repr=False)
    _ack_pending: int = field(default=0, repr=False)  # in-order chunks since the last ack
    _ack_due: float = field(default=float("inf"), repr=False)
    # Two conditions on one lock, so that a call waiting for window space is not woken by
    # every chunk that arrives, nor one waiting for chunks by every ack (a wake-up is a context
    # switch on shared cores): `_cv` when acks free the window, `_arrived` when the chunks the
    # call waits for (those below `_recv_wanted`) are all in.
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _cv: threading.Condition = field(init=False, repr=False)
    _arrived: threading.Condition = field(init=False, repr=False)
    _recv_wanted: int = field(default=0, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    # The compiled engine, if this rank uses it: then its own thread serves the socket, it keeps
    # the timers, window and counts, and `stats`, `rto` and `cwnd` are copies refreshed after each call.
    _engine: "_RingEngine | None" = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._cv, self._arrived = threading.Condition(self._lock), threading.Condition(self._lock)
        self.rto = self.config.new_rto()
        self.cwnd = CongestionWindow(self.config.window)
        # The engine takes every peer's address at the start (the Python path reads them per send).
        if (self.config.engine == "c" and type(self.transport) is UdpPeerTransport
                and len(self.transport.peers) == self.config.num_workers and engine.unavailable() is None):
            self._engine = _RingEngine(self)
            return
        self._thread = threading.Thread(target=self._serve, name=f"ring-{self.config.rank}", daemon=True)
        self._thread.start()

    @property
    def engine(self) -> str:
        """Which engine this rank's calls run on: "c" or "python"."""
        return "python" if self._engine is None else "c"

    def allreduce(self, array: np.ndarray) -> np.ndarray:
        """The element-wise sum over all ranks; int32 wraps around as numpy's sum does."""
        return self._counted(self._allreduce, _summable(array))

    def reduce_scatter(self, array: np.ndarray) -> np.ndarray:
        """This rank's 1/N of the sum (rows rank*L/N .. (rank+1)*L/N - 1 of `array`, its first
        dimension a multiple of N): the ring AllReduce's first half, N - 1 steps."""
        return self._counted(self._reduce_scatter, _summable(array))

    def all_gather(self, array: np.ndarray) -> np.ndarray:
        """Every rank's `array` (any dtype, same shape on all) stacked in rank order, bit for
        bit: the ring AllReduce's second half, N - 1 steps."""
        return self._counted(self._all_gather, np.ascontiguousarray(array))

    def broadcast(self, array: np.ndarray, root: int) -> np.ndarray:
        """Rank `root`'s `array` on every rank, bit for bit: a pipeline along the ring from the
        root, each rank passing a chunk on as soon as it has it (N - 1 hops deep)."""
        self._check_root(root)
        return self._counted(lambda a: self._broadcast(a, root), np.ascontiguousarray(array))

    def reduce(self, array: np.ndarray, root: int) -> np.ndarray | None:
        """The sum at rank `root` alone (None at the others): a pipeline along the ring that
        ends at the root, each rank adding its chunk to the one it received and passing it on."""
        self._check_root(root)
        result = self._counted(lambda a: self._reduce(a, root), _summable(array))
        return result if self.config.rank == root else None

    def barrier(self) -> None:
        """Returns once every rank has called it: a ring AllReduce of one element (its one
        chunk passes every rank twice, 2(N - 1) hops)."""
        self._counted(self._allreduce, np.zeros(1, np.int32))

    def _check_root(self, root: int) -> None:
        if not 0 <= root < self.config.num_workers:
            raise ValueError(f"root must be a rank 0..{self.config.num_workers - 1}, not {root}")

    def _counted(self, call: Callable[[np.ndarray], np.ndarray], array: np.ndarray) -> np.ndarray:
        """`call(array)`, with what it sent in `last_stats`."""
        before = self._sent(refresh=False)
        try:
            return call(array)
        finally:
            self.last_stats = self._sent(refresh=True).since(before)

    def _sent(self, refresh: bool) -> RingStats:
        """What this rank has sent so far; `refresh`: with the engine, `stats`, `rto` and `cwnd`
        copied from it too."""
        if self._engine is not None:
            return self._engine.refresh() if refresh else self._engine.counts()
        with self._cv:
            return dataclasses.replace(self.stats)

    def _allreduce(self, array: np.ndarray) -> np.ndarray:
        n, k = self.config.num_workers, self.config.elements_per_packet
        m = -(-array.size // k)
        if n == 1 or m == 0:
            return array.copy()
        chunks = np.zeros((m, k), array.dtype)
        chunks.ravel()[:array.size] = array.ravel()
        bounds = _segments(m, n)
        # Reduce-scatter leaves rank r with segment r+1 summed; all-gather passes the sums on.
        # With fewer chunks than ranks some segments are empty and their steps send nothing.
        if self._engine is not None:
            self._engine.allreduce(chunks, bounds)       # both halves in one call into C
        else:
            self._steps(chunks, bounds, first=0, add=True)
            self._steps(chunks, bounds, first=1, add=False)
        return chunks.ravel()[:array.size].reshape(array.shape)

    def _reduce_scatter(self, array: np.ndarray) -> np.ndarray:
        n, rank, k = self.config.num_workers, self.config.rank, self.config.elements_per_packet
        if array.ndim == 0 or array.shape[0] % n:
            raise ValueError(f"reduce_scatter needs a first dimension divisible by {n}, not shape {array.shape}")
        out_shape = (array.shape[0] // n, *array.shape[1:])
        part = array.size // n
        per_block = -(-part // k)            # each rank's part in whole chunks, as the switch pads it
        chunks = np.zeros((n, per_block * k), array.dtype)
        chunks[:, :part] = array.reshape(n, part)
        if n > 1 and part:
            # Starting one segment back, the N - 1 reduce steps leave rank r with segment r.
            self._steps(chunks.reshape(-1, k), tuple(range(0, per_block * (n + 1), per_block)), first=-1, add=True)
        return chunks[rank, :part].reshape(out_shape)

    def _all_gather(self, array: np.ndarray) -> np.ndarray:
        n, rank, k = self.config.num_workers, self.config.rank, self.config.elements_per_packet
        words = numerics.as_words(array)
        per_block = -(-words.size // k)
        placed = np.zeros((n, per_block * k), np.int32)
        placed[rank, :words.size] = words
        if n > 1 and words.size:
            self._steps(placed.reshape(-1, k), tuple(range(0, per_block * (n + 1), per_block)), first=0, add=False)
        return np.stack([numerics.from_words(row[:words.size], array) for row in placed])

    def _broadcast(self, array: np.ndarray, root: int) -> np.ndarray:
        n = self.config.num_workers
        position = (self.config.rank - root) % n       # hops from the root
        k = self.config.elements_per_packet
        words = numerics.as_words(array)
        chunks = np.zeros((-(-words.size // k), k), np.int32)
        chunks.ravel()[:words.size] = words
        if self._engine is not None and n > 1:
            self._engine.pipeline(chunks, root, reduce=False)
            return numerics.from_words(chunks.ravel()[:words.size], array)
        for i in range(len(chunks) if n > 1 else 0):
            if position > 0:
                chunks[i] = self._wait_for(1)[0]
            if position < n - 1:
                self._send_all(chunks[i:i + 1])
        return numerics.from_words(chunks.ravel()[:words.size], array)

    def _reduce(self, array: np.ndarray, root: int) -> np.ndarray:
        n = self.config.num_workers
        position = (self.config.rank - root - 1) % n   # the root's successor starts, the root ends
        k = self.config.elements_per_packet
        chunks = np.zeros((-(-array.size // k), k), array.dtype)
        chunks.ravel()[:array.size] = array.ravel()
        if self._engine is not None and n > 1:
            self._engine.pipeline(chunks, root, reduce=True)
            return chunks.ravel()[:array.size].reshape(array.shape)
        for i in range(len(chunks) if n > 1 else 0):
            if position > 0:
                chunks[i] += self._wait_for(1)[0].view(array.dtype)
            if position < n - 1:
                self._send_all(chunks[i:i + 1])
        return chunks.ravel()[:array.size].reshape(array.shape)

    def _steps(self, chunks: np.ndarray, bounds: tuple[int, ...], first: int, add: bool) -> None:
        """N - 1 ring steps over `chunks` cut into N segments at `bounds`: at step s rank r sends
        segment r + first - s and receives the one before it, adding it to its own or taking it."""
        if self._engine is not None:
            self._engine.steps(chunks, bounds, first, add)
            return
        n, rank = self.config.num_workers, self.config.rank
        for step in range(n - 1):
            send_seg = (rank + first - step) % n
            recv_seg = (send_seg - 1) % n
            self._send_all(chunks[bounds[send_seg]:bounds[send_seg + 1]])
            received = self._wait_for(bounds[recv_seg + 1] - bounds[recv_seg]).view(chunks.dtype)
            if add:
                chunks[bounds[recv_seg]:bounds[recv_seg + 1]] += received
            else:
                chunks[bounds[recv_seg]:bounds[recv_seg + 1]] = received

    def close(self, linger: float | None = None) -> None:
        """Wait up to `linger` seconds (default 10 timeouts) for outstanding acks, then stop."""
        linger = 10 * self.config.timeout if linger is None else linger
        if self._engine is not None:
            self._engine.close(linger)
            self.transport.close()
            return
        # The previous rank may be lingering for the last chunks' delayed ack: it goes now, and
        # again for any chunk taken while this rank lingers for its own acks.
        self._ack_if_pending()
        with self._cv:
            self._cv.wait_for(lambda: not self._unacked, timeout=linger)
        self._ack_if_pending()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.transport.close()

    def _send_all(self, outgoing: np.ndarray) -> None:
        cfg = self.config
        nxt = (cfg.rank + 1) % cfg.num_workers
        for row in outgoing:
            with self._cv:
                self._wait(self._cv, lambda: len(self._unacked) < self.cwnd.allowed, "acks from", nxt)
                seq = self._send_next
                self._send_next += 1
                # The chunk that fills the window asks for its ack now (engine/ring.c, send_rows).
                ack_now = len(self._unacked) + 1 >= self.cwnd.allowed
                used = used_words(row.view(np.int32))
                payload = pack(IncHeader(opcode=OP_RING, job_id=cfg.job_id, worker_id=cfg.rank,
                                         count=used, slot=0, pool_version=0, seq=seq,
                                         flags=FLAG_ACK_NOW if ack_now else 0),
                               row.view(np.int32)[:used], cfg.elements_per_packet)
                now = time.monotonic()
                self._unacked[seq] = _Unacked(payload, now, now + self.rto.rto)
                self.stats.chunks += 1
            self.transport.send_to(nxt, payload)

    def _wait_for(self, count: int) -> np.ndarray:
        """The previous rank's next `count` chunks, in order."""
        with self._cv:
            wanted = range(self._recv_next, self._recv_next + count)
            self._recv_wanted = wanted.stop
            self._wait(self._arrived, lambda: self._cumulative >= wanted.stop, "chunks from",
                       (self.config.rank - 1) % self.config.num_workers)
            rows = [self._received.pop(s) for s in wanted]
            self._recv_next = wanted.stop
        return np.stack(rows) if rows else np.zeros((0, self.config.elements_per_packet), np.int32)

    def _wait(self, cv: threading.Condition, ready: Callable[[], bool], what: str, peer: int) -> None:
        """Wait on `cv` (its lock held) until `ready()`, failing after a stall with no progress."""
        limit = self.config.timeout * (self.config.max_retries + 1)
        while not ready():
            progress = (self._cumulative, len(self._received), len(self._unacked))
            if not cv.wait(timeout=limit) and progress == (self._cumulative, len(self._received),
                                                                len(self._unacked)):
                raise IncTimeoutError(f"ring rank {self.config.rank}: no {what} rank {peer} for {limit:.1f} s; "
                                      f"are all {self.config.num_workers} ranks up?")

    def _serve(self) -> None:
        cfg = self.config
        prev, nxt = (cfg.rank - 1) % cfg.num_workers, (cfg.rank + 1) % cfg.num_workers
        while not self._stop.is_set():
            with self._cv:
                wake = min([self._ack_due, *(u.deadline for u in self._unacked.values())],
                           default=self._ack_due)
            data = self.transport.recv(min(max(wake - time.monotonic(), 0.0), cfg.timeout / 2))
            if data is not None:
                self._handle(data, prev, nxt)
            now = time.monotonic()
            if now >= self._ack_due:
                self._ack(prev)
            with self._cv:
                expired = [(seq, u) for seq, u in self._unacked.items() if u.deadline <= now]
                if expired:
                    # One expiry backs the timer off and cuts the window, however many chunks it covers.
                    self.rto.backoff(max(u.deadline - u.sent for _, u in expired))
                    self.cwnd.on_timeout(self._send_next - 1)
                for seq, u in expired:
                    if u.tries > cfg.max_retries:
                        # The receiver has it (and finished), or its own wait reports the loss.
                        log.debug("ring rank %d: giving up on the ack of seq %d", cfg.rank, seq)
                        del self._unacked[seq]
                        self._cv.notify_all()
                        continue
                    self._resend(u, nxt, now)

    def _resend(self, u: _Unacked, nxt: int, now: float) -> None:
        """Send an unacknowledged chunk again (the condition is held)."""
        u.tries += 1
        u.sent, u.deadline = now, now + self.rto.rto
        self.stats.retransmissions += 1
        self.transport.send_to(nxt, u.payload)

    def _handle(self, data: bytes, prev: int, nxt: int) -> None:
        """Acks release chunks; data is kept, and acknowledged now if it was out of order or
        a duplicate (the sender may be missing an ack) or asks for it (it filled the sender's
        window), else with the next delayed ack."""
        try:
            header, elements = unpack(data, self.config.elements_per_packet)
        except IncFormatError as e:
            log.debug("ignoring a packet: %s", e)
            return
        if header.job_id != self.config.job_id:
            return
        if header.opcode == OP_RING_ACK:
            self._acked(header.seq, elements, nxt)
            return
        if header.opcode != OP_RING or header.worker_id != prev:
            return
        seq = header.seq
        with self._cv:
            in_order = seq == self._cumulative
            fresh = in_order or (seq > self._cumulative and seq not in self._out_of_order)
            if fresh:
                row = np.zeros(self.config.elements_per_packet, np.int32)
                row[:len(elements)] = elements
                self._received[seq] = row
                self._out_of_order.add(seq)
                before = self._cumulative
                while self._cumulative in self._out_of_order:
                    self._out_of_order.remove(self._cumulative)
                    self._cumulative += 1
                if before < self._recv_wanted <= self._cumulative:
                    self._arrived.notify_all()
            if in_order:
                self._ack_pending += 1
                self._ack_due = min(self._ack_due, time.monotonic() + self.config.ack_delay_s)
            now = not in_order or self._ack_pending >= self.config.chunks_per_ack or bool(header.flags & FLAG_ACK_NOW)
        if now:
            self._ack(prev)

    def _ack_if_pending(self) -> None:
        with self._cv:
            pending = self._ack_pending > 0
        if pending:
            self._ack((self.config.rank - 1) % self.config.num_workers)

    def _ack(self, prev: int) -> None:
        """One ack for everything received: the cumulative seq and a bitmap of the chunks after it."""
        with self._cv:
            cumulative = self._cumulative
            sack_seqs = self.config.sack_seqs
            bits = np.zeros(sack_seqs, np.uint8)
            above = [s - cumulative - 1 for s in self._out_of_order if s - cumulative <= sack_seqs]
            bits[above] = 1
            self._ack_pending, self._ack_due = 0, float("inf")
            self.stats.acks += 1
        words = np.packbits(bits, bitorder="little").view("<u4").astype(np.uint32).view(np.int32)
        used = used_words(words)
        ack = IncHeader(opcode=OP_RING_ACK, job_id=self.config.job_id, worker_id=self.config.rank, count=used,
                        slot=0, pool_version=0, seq=cumulative)
        self.transport.send_to(prev, pack(ack, words[:used], self.config.elements_per_packet))

    def _acked(self, cumulative: int, words: np.ndarray, nxt: int) -> None:
        """Release what an ack covers, timing the round trip of the newest chunk sent once
        (Karn's rule); a hole with DUP_THRESHOLD chunks acked above it is resent now."""
        bits = np.unpackbits(words.astype("<u4").view(np.uint8), bitorder="little")
        sacked = {cumulative + 1 + int(i) for i in np.flatnonzero(bits)}
        now = time.monotonic()
        with self._cv:
            released = sorted(s for s in self._unacked if s < cumulative or s in sacked)
            sent_once = [self._unacked[s].sent for s in released if self._unacked[s].tries == 1]
            if sent_once:
                self.rto.sample(now - sent_once[-1])
            for s in released:
                del self._unacked[s]
                self.cwnd.on_ack(s)
            if released:
                self._cv.notify_all()
            if len(sacked) < DUP_THRESHOLD:
                return
            # Below the DUP_THRESHOLD-th highest seq acked, a chunk has that many acked above it.
            hole_below = sorted(sacked)[-DUP_THRESHOLD]
            for seq, u in self._unacked.items():
                if u.tries == 1 and seq < hole_below:
                    self.cwnd.on_loss(self._send_next - 1)
                    self._resend(u, nxt, now)


# hosts/engine/engine.h RING_OP_*
_STEPS, _BROADCAST, _REDUCE, _ALLREDUCE = 0, 1, 2, 3


@functools.lru_cache(maxsize=256)
def _segments(m: int, n: int) -> tuple[int, ...]:
    """An AllReduce's m chunks cut into n segments: segment s is chunks bounds[s]:bounds[s+1]
    (numpy's rounding, the same on every rank; kept, since a small call should not pay for it)."""
    return tuple(int(b) for b in np.linspace(0, m, n + 1).round())


class _RingEngine:
    """A RingWorker's calls in the compiled engine (hosts/engine/ring.c), which serves the
    rank's socket with its own thread from construction to `close`."""

    def __init__(self, worker: RingWorker) -> None:
        built = engine.library()
        self.ffi, self.lib = ffi, lib = built.ffi, built.lib
        self.worker = worker
        cfg, transport = worker.config, worker.transport
        assert isinstance(transport, UdpPeerTransport)
        peers = [engine.address(ip, port) for ip, port in transport.peers]
        self._peer_addrs = ffi.new("uint32_t[]", [a for a, _ in peers] or [0])
        self._peer_ports = ffi.new("uint16_t[]", [p for _, p in peers] or [0])
        config = ffi.new("ring_config *", {
            "fd": transport.sock.fileno(), "job_id": cfg.job_id, "rank": cfg.rank, "num_workers": cfg.num_workers,
            "window": cfg.window, "k": cfg.elements_per_packet, "timeout": cfg.timeout, "ack_delay": cfg.ack_delay_s,
            "max_retries": cfg.max_retries, "chunks_per_ack": cfg.chunks_per_ack, "max_rto": cfg.max_rto,
            "spin": cfg.spin, "spin_large": cfg.spin_large,
            "peer_count": len(peers), "peer_addrs": self._peer_addrs, "peer_ports": self._peer_ports})
        error = ffi.new("char[]", 200)
        r = lib.ring_new(config, error, len(error))
        if r == ffi.NULL:
            raise OSError(f"ring rank {cfg.rank}: {ffi.string(error).decode()}")
        self.r = ffi.gc(r, lib.ring_free)
        self.call = ffi.new("ring_call *")
        self.read = (ffi.new("ring_stats *"), ffi.new("eng_rto *"), ffi.new("eng_cwnd *"), ffi.new("eng_counters *"))
        self._bounds: dict[tuple[int, ...], object] = {}     # C copies of the segment bounds calls used

    def _c_bounds(self, bounds: tuple[int, ...]) -> object:
        if bounds not in self._bounds:
            if len(self._bounds) >= 256:
                self._bounds.clear()
            self._bounds[bounds] = self.ffi.new("int64_t[]", bounds)
        return self._bounds[bounds]

    def steps(self, chunks: np.ndarray, bounds: tuple[int, ...], first: int, add: bool) -> None:
        """RingWorker._steps: N - 1 steps over `chunks` (rows of K 4-byte words, changed in place)."""
        self._run(_STEPS, chunks, bounds=self._c_bounds(bounds), first=first, add=int(add))

    def allreduce(self, chunks: np.ndarray, bounds: tuple[int, ...]) -> None:
        """RingWorker._allreduce's two halves of N - 1 steps each, in place, in one call."""
        self._run(_ALLREDUCE, chunks, bounds=self._c_bounds(bounds))

    def pipeline(self, chunks: np.ndarray, root: int, reduce: bool) -> None:
        """RingWorker._broadcast's or _reduce's pipeline over `chunks`, in place."""
        self._run(_REDUCE if reduce else _BROADCAST, chunks, root=root)

    def _run(self, op: int, chunks: np.ndarray, **fields: object) -> None:
        ffi, c, cfg = self.ffi, self.call, self.worker.config
        assert chunks.flags.c_contiguous and chunks.dtype.itemsize == 4
        rows = ffi.from_buffer(chunks.view(np.uint8))
        c.op, c.dtype, c.rows, c.chunk_count = op, engine.DTYPES.get(chunks.dtype, 0), rows, chunks.shape[0]
        c.bounds, c.first, c.add, c.root = ffi.NULL, 0, 0, 0
        for name, value in fields.items():
            setattr(c, name, value)
        status = self.lib.ring_run(self.r, c)
        if status == self.lib.ENG_TIMEOUT:
            what = "acks from" if c.timeout_waiting_for_acks else "chunks from"
            raise IncTimeoutError(f"ring rank {cfg.rank}: no {what} rank {c.timeout_peer} for "
                                  f"{c.timeout_waited:.1f} s; are all {cfg.num_workers} ranks up?")
        if status == self.lib.ENG_CLOSED:
            raise IncTimeoutError(f"ring rank {cfg.rank}: the ring is closed")
        if status != self.lib.ENG_OK:
            raise MemoryError("no memory for the compiled engine's ring")

    def counts(self) -> RingStats:
        """What the engine has sent so far (its state read into `self.read`, nothing copied to
        the worker)."""
        stats, rto, cwnd, counters = self.read
        self.lib.ring_read(self.r, stats, rto, cwnd, counters)
        return RingStats(stats.chunks, stats.retransmissions, stats.acks)

    def refresh(self) -> RingStats:
        """The worker's stats, RTO, window and socket counters, as the engine has them now; the
        stats, copied."""
        counted = self.counts()
        stats, rto, cwnd, counters = self.read
        w = self.worker
        w.stats.chunks, w.stats.retransmissions, w.stats.acks = stats.chunks, stats.retransmissions, stats.acks
        w.rto.srtt = rto.srtt if rto.has_srtt else None
        w.rto.rttvar, w.rto.rto, w.rto.samples = rto.rttvar, rto.rto, rto.samples
        w.cwnd.cwnd, w.cwnd.ssthresh, w.cwnd.losses = cwnd.cwnd, cwnd.ssthresh, cwnd.losses
        w.cwnd._recover = cwnd.recover if cwnd.has_recover else None
        sent = w.transport.counters
        sent.waits, sent.dropped = counters.waits, counters.dropped
        if counters.dropped:
            sent.last_error = f"{os.strerror(counters.last_errno)} (errno {counters.last_errno})"
        return counted

    def close(self, linger: float) -> None:
        """Wait up to `linger` seconds for outstanding acks, then stop the engine's thread."""
        self.lib.ring_close(self.r, linger)
        self.refresh()


def _summable(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    if array.dtype not in (np.int32, np.float32):
        raise TypeError(f"the ring sums int32 or float32 arrays, not {array.dtype}")
    return array
