"""The baseline the switch is measured against: a host ring AllReduce (reduce-scatter, then
all-gather, 2(N-1) steps) over UDP between hosts, with the INC packet format, the same
K-element chunks, a window of unacknowledged chunks and retransmission; the switch only forwards.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hosts.agent import IncTimeoutError
from hosts.inc import INC_K, MAX_WORKERS, OP_RING, OP_RING_ACK, IncFormatError, IncHeader, pack, unpack
from hosts.transport import PeerTransport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RingConfig:
    job_id: int
    rank: int
    num_workers: int
    window: int = 16             # unacknowledged chunks to the next rank
    timeout: float = 0.02        # seconds before a chunk is sent again
    max_retries: int = 200       # also: a step with nothing new for timeout * (max_retries + 1) fails

    def __post_init__(self) -> None:
        if not 1 <= self.num_workers <= MAX_WORKERS:
            raise ValueError(f"num_workers must be 1..{MAX_WORKERS}, not {self.num_workers}")
        if not 0 <= self.rank < self.num_workers:
            raise ValueError(f"rank must be 0..{self.num_workers - 1}, not {self.rank}")
        if self.window < 1 or self.timeout <= 0 or self.max_retries < 0:
            raise ValueError("window must be at least 1, timeout positive, max_retries not negative")


@dataclass
class _Unacked:
    payload: bytes
    deadline: float
    tries: int = 1


@dataclass
class RingWorker:
    """One rank of a ring. Like `Worker`, every rank must make the same calls in the same order.

    A service thread acknowledges and collects the previous rank's chunks and retransmits
    this rank's, also between calls: a rank whose call has returned may still owe its
    successor a lost chunk. Call `close` when done.
    """
    config: RingConfig
    transport: PeerTransport
    next_seq: int = 0
    _unacked: dict[int, _Unacked] = field(default_factory=dict, repr=False)    # by seq, to the next rank
    _received: dict[int, np.ndarray] = field(default_factory=dict, repr=False)  # by seq, from the previous rank
    _horizon: int = field(default=0, repr=False)      # chunks below this seq were consumed
    _cv: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._horizon = self.next_seq
        self._thread = threading.Thread(target=self._serve, name=f"ring-{self.config.rank}", daemon=True)
        self._thread.start()

    def allreduce(self, array: np.ndarray) -> np.ndarray:
        """The element-wise sum over all ranks; int32 wraps around as numpy's sum does."""
        array = np.asarray(array)
        if array.dtype not in (np.int32, np.float32):
            raise TypeError(f"allreduce takes int32 or float32 arrays, not {array.dtype}")
        n, rank = self.config.num_workers, self.config.rank
        m = -(-array.size // INC_K)
        if n == 1 or m == 0:
            return array.copy()
        chunks = np.zeros((m, INC_K), array.dtype)
        chunks.ravel()[:array.size] = array.ravel()
        bounds = np.linspace(0, m, n + 1).round().astype(int)   # segment s is chunks bounds[s]:bounds[s+1]
        seg_len = int(np.max(np.diff(bounds)))
        base = self.next_seq
        self.next_seq += 2 * (n - 1) * seg_len
        for step in range(2 * (n - 1)):
            # Reduce-scatter leaves rank r with segment r+1 summed; all-gather passes the sums on.
            send_seg = (rank - step) % n if step < n - 1 else (rank + 1 - (step - n + 1)) % n
            recv_seg = (send_seg - 1) % n
            first = base + step * seg_len
            self._send_all(first, chunks[bounds[send_seg]:bounds[send_seg + 1]])
            received = self._wait_for(first, bounds[recv_seg + 1] - bounds[recv_seg], first + seg_len)
            if step < n - 1:
                chunks[bounds[recv_seg]:bounds[recv_seg + 1]] += received.view(array.dtype)
            else:
                chunks[bounds[recv_seg]:bounds[recv_seg + 1]] = received.view(array.dtype)
        return chunks.ravel()[:array.size].reshape(array.shape)

    def close(self, linger: float | None = None) -> None:
        """Wait up to `linger` seconds (default 10 timeouts) for outstanding acks, then stop."""
        linger = 10 * self.config.timeout if linger is None else linger
        with self._cv:
            self._cv.wait_for(lambda: not self._unacked, timeout=linger)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.transport.close()

    def _send_all(self, first_seq: int, outgoing: np.ndarray) -> None:
        cfg = self.config
        nxt = (cfg.rank + 1) % cfg.num_workers
        for i, row in enumerate(outgoing):
            seq = first_seq + i
            payload = pack(IncHeader(opcode=OP_RING, job_id=cfg.job_id, worker_id=cfg.rank, count=INC_K,
                                     slot=0, pool_version=0, seq=seq), row.view(np.int32))
            with self._cv:
                self._wait(lambda: len(self._unacked) < cfg.window, "acks from", nxt)
                self._unacked[seq] = _Unacked(payload, time.monotonic() + cfg.timeout)
            self.transport.send_to(nxt, payload)

    def _wait_for(self, first_seq: int, count: int, horizon: int) -> np.ndarray:
        """The previous rank's chunks first_seq .. first_seq + count - 1; later ones are dropped below `horizon`."""
        wanted = range(first_seq, first_seq + count)
        with self._cv:
            self._wait(lambda: all(s in self._received for s in wanted), "chunks from",
                       (self.config.rank - 1) % self.config.num_workers)
            rows = [self._received.pop(s) for s in wanted]
            self._horizon = horizon
        return np.stack(rows) if rows else np.zeros((0, INC_K), np.int32)

    def _wait(self, ready: Callable[[], bool], what: str, peer: int) -> None:
        """Wait on the condition (held) until `ready()`, failing after a stall with no progress."""
        limit = self.config.timeout * (self.config.max_retries + 1)
        while not ready():
            progress = len(self._received) + len(self._unacked)
            if not self._cv.wait(timeout=limit) and progress == len(self._received) + len(self._unacked):
                raise IncTimeoutError(f"ring rank {self.config.rank}: no {what} rank {peer} for {limit:.1f} s; "
                                      f"are all {self.config.num_workers} ranks up?")

    def _serve(self) -> None:
        cfg = self.config
        prev, nxt = (cfg.rank - 1) % cfg.num_workers, (cfg.rank + 1) % cfg.num_workers
        while not self._stop.is_set():
            data = self.transport.recv(cfg.timeout / 2)
            if data is not None:
                self._handle(data, prev)
            now = time.monotonic()
            with self._cv:
                for seq, u in list(self._unacked.items()):
                    if u.deadline > now:
                        continue
                    if u.tries > cfg.max_retries:
                        # The receiver has it (and finished), or its own wait reports the loss.
                        log.debug("ring rank %d: giving up on the ack of seq %d", cfg.rank, seq)
                        del self._unacked[seq]
                        self._cv.notify_all()
                        continue
                    u.tries += 1
                    u.deadline = now + cfg.timeout
                    self.transport.send_to(nxt, u.payload)

    def _handle(self, data: bytes, prev: int) -> None:
        """Acks release chunks; data is acknowledged (again, if a retransmission) and kept unless consumed."""
        try:
            header, elements = unpack(data)
        except IncFormatError as e:
            log.debug("ignoring a packet: %s", e)
            return
        if header.job_id != self.config.job_id:
            return
        with self._cv:
            if header.opcode == OP_RING_ACK:
                if self._unacked.pop(header.seq, None) is not None:
                    self._cv.notify_all()
                return
            if header.opcode != OP_RING or header.worker_id != prev:
                return
            if header.seq >= self._horizon and header.seq not in self._received:
                self._received[header.seq] = elements
                self._cv.notify_all()
        ack = IncHeader(opcode=OP_RING_ACK, job_id=self.config.job_id, worker_id=self.config.rank, count=0,
                        slot=0, pool_version=0, seq=header.seq)
        self.transport.send_to(prev, pack(ack, np.zeros(0, np.int32)))
