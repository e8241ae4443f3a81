"""A worker's side of in-network AllReduce: `Worker.allreduce(array)` chunks the array
into K-element packets and keeps a window of slots in flight through a Transport. The
switch's other collectives go the same way, told apart by the header's collective and root:
`reduce`, `reduce_scatter`, `broadcast`, `all_gather` and `barrier` (docs/protocol.md). Its
timers and window adapt to what it measures (hosts/pacing.py); it reports int32 overflow
instead of returning a wrong sum, and each call's counts and times in `Worker.last_stats`.
float16 and bfloat16 go the float32 way (block floating point) and are rounded back once.
This module is the reference; on a kernel UDP socket the calls run in the compiled engine
(hosts/engine), which sends the same packets.
"""
from __future__ import annotations

import bisect
import functools
import logging
import math
import os
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn

import numpy as np

from hosts import engine, numerics, quantize
from hosts.inc import (COLL_ALLREDUCE, COLL_BARRIER, COLL_BROADCAST, COLL_REDUCE, FLAG_EAGER, FLAG_OVERFLOW,
                       FLAG_RETRANSMIT, FLAG_WINDOW_ACKS, INC_K, MAX_WINDOW, MAX_WORKERS, OP_ACK, OP_CONTRIB,
                       OP_JOIN, OP_RESULT, OP_WINDOW_ACK, REDUCE_SUM, WINDOW_ACK_ANSWERED, IncFormatError, IncHeader,
                       check_elements_per_packet, data_elements, elements_view, pack_header, unpack_header, with_flags)
from hosts.engine import DEFAULT_SPIN, DEFAULT_SPIN_LARGE
from hosts.pacing import CongestionWindow, RtoEstimator
from hosts.transport import Transport, UdpTransport

log = logging.getLogger(__name__)

# Results of this many later chunks while a chunk has none: it is taken as lost and sent
# again at once (results come back in seq order when nothing is lost: docs/protocol.md).
REORDER_THRESHOLD = 3


class IncError(RuntimeError):
    """An AllReduce that did not produce a correct result."""


class IncOverflowError(IncError):
    """The sum does not fit: int32 wrapped, float values too large or not finite, or a float
    sum beyond its dtype's range."""

    def __init__(self, message: str, chunks: list[int]) -> None:
        super().__init__(message)
        self.chunks = chunks


class IncTimeoutError(IncError):
    """A chunk had no result within the time budget: the switch, job or a peer is missing.

    The job's slots are then out of step: reset the job (controller) and start new workers.
    """


@dataclass(frozen=True)
class JobConfig:
    """One worker's view of its job, as the controller installed it. All workers of a job
    must use the same window (it maps chunks to slots); the timers are each worker's own."""
    job_id: int
    worker_id: int
    num_workers: int
    window: int = 16             # slots of the job this worker cycles through; at most its num_slots
    timeout: float = 1.0         # seconds: the first retransmission timeout, until a round trip is measured
    min_rto: float = 0.02        # bounds of the measured retransmission timeout, seconds
    max_rto: float = 2.0
    give_up_after: float = 30.0  # seconds a chunk may wait for its result before IncTimeoutError
    spin: float = DEFAULT_SPIN   # seconds a call of at most POLL_CHUNKS chunks reads before it sleeps (compiled engine)
    spin_large: float = DEFAULT_SPIN_LARGE   # ... and a larger call (hosts.engine.spin_for)
    exponent_slack: int = quantize.EXPONENT_SLACK   # floats: redo a chunk whose exponent was this much too big
    exponent_margin: int = 1     # float32: guess one binade above the exponent agreed for a neighbour
    elements_per_packet: int = INC_K   # K: the job's elements per packet, as its switch program was built
    # "c": the compiled engine (hosts/engine) on a kernel UDP socket, where it builds; "python":
    # this module's own path (always, for other transports). Both send the same packets.
    engine: str = "c"
    # Eager Broadcast/AllGather rounds (docs/protocol.md) once the switch says it runs them (the
    # switch's passes per chunk fall from N to about 1). Every worker of a job must set the same.
    eager_rounds: bool = True
    # Reduce and ReduceScatter of at least WINDOW_ACK_MIN_CHUNKS chunks per root acknowledged by
    # their roots, an OP_WINDOW_ACK for many chunks, once the switch says it takes them
    # (docs/protocol.md, "Window ACKs"). Every worker of a job must set the same.
    window_acks: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.num_workers <= MAX_WORKERS:
            raise ValueError(f"num_workers must be 1..{MAX_WORKERS}, not {self.num_workers}")
        if not 0 <= self.worker_id < self.num_workers:
            raise ValueError(f"worker_id must be 0..{self.num_workers - 1}, not {self.worker_id}")
        if not 0 <= self.job_id < 1 << 16:
            raise ValueError(f"job_id must be 0..65535, not {self.job_id}")
        if not 1 <= self.window <= MAX_WINDOW:
            raise ValueError(f"window must be 1..{MAX_WINDOW} slots, not {self.window}")
        if not 0 < self.min_rto <= self.max_rto or self.timeout <= 0:
            raise ValueError(f"need timeout > 0 and 0 < min_rto <= max_rto, not {self.timeout}, "
                             f"{self.min_rto} and {self.max_rto}")
        if not (0 <= self.spin < self.give_up_after and 0 <= self.spin_large < self.give_up_after):
            raise ValueError(f"spin and spin_large must be 0 or more seconds, less than give_up_after, "
                             f"not {self.spin} and {self.spin_large}")
        if not self.give_up_after > 0:
            raise ValueError(f"give_up_after must be positive seconds, not {self.give_up_after}")
        if self.exponent_slack < 0 or self.exponent_margin < 0:
            raise ValueError("exponent_slack and exponent_margin must not be negative")
        check_elements_per_packet(self.elements_per_packet)
        if self.engine not in engine.ENGINES:
            raise ValueError(f"engine must be one of {', '.join(engine.ENGINES)}, not {self.engine!r}")


@dataclass
class CallStats:
    """One `allreduce` call as this worker saw it; `to_dict()` is JSON-ready.

    Times (seconds) split the call: `setup_s` before the first packet, `send_s` packing and
    sending first copies, `retransmit_s` sending copies again, `wait_s` waiting for and
    reading results, `finish_s` turning the sums into the result. `exponent_s` (float32)
    is the part of the call after the first pass's last result, spent redoing chunks
    whose exponent was guessed wrong: the extra round trip, 0 when every guess held.
    """
    dtype: str
    elements: int
    chunks: int
    packets_sent: int = 0
    retransmits: int = 0          # packets sent again, for either reason below
    fast_retransmits: int = 0     # ... because later chunks' results came first
    timeouts: int = 0             # ... because nothing came back for an RTO (counted once per expiry)
    results: int = 0
    duplicate_results: int = 0    # results for chunks already answered (a retransmission's second answer)
    early_results: int = 0        # results kept from before this worker made their item (its root was ahead)
    early_drops: int = 0          # results more than a window ahead of this worker: dropped, asked for later
    redone_chunks: int = 0        # float32 chunks sent again at the agreed exponent
    send_waits: int = 0           # sends the kernel refused for a while (EAGAIN/ENOBUFS), then took
    send_drops: int = 0           # sends the kernel never took (counted as lost packets)
    rtt_samples: int = 0          # round trips measured in this call (answers to packets sent once)
    srtt_s: float | None = None
    first_result_s: float | None = None   # first send to first result: a round trip plus the wait
                                          # for the slowest peer to start this call (minus srtt_s: skew)
    final_rto_s: float = 0.0
    final_window: float = 0.0
    setup_s: float = 0.0
    exponent_s: float = 0.0
    send_s: float = 0.0
    wait_s: float = 0.0
    retransmit_s: float = 0.0
    finish_s: float = 0.0
    total_s: float = 0.0
    window_acks: int = 0          # OP_WINDOW_ACKs sent (a Reduce's root) or taken (the others)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class _Item:
    """One packet of a call in flight: item `index` carries chunk `chunk`."""
    index: int
    chunk: int
    seq: int                  # unwrapped: next_seq of the call + index
    payload: bytes
    first_sent: float
    last_sent: float
    timer_from: float         # its timer runs from here (or from the last progress, if later); inf: not yet
    timer: float              # its retransmission timeout, seconds
    sends: int = 1
    fast: bool = False        # already sent again on later results


@dataclass
class Worker:
    """One worker of a job. Every worker of the job must call `allreduce` with arrays of the
    same length and dtype in the same order: the chunk sequence numbers (and so the slots
    and versions) are derived from that order, never negotiated.

    The measured round trip and the congestion window carry over from call to call.
    """
    config: JobConfig
    transport: Transport
    next_seq: int = 0
    _last_stats: CallStats | None = field(default=None, init=False, repr=False)
    _rto: RtoEstimator = field(init=False, repr=False)
    _cwnd: CongestionWindow = field(init=False, repr=False)
    _bases: list[np.ndarray] = field(default_factory=list, repr=False)   # float calls' agreed exponents (_remember)
    # When the first result ever came: until then every peer may still be starting up.
    _live_since: float = field(default=math.inf, repr=False)
    # A result said that the switch runs eager Broadcast rounds (FLAG_EAGER): calls after the one
    # that saw it use them. Every worker got that call's results before its next call, so all agree.
    _eager: bool = field(default=False, repr=False)
    _after_eager: bool = field(default=False, repr=False)   # the last call was eager: it ended on a gate
    # A Reduce result said that the switch takes window ACKs (FLAG_WINDOW_ACKS): Reduce calls after
    # the one that saw it use them, every worker alike (each got that call's answers).
    _window_acks: bool = field(default=False, repr=False)
    # Results that came before this worker made their item (an eager round's root is ahead of it,
    # maybe still in the call before), by unwrapped seq: at most a window of them (_keep_early).
    _early: dict[int, bytes] = field(default_factory=dict, repr=False)
    # The compiled engine, if this worker uses it: then it keeps the timers, the window, the
    # last float calls' exponents and the first result's time, and `rto`, `cwnd` and
    # `last_stats` are copies of its state, read from it when asked for after a call (the
    # Python path's own methods use `_rto` and `_cwnd`, which nothing else updates there).
    _engine: "_IncEngine | None" = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        cfg = self.config
        self._rto = RtoEstimator(initial=cfg.timeout, min_rto=cfg.min_rto, max_rto=cfg.max_rto)
        # Never fewer in flight than fast retransmit needs to see a loss (a lost chunk and
        # REORDER_THRESHOLD results after it): a window of 1 would turn every random loss into
        # a whole RTO of silence (at a tenth of BMv2's speed, 19 RTOs of ~0.2 s in one 64 KiB call).
        self._cwnd = CongestionWindow(cfg.window, minimum=min(cfg.window, REORDER_THRESHOLD + 1))
        if cfg.engine == "c" and type(self.transport) is UdpTransport and engine.unavailable() is None:
            self._engine = _IncEngine(self)

    def _read_engine(self) -> None:
        """After a compiled call, copy what it left (its stats, the timer, the window) once asked."""
        if self._engine is not None and self._engine.unread:
            self._last_stats = self._engine.read_stats()

    @property
    def last_stats(self) -> CallStats | None:
        """The last call's counts and times (None before the first call)."""
        self._read_engine()
        return self._last_stats

    @property
    def rto(self) -> RtoEstimator:
        """The retransmission timer's estimator, carried from call to call."""
        self._read_engine()
        return self._rto

    @property
    def cwnd(self) -> CongestionWindow:
        """The congestion window, carried from call to call."""
        self._read_engine()
        return self._cwnd

    @property
    def engine(self) -> str:
        """Which engine this worker's calls run on: "c" or "python"."""
        return "python" if self._engine is None else "c"

    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        """The element-wise sum (op "sum"), minimum ("min") or maximum ("max") of `array` over
        all workers, same shape and dtype (numerics.REDUCE_DTYPES: which dtypes each op takes)."""
        return self._reduce(np.asarray(array), op, COLL_ALLREDUCE, None)

    def reduce(self, array: np.ndarray, root: int, op: str = "sum") -> np.ndarray | None:
        """`allreduce`'s result at worker `root` alone (None at the others): the switch sends
        the data to the root and a header-only ACK to the others."""
        self._check_root(root)
        array = np.asarray(array)
        result = self._reduce(array, op, COLL_REDUCE, np.full(-(-array.size // self.config.elements_per_packet), root))
        return result if self.config.worker_id == root else None

    def reduce_scatter(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        """Worker w's 1/N of the reduced `array` (its first dimension a multiple of N): rows
        w*L/N .. (w+1)*L/N - 1. The switch sends each chunk's result to its owner alone, but for
        a small call, which is one AllReduce of `array` (_reduce_scatter_as_allreduce)."""
        array = np.asarray(array)
        n, me, k = self.config.num_workers, self.config.worker_id, self.config.elements_per_packet
        if array.ndim == 0 or array.shape[0] % n:
            raise ValueError(f"reduce_scatter needs a first dimension divisible by {n}, not shape {array.shape}")
        out_shape = (array.shape[0] // n, *array.shape[1:])
        part = array.size // n
        if part == 0:
            numerics.reduce_op(op, array.dtype)      # a bad op or dtype is refused all the same
            return np.zeros(out_shape, array.dtype)
        if _reduce_scatter_as_allreduce(array.size, n, k):
            parts = self.allreduce(array.reshape(-1), op)
        else:
            per_block = -(-part // k)            # chunks per worker's part: a chunk has one owner
            padded = np.zeros((n, per_block * k), array.dtype)
            padded[:, :part] = array.reshape(n, part)
            parts = self._reduce(padded.ravel(), op, COLL_REDUCE, np.repeat(np.arange(n), per_block))
        return parts.reshape(n, -1)[me, :part].reshape(out_shape)

    def broadcast(self, array: np.ndarray, root: int) -> np.ndarray:
        """Worker `root`'s `array` on every worker, bit for bit (any dtype; the others pass an
        array of the same shape and dtype, its values unused). Only the root sends data."""
        self._check_root(root)
        array = np.ascontiguousarray(array)
        words = numerics.as_words(array)
        if words.size == 0:
            return array.copy()
        roots = np.full(-(-words.size // self.config.elements_per_packet), root)
        return numerics.from_words(self._gather(words, roots, COLL_BROADCAST), array)

    def all_gather(self, array: np.ndarray) -> np.ndarray:
        """Every worker's `array` (same shape and dtype on all), stacked in worker order:
        shape (N, *array.shape), bit for bit. Each worker sends only its own array, but for a
        small call, which is one AllReduce of all arrays side by side (_all_gather_as_allreduce)."""
        array = np.ascontiguousarray(array)
        n, me, k = self.config.num_workers, self.config.worker_id, self.config.elements_per_packet
        words = numerics.as_words(array)
        if words.size == 0:
            return np.zeros((n, *array.shape), array.dtype)
        if _all_gather_as_allreduce(words.size, n, k):
            placed = np.zeros((n, words.size), np.int32)     # the others' words are zeros: x + 0 is x
            placed[me] = words
            gathered = self.allreduce(placed)
        else:
            per_block = -(-words.size // k)
            placed = np.zeros((n, per_block * k), np.int32)
            placed[me, :words.size] = words
            gathered = self._gather(placed.ravel(), np.repeat(np.arange(n), per_block), COLL_BROADCAST).reshape(n, -1)
        return np.stack([numerics.from_words(row[:words.size], array) for row in gathered])

    def barrier(self) -> None:
        """Returns once every worker has called it: one header-only JOIN each, one ACK back."""
        self._gather(np.zeros(1, np.int32), np.zeros(1, np.int64), COLL_BARRIER)

    def _check_root(self, root: int) -> None:
        if not 0 <= root < self.config.num_workers:
            raise ValueError(f"root must be a worker 0..{self.config.num_workers - 1}, not {root}")

    def _reduce(self, array: np.ndarray, op: str, collective: int, roots: np.ndarray | None) -> np.ndarray:
        reduce_op = numerics.reduce_op(op, array.dtype)
        if array.size == 0:
            return array.copy()
        if self._engine is not None:
            kind = _ORDERED if reduce_op != REDUCE_SUM else _INT32 if array.dtype == np.int32 else _FLOAT
            return self._engine.run(kind, array, roots, collective, reduce_op).reshape(array.shape)
        if reduce_op != REDUCE_SUM:
            call: _Call = _OrderedCall(self, array, reduce_op)
        else:
            call = (_Int32Call if array.dtype == np.int32 else _Float32Call)(self, array)
        call.collective, call.roots = collective, roots
        call.window_acks = collective == COLL_REDUCE and self._window_acks and _window_acks_pay(call.m, roots)
        return self._run(call)

    def _gather(self, words: np.ndarray, roots: np.ndarray, collective: int) -> np.ndarray:
        """Broadcast, AllGather and Barrier: int32 `words` of which each chunk is sent by its root."""
        if self._engine is not None:
            return self._engine.run(_GATHER, words, roots, collective, REDUCE_SUM)
        return self._run(_GatherCall(self, words, roots, collective))

    def _run(self, call: "_Call") -> np.ndarray:
        try:
            self._exchange(call)
            self._after_eager = call.eager
            return call.finish()
        finally:
            self._finish_stats(call)

    def close(self) -> None:
        """Release the transport. Nothing is owed to anyone: the switch keeps the results."""
        self.transport.close()

    def _exchange(self, call: "_Call") -> None:
        """Send the call's items, at most cwnd at a time and each only when its slot is free,
        and collect every result. Item j gets seq = next_seq + j, slot = seq % window, and
        the slot's version flips on each reuse: version = (seq // window) % 2."""
        cfg, stats, transport = self.config, call.stats, self.transport
        window = cfg.window
        first_seq = self.next_seq
        in_flight: dict[int, _Item] = {}        # by wire seq, in item order
        taken: deque[bytes] = deque()           # kept early results of items just made, read before the socket
        next_item = 0
        last_progress = time.monotonic()
        # No timer is due before `wake`. Timers only move later (progress, resends, backoff) except
        # for new items, so a stale `wake` only wakes the loop early, and then it scans them all.
        wake = math.inf
        stats.setup_s = last_progress - call.started
        try:
            while True:
                # Item j reuses item j - window's slot: it may go once items up to that one are answered.
                while (len(in_flight) < self._cwnd.allowed and next_item < call.answered + window
                       and call.ready(next_item)):
                    t0 = time.monotonic()
                    chunk = call.assign(next_item)
                    if chunk is None:
                        break
                    seq = first_seq + next_item
                    wire_seq = seq & 0xFFFFFFFF
                    payload = call.packet(chunk, seq % window, (seq // window) % 2, wire_seq)
                    silent = call.silent(next_item)
                    if not silent:     # a silent item is sent only if its result is lost
                        transport.send(payload)
                        stats.packets_sent += 1
                    early = self._early.pop(seq, None)
                    if early is not None:
                        if silent:
                            taken.append(early)
                            stats.early_results += 1
                        else:          # its own packet went, so its answer is still to come
                            stats.duplicate_results += 1
                    t1 = time.monotonic()
                    # A silent item's timer waits for a sign that its result is lost (_arm_silent).
                    in_flight[wire_seq] = _Item(next_item, chunk, seq, payload, t1, t1,
                                                math.inf if silent else t1, self._rto.rto)
                    if next_item == 0:
                        call.first_sent = t1
                    wake = min(wake, t1 + self._rto.rto)
                    next_item += 1
                    stats.send_s += t1 - t0
                if call.done:
                    if call.window_acks:
                        self._send_window_acks(call, first_seq, idle=True)
                    return
                if call.eager:
                    wake = min(wake, self._arm_silent(in_flight, call, None))
                # Results already here come first: a worker that was not scheduled for a while
                # must not take its own lateness for the switch's.
                t0 = time.monotonic()
                data = taken.popleft() if taken else self._next_datagram(call, first_seq, max(0.0, wake - t0))
                item = None if data is None else self._accept(data, in_flight, call, first_seq + next_item)
                if item is not None:
                    last_progress = time.monotonic()
                    if call.eager:
                        wake = min(wake, self._arm_silent(in_flight, call, item))
                    self._resend_overtaken(item, in_flight, first_seq + next_item - 1, call)
                    if call.window_acks:
                        self._send_window_acks(call, first_seq)
                t1 = time.monotonic()
                stats.wait_s += t1 - t0
                t0 = t1
                if item is None and t0 >= wake:
                    wake = self._check_timers(in_flight, last_progress, first_seq + next_item - 1, call)
                    stats.retransmit_s += time.monotonic() - t0
        finally:
            self.next_seq = first_seq + next_item

    def _next_datagram(self, call: "_Call", first_seq: int, timeout: float) -> bytes | None:
        """The next datagram, or None after `timeout`. A root about to wait first sends the window
        ACKs it holds: the others may be waiting for them."""
        if call.window_acks and call.owned_results:
            data = self.transport.recv(0)
            if data is not None:
                return data
            self._send_window_acks(call, first_seq, idle=True)
        return self.transport.recv(timeout)

    def _accept(self, data: bytes, in_flight: dict[int, _Item], call: "_Call", unmade: int) -> _Item | None:
        """The item a result answers (recorded in `call`), or None for anything else (a result
        for seq `unmade` or later, not made yet, is kept: _keep_early)."""
        try:
            header = unpack_header(data, self.config.elements_per_packet)
        except IncFormatError as e:
            log.debug("ignoring a packet: %s", e)
            return None
        if header.opcode == OP_WINDOW_ACK and call.window_acks and header.job_id == self.config.job_id:
            return self._accept_window_ack(header, data, in_flight, call)
        if header.opcode not in (OP_RESULT, OP_ACK) or header.job_id != self.config.job_id:
            log.debug("ignoring %s", header)
            return None
        item = in_flight.get(header.seq)
        if item is None or header.slot != item.seq % self.config.window:
            self._keep_early(header, data, call, unmade)
            return None
        del in_flight[header.seq]
        now = time.monotonic()
        self._eager = self._eager or (self.config.eager_rounds and bool(header.flags & FLAG_EAGER))
        self._window_acks = self._window_acks or (self.config.window_acks and header.collective == COLL_REDUCE
                                                  and bool(header.flags & FLAG_WINDOW_ACKS))
        self._live_since = min(self._live_since, now)
        self._answer(item, call, header.flags, header.need, data if header.opcode == OP_RESULT else None, now)
        if call.window_acks and call.root_of(item.chunk) == self.config.worker_id:
            call.owned_results[item.index] = WINDOW_ACK_ANSWERED | header.flags << 8 | header.need & 0xFF
        return item

    def _answer(self, item: _Item, call: "_Call", flags: int, need: int, payload: bytes | None,
                now: float) -> None:
        """Item `item` has its answer (a result, an ACK, or a root's window ACK for it): time its
        round trip where that is sound, open the window, record it in `call`."""
        # Karn: a retransmitted chunk's answer may be to either copy; a round that waited for
        # some worker's retransmission timed that worker's timer, not the path; and a chunk sent
        # before the job's first result timed the slowest peer's start-up (processes started
        # together begin up to 0.5 s apart on 2 loaded cores), which would set every early
        # starter's RTO to seconds for as long as the call lasts.
        # A silent item's wait timed its root's lateness, not a round trip.
        if (item.sends == 1 and not flags & FLAG_RETRANSMIT and item.first_sent >= self._live_since
                and not call.silent(item.index)):
            self._rto.sample(now - item.first_sent)
        self._cwnd.on_ack(item.seq)
        if not call.stats.results:
            call.stats.first_result_s = now - call.first_sent
        call.stats.results += 1
        call.record(item, flags, need, payload)

    def _accept_window_ack(self, header: IncHeader, data: bytes, in_flight: dict[int, _Item],
                           call: "_Call") -> _Item | None:
        """A root's window ACK: those of its items among the `count` up to seq that it says have
        their results are answered, each as an ACK with that result's flags and need would answer
        it. Returns the last it answered."""
        last = None
        now = time.monotonic()
        self._live_since = min(self._live_since, now)
        codes = elements_view(data)
        for i in range(min(header.count, self.config.elements_per_packet)):
            code = int(codes[i])
            item = in_flight.get((header.seq - header.count + i) & 0xFFFFFFFF)
            if item is None or not code & WINDOW_ACK_ANSWERED or call.root_of(item.chunk) != header.root:
                continue
            del in_flight[item.seq & 0xFFFFFFFF]
            # The round trip now ends at the root's window ACK, and the RTO must cover it (as
            # TCP's covers a delayed ack).
            self._answer(item, call, code >> 8 & 0xFF, (code & 0xFF) - ((code & 0x80) << 1), None, now)
            last = item
        call.stats.window_acks += 1
        return last

    def _send_window_acks(self, call: "_Call", first_seq: int, idle: bool = False) -> None:
        """As a root: tell the others which of its items have their results since its last window
        ACK, with each one's flags and need (they decide what the others do next as they decide
        it here), once a quarter window of them waits, or this worker is `idle` (about to wait:
        the others may be waiting for them), as at the call's end. One window ACK lists up to K
        items from the first of them on; an item without its result yet is left out, not held."""
        waiting = call.owned_results
        if not waiting or (not idle and len(waiting) < max(1, self.config.window // 4)):
            return
        me, k = self.config.worker_id, self.config.elements_per_packet
        ready = sorted(waiting)
        while ready:
            start = ready[0]
            cut = bisect.bisect_left(ready, start + k)
            group, ready = ready[:cut], ready[cut:]
            codes = np.zeros(k, ">i4")
            for i in group:
                codes[i - start] = waiting.pop(i)
            count = group[-1] - start + 1
            end = (first_seq + start + count) & 0xFFFFFFFF
            header = IncHeader(OP_WINDOW_ACK, self.config.job_id, me, count, 0, 0, end, flags=FLAG_WINDOW_ACKS,
                               reduce_op=call.reduce_op, collective=COLL_REDUCE, root=me)
            self.transport.send(pack_header(header) + codes[:data_elements(count, k)].tobytes())
            call.stats.packets_sent += 1
            call.stats.window_acks += 1

    def _keep_early(self, header: IncHeader, data: bytes, call: "_Call", unmade: int) -> None:
        """A result for an item this worker has not made yet: an eager round's root may be ahead of
        it (it may still be in the call before). Dropped, the item would wait an RTO and ask again;
        so it is kept for that item, if less than a window ahead (the root is no further unless
        this worker lost results): seqs unmade .. unmade + window - 1, one per slot, each taken
        when its item is made. Anything else was answered already, or is not ours."""
        window = self.config.window
        ahead = (header.seq - unmade) & 0xFFFFFFFF
        seq = unmade + ahead
        if ahead >= 1 << 31 or header.slot != seq % window or seq in self._early:
            call.stats.duplicate_results += 1
        elif ahead < window:
            self._early[seq] = data
        else:
            call.stats.early_drops += 1

    def _resend_overtaken(self, answered: _Item, in_flight: dict[int, _Item], highest: int,
                          call: "_Call") -> None:
        """Chunks sent before `answered` and REORDER_THRESHOLD or more items older are lost:
        send each once again now rather than after its timeout (TCP's fast retransmit)."""
        for it in in_flight.values():
            if it.index > answered.index - REORDER_THRESHOLD:
                break
            if it.fast or it.last_sent >= answered.first_sent or not call.in_order(it.index, answered.index):
                continue
            if call.window_acks and call.root_of(it.chunk) != call.root_of(answered.chunk):
                continue        # another root acknowledges it, at its own pace
            it.fast = True
            call.stats.fast_retransmits += 1
            self._cwnd.on_loss(highest)
            self._resend(it, call)

    def _arm_silent(self, in_flight: dict[int, _Item], call: "_Call", answered: _Item | None) -> float:
        """Start the timers of silent items whose results now look lost: those before `answered`
        that its result shows lost (call.shows_lost); with `answered` None, the oldest in flight
        (nothing may show it lost while the call waits on it at a gate: its timer runs from the
        last progress). Until then a root that is merely late draws no requests. Returns when
        the first of them is due."""
        now = time.monotonic()
        due = math.inf
        for it in in_flight.values():
            if answered is not None and it.index >= answered.index:
                break
            if it.timer_from == math.inf and (answered is None or call.shows_lost(it.index, answered.index)):
                it.timer_from, it.timer = now, self._rto.rto
                due = now + it.timer
            if answered is None:
                break
        return due

    def _check_timers(self, in_flight: dict[int, _Item], last_progress: float, highest: int,
                      call: "_Call") -> float:
        """Chunks without a result for an RTO since they were sent and since the last progress:
        back off, cut the window, send them again; give up on a chunk past the time budget.
        Returns when the next timer is due."""
        now = time.monotonic()
        give_up = self.config.give_up_after
        expired = []
        for it in in_flight.values():
            if now - it.first_sent >= give_up:
                raise self._timeout_error(it.seq & 0xFFFFFFFF, it.chunk, now - it.first_sent, it.sends)
            if now >= max(it.timer_from, last_progress) + it.timer:
                expired.append(it)
        if expired:
            call.stats.timeouts += 1
            if all(call.silent(it.index) for it in expired):
                # Requests for eager rounds whose root may be late, or have lost its chunk and not yet
                # sent it again: no sign of congestion, so the RTO stays; each request waits longer.
                rto = min(self._rto.max_rto, 2 * max(it.timer for it in expired))
            else:
                rto = self._rto.backoff(max(it.timer for it in expired))
                self._cwnd.on_timeout(highest)
            if last_progress < min(it.last_sent for it in expired):
                # Silence since all of them were sent: a peer has not started this call yet, or the
                # switch is gone. One probe says when that ends; a window of copies would only queue.
                # Every timer restarts with the probe's, so they do not expire one by one after it.
                for it in in_flight.values():
                    if it.timer_from != math.inf:       # silent items still wait for a sign of loss
                        it.timer, it.timer_from = rto, now
                expired = expired[:1]
            for it in expired:
                it.timer = rto
            for it in expired:
                log.debug("seq %d: no result after %.1f ms, sending it again (try %d)", it.seq,
                          it.timer * 1e3, it.sends + 1)
                self._resend(it, call)
        return min((min(max(it.timer_from, last_progress) + it.timer, it.first_sent + give_up)
                    for it in in_flight.values()), default=math.inf)

    def _resend(self, it: _Item, call: "_Call") -> None:
        if it.sends == 1:       # the switch marks the round, so no worker samples a round trip from it
            it.payload = with_flags(it.payload, FLAG_RETRANSMIT)
        self.transport.send(it.payload)
        it.sends += 1
        it.last_sent = it.timer_from = time.monotonic()
        call.stats.packets_sent += 1
        call.stats.retransmits += 1

    def _timeout_error(self, seq: int, chunk: int, waited: float, sends: int) -> IncTimeoutError:
        cfg = self.config
        counters = getattr(self.transport, "counters", None)
        socket_note = f"; the socket last refused a send: {counters.last_error}" \
            if counters is not None and counters.last_error else ""
        return IncTimeoutError(
            f"job {cfg.job_id} worker {cfg.worker_id}: no result for seq {seq} (chunk {chunk} of the call) "
            f"after {waited:.2f} s and {sends} sends (give_up_after {cfg.give_up_after:g} s, "
            f"RTO {self.rto.rto * 1e3:.1f} ms); are the switch, the job and all {cfg.num_workers} workers up, "
            f"with the same window ({cfg.window}) within the job's slots?{socket_note}")

    def _finish_stats(self, call: "_Call") -> None:
        stats = call.stats
        counters = getattr(self.transport, "counters", None)
        if counters is not None:
            stats.send_waits = counters.waits - call.send_waits_before
            stats.send_drops = counters.dropped - call.send_drops_before
        stats.rtt_samples = self._rto.samples - call.samples_before
        stats.srtt_s = self._rto.srtt
        stats.final_rto_s = self._rto.rto
        stats.final_window = self._cwnd.cwnd
        stats.total_s = time.monotonic() - call.started
        self._last_stats = stats


# A Reduce its roots acknowledge ends on their window ACKs, one more trip through the switch after
# the last result: that pays only where each root has enough chunks for the per-chunk ACKs it
# saves to outweigh it (`python -m bench.collectives` at N = 8, docs/measurements.md: 1-3 chunks
# a root were as fast or up to 1.4x slower with them; 4-6 a root 10-26% faster, 23 a root 1.2-1.3x).
WINDOW_ACK_MIN_CHUNKS = 4


def _reduce_scatter_as_allreduce(size: int, n: int, k: int) -> bool:
    """Whether a ReduceScatter of `size` elements over `n` workers runs as one AllReduce of the
    whole array, each worker keeping its part: where the parts, each padded to whole chunks,
    are too few per owner for window ACKs, every chunk costs the switch N packets in and N out
    either way, and the array takes at most 3/4 of the parts' chunks (an AllReduce's N results
    per chunk carry data where a ReduceScatter's are one result and N - 1 header-only ACKs)
    (docs/protocol.md, "Small ReduceScatter and AllGather")."""
    per_owner = -(-(size // n) // k)
    return per_owner < WINDOW_ACK_MIN_CHUNKS and 4 * -(-size // k) <= 3 * n * per_owner


def _all_gather_as_allreduce(words: int, n: int, k: int) -> bool:
    """Whether an AllGather of `words` words from each of `n` workers runs as one AllReduce (SUM)
    of all of them, each worker's words at its offset and zeros elsewhere: 2 N packets per
    chunk for the gathered words packed together, against about N + 1 per chunk (eager rounds)
    for each worker's words padded to whole chunks."""
    return 2 * n * -(-n * words // k) < (n + 1) * n * -(-words // k)


def _window_acks_pay(chunks: int, roots: np.ndarray | None) -> bool:
    """Whether a Reduce of `chunks` chunks with these roots gets window ACKs: at least
    WINDOW_ACK_MIN_CHUNKS chunks per root."""
    return chunks >= WINDOW_ACK_MIN_CHUNKS * (1 if roots is None else len(np.unique(roots)))


# What kind of call the compiled engine runs (hosts/engine/engine.h ENG_KIND_*).
_INT32, _ORDERED, _GATHER, _FLOAT = 0, 1, 2, 3


class _IncEngine:
    """A Worker's calls in the compiled engine (hosts/engine/inc.c): the C state of the worker
    (job, timers, window, last float calls' exponents) and one call at a time through it."""

    def __init__(self, worker: Worker) -> None:
        built = engine.library()
        self.ffi, self.lib = ffi, lib = built.ffi, built.lib
        self.worker = worker
        cfg, transport = worker.config, worker.transport
        assert isinstance(transport, UdpTransport)
        self.e = e = ffi.gc(lib.inc_new(), lib.inc_free)
        if e == ffi.NULL:
            raise MemoryError("no memory for the compiled engine")
        e.fd = transport.sock.fileno()
        e.agg_addr, e.agg_port = engine.address(*transport.aggregator)
        e.job_id, e.worker_id, e.num_workers = cfg.job_id, cfg.worker_id, cfg.num_workers
        e.window, e.k, e.give_up_after = cfg.window, cfg.elements_per_packet, cfg.give_up_after
        e.spin, e.spin_large = cfg.spin, cfg.spin_large
        e.exponent_slack, e.exponent_margin = cfg.exponent_slack, cfg.exponent_margin
        e.eager_rounds, e.window_acks = cfg.eager_rounds, cfg.window_acks
        rto, cwnd = worker._rto, worker._cwnd
        e.rto.initial, e.rto.min_rto, e.rto.max_rto = rto.initial, rto.min_rto, rto.max_rto
        e.rto.min_variance, e.rto.rto = rto.min_variance, rto.rto
        e.cwnd.limit, e.cwnd.decrease, e.cwnd.minimum = cwnd.limit, cwnd.decrease, cwnd.minimum
        e.cwnd.cwnd, e.cwnd.ssthresh = cwnd.cwnd, cwnd.ssthresh
        self.call = ffi.new("inc_call *")
        # Views into the C structs, made once (each one is an object).
        self.rto, self.cwnd, self.counters, self.stats = e.rto, e.cwnd, e.counters, self.call.stats
        self.k = cfg.elements_per_packet
        self.bad = np.empty(0, np.int64)          # the chunks an error names, grown as calls need
        self.bad_c = ffi.NULL
        self.unread = False                       # a call ran whose stats the worker has not copied

    def run(self, kind: int, array: np.ndarray, roots: np.ndarray | None, collective: int,
            reduce_op: int) -> np.ndarray:
        """One call: the flat result (int32 words for _GATHER), or the error the Python path raises."""
        ffi, e, c, worker, k = self.ffi, self.e, self.call, self.worker, self.k
        data = np.ascontiguousarray(array).reshape(-1)
        out = np.empty(data.size, data.dtype)
        chunks = -(-data.size // k)
        if self.bad.size < chunks:
            self.bad = np.empty(chunks, np.int64)
            self.bad_c = ffi.from_buffer("int64_t[]", self.bad)
        data_c, out_c = ffi.from_buffer(data), ffi.from_buffer(out)
        roots_c = ffi.NULL if roots is None else ffi.from_buffer("uint8_t[]", np.asarray(roots, np.uint8))
        c.kind, c.dtype, c.collective, c.reduce_op = kind, engine.DTYPES[data.dtype], collective, reduce_op
        c.window_acks_pay = collective == COLL_REDUCE and _window_acks_pay(chunks, roots)
        c.data, c.out, c.roots, c.bad_chunks, c.size = data_c, out_c, roots_c, self.bad_c, data.size
        e.next_seq = worker.next_seq
        status = self.lib.inc_run(e, c)
        worker.next_seq = e.next_seq
        # A small call's few microseconds of Python matter (each worker's, on shared cores): the
        # worker's `last_stats`, `rto` and `cwnd` are read from the engine only when asked for.
        self.unread = True
        st = self.stats
        if st.send_waits or st.send_drops:
            sent, counters = worker.transport.counters, self.counters
            sent.waits += st.send_waits
            sent.dropped += st.send_drops
            if st.send_drops:
                sent.last_error = f"{os.strerror(counters.last_errno)} (errno {counters.last_errno})"
        if status == 0:                       # ENG_OK
            return out
        return self._raise(status, array.dtype)

    def _raise(self, status: int, dtype: np.dtype) -> NoReturn:
        lib, c, k = self.lib, self.call, self.k
        chunks = self.bad[:c.bad_count].tolist()
        if status == lib.ENG_TIMEOUT:
            raise self.worker._timeout_error(c.timeout_seq, c.timeout_chunk, c.timeout_waited, c.timeout_sends)
        if status == lib.ENG_INT32_OVERFLOW:
            raise int32_overflow(chunks, k)
        if status == lib.ENG_NOT_A_NUMBER:
            raise not_a_number(chunks, dtype, k)
        if status == lib.ENG_FLOAT_OVERFLOW:
            raise float_overflow(chunks, dtype, k)
        if status == lib.ENG_BEYOND_RANGE:
            raise beyond_range(chunks, dtype, k)
        raise MemoryError("no memory for the compiled engine's call")

    def read_stats(self) -> CallStats:
        """The last call's CallStats, and the worker's `rto` and `cwnd` as the engine left them."""
        self.unread = False
        worker, c_rto, c_cwnd = self.worker, self.rto, self.cwnd
        rto, cwnd = worker._rto, worker._cwnd
        rto.srtt = c_rto.srtt if c_rto.has_srtt else None
        rto.rttvar, rto.rto, rto.samples = c_rto.rttvar, c_rto.rto, c_rto.samples
        cwnd.cwnd, cwnd.ssthresh, cwnd.losses = c_cwnd.cwnd, c_cwnd.ssthresh, c_cwnd.losses
        cwnd._recover = c_cwnd.recover if c_cwnd.has_recover else None
        c, st = self.call, self.stats
        return CallStats(
            engine.DTYPE_NAMES[c.dtype], c.size, -(-c.size // self.k), st.packets_sent, st.retransmits,
            st.fast_retransmits, st.timeouts, st.results, st.duplicate_results, st.early_results, st.early_drops,
            st.redone_chunks, st.send_waits, st.send_drops, st.rtt_samples, st.srtt_s if st.has_srtt else None,
            st.first_result_s if st.has_first_result else None, st.final_rto_s, st.final_window,
            st.setup_s, st.exponent_s, st.send_s, st.wait_s, st.retransmit_s, st.finish_s, st.total_s,
            window_acks=st.window_acks)


class _Call:
    """One allreduce call's chunks and sums, and which chunk each item carries."""

    def __init__(self, worker: Worker, array: np.ndarray) -> None:
        self.started = time.monotonic()
        self.worker = worker
        cfg = worker.config
        self.shape = array.shape
        self.size = array.size
        self.k = k = cfg.elements_per_packet
        self.m = -(-array.size // k)
        self.stats = CallStats(_dtype_name(array.dtype), int(array.size), self.m)
        counters = getattr(worker.transport, "counters", None)
        self.send_waits_before = counters.waits if counters is not None else 0
        self.send_drops_before = counters.dropped if counters is not None else 0
        self.samples_before = worker._rto.samples
        self.first_sent = self.started
        self.sums = np.zeros((self.m, k), np.int32)   # zeros stay where only an ACK came back
        self.overflowed: list[int] = []         # chunks whose (final) result has OVERFLOW
        self.answered = 0                        # items 0 .. answered - 1 have their results, in order
        self.done = False
        self._pending: dict[int, tuple[int, int, int]] = {}    # item -> (chunk, flags, need), out of order
        self._last = self.size - (self.m - 1) * k
        self._job_id, self._worker_id = cfg.job_id, cfg.worker_id
        self.reduce_op = REDUCE_SUM
        self.collective = COLL_ALLREDUCE
        self.roots: np.ndarray | None = None     # each chunk's root worker (Reduce, Broadcast)
        self.eager = False                       # eager Broadcast rounds (_GatherCall)
        self.window_acks = False                 # a Reduce whose roots acknowledge it (OP_WINDOW_ACK)
        # As a root: my items answered since my last window ACK, by index: the element it gives each.
        self.owned_results: dict[int, int] = {}

    def root_of(self, chunk: int) -> int:
        return 0 if self.roots is None else int(self.roots[chunk])

    def ready(self, index: int) -> bool:
        """Whether item `index` may go now, as far as the call is concerned (the window aside)."""
        return True

    def silent(self, index: int) -> bool:
        """Whether this worker sends item `index` only to ask again for a lost result."""
        return False

    def in_order(self, earlier: int, later: int) -> bool:
        """Whether, with nothing lost, item `earlier`'s result comes before item `later`'s."""
        return True

    def shows_lost(self, earlier: int, later: int) -> bool:
        """Whether item `later`'s result, come before silent item `earlier`'s, shows that one lost."""
        return True

    def sends_data(self, chunk: int) -> bool:
        """Whether this worker's packet for `chunk` is a CONTRIB with data, else a header-only JOIN."""
        if self.collective == COLL_BROADCAST:
            return self.root_of(chunk) == self._worker_id
        return self.collective != COLL_BARRIER

    def count(self, chunk: int) -> int:
        """The elements of `chunk`: K, fewer in the last."""
        return self.k if chunk < self.m - 1 else self._last

    def wire_span(self, chunk: int) -> slice:
        """Where `chunk`'s wire elements lie in bytes that hold K per chunk: its count's whole blocks."""
        start = 4 * self.k * chunk
        return slice(start, start + 4 * data_elements(self.count(chunk), self.k))

    def header(self, chunk: int, slot: int, version: int, seq: int, flags: int = 0, exponent: int = 0,
               need: int = 0) -> bytes:
        if self.window_acks:
            flags |= FLAG_WINDOW_ACKS
        return pack_header(IncHeader(OP_CONTRIB if self.sends_data(chunk) else OP_JOIN, self._job_id,
                                     self._worker_id, self.count(chunk), slot,
                                     version, seq, flags, exponent, need, reduce_op=self.reduce_op,
                                     collective=self.collective, root=self.root_of(chunk)))

    def record(self, item: _Item, flags: int, need: int, payload: bytes | None) -> None:
        """A result (payload None: an ACK, no data for this worker): keep its sums, then look
        at the results in item order."""
        if payload is not None:
            row = elements_view(payload)
            self.sums[item.chunk, :len(row)] = row
        if item.index != self.answered:
            self._pending[item.index] = (item.chunk, flags, need)
            return
        self.answered_in_order(item.index, item.chunk, flags, need)
        self.answered += 1
        while self.answered in self._pending:
            chunk, flags, need = self._pending.pop(self.answered)
            self.answered_in_order(self.answered, chunk, flags, need)
            self.answered += 1

    def assign(self, index: int) -> int | None:
        """The chunk item `index` carries, or None: not yet known, or the call is done (`done`)."""
        raise NotImplementedError

    def packet(self, chunk: int, slot: int, version: int, seq: int) -> bytes:
        raise NotImplementedError

    def answered_in_order(self, index: int, chunk: int, flags: int, need: int) -> None:
        if flags & FLAG_OVERFLOW:
            self.overflowed.append(chunk)

    def finish(self) -> np.ndarray:
        raise NotImplementedError


class _Int32Call(_Call):
    """Item i carries chunk i; a result with OVERFLOW means a partial sum wrapped."""

    def __init__(self, worker: Worker, array: np.ndarray) -> None:
        super().__init__(worker, array)
        wire = np.zeros(self.m * self.k, ">i4")
        wire[:self.size] = array.ravel()
        self.wire = wire.tobytes()

    def assign(self, index: int) -> int | None:
        if index < self.m:
            return index
        self.done = self.answered == self.m
        return None

    def packet(self, chunk: int, slot: int, version: int, seq: int) -> bytes:
        return self.header(chunk, slot, version, seq) + self.elements(chunk)

    def elements(self, chunk: int) -> bytes:
        """The wire bytes of `chunk`'s elements."""
        return self.wire[self.wire_span(chunk)]

    def finish(self) -> np.ndarray:
        t0 = time.monotonic()
        if self.overflowed:
            raise int32_overflow(self.overflowed, self.k)
        out = self.sums.ravel()[:self.size].reshape(self.shape)
        self.stats.finish_s = time.monotonic() - t0
        return out


class _GatherCall(_Int32Call):
    """Broadcast and AllGather (and Barrier): chunk c carries raw 32-bit words of worker
    roots[c]'s data, which that worker sends and the others JOIN for; the switch sums one
    chunk with zeros, so every worker gets the words back unchanged. A Barrier's chunk has
    no data: every worker JOINs and gets an ACK."""

    def __init__(self, worker: Worker, words: np.ndarray, roots: np.ndarray, collective: int) -> None:
        super().__init__(worker, words)
        self.collective, self.roots = collective, roots
        # Eager Broadcast rounds (docs/protocol.md, "Eager rounds"): a gate ends every `period`
        # items, and the call. A gate goes once items up to `lag` before it are answered. Unless
        # the last call ended on a gate, items from `window` on wait for the first gate's result.
        self.eager = worker._eager and collective == COLL_BROADCAST
        self.window = window = worker.config.window
        self.lag = window // 4
        self.period = window - self.lag
        self.first_gate = -1 if worker._after_eager else min(self.period, self.m) - 1

    def gate(self, index: int) -> bool:
        """Whether item `index` (= its chunk) is a round of every worker, not an eager one."""
        return not self.eager or index % self.period == self.period - 1 or index == self.m - 1

    def ready(self, index: int) -> bool:
        if not self.eager or index >= self.m:
            return True
        if self.first_gate >= 0 and index >= self.window and self.answered <= self.first_gate:
            return False
        return not self.gate(index) or self.answered >= index - self.lag

    def silent(self, index: int) -> bool:
        return not self.gate(index) and not self.sends_data(index)

    def in_order(self, earlier: int, later: int) -> bool:
        # A gate waits for every worker and eager rounds for their own root alone: only one
        # root's eager rounds come back in seq order.
        return not self.eager or not self.gate(earlier) and self.root_of(earlier) == self.root_of(later)

    def shows_lost(self, earlier: int, later: int) -> bool:
        # Every worker sends its items in order: a later result of the same root, or a later gate
        # (which every root has sent), comes after the root has sent `earlier`.
        return self.gate(later) or self.root_of(earlier) == self.root_of(later)

    def packet(self, chunk: int, slot: int, version: int, seq: int) -> bytes:
        flags = 0 if self.gate(chunk) else FLAG_EAGER
        header = self.header(chunk, slot, version, seq, flags)
        return header + self.elements(chunk) if self.sends_data(chunk) else header


class _OrderedCall(_Int32Call):
    """min and max: the switch compares signed int32, so int32 goes as it is and float32 as
    order-preserving int32 (numerics.to_ordered): exact, one packet per chunk. A chunk with a
    NaN is flagged OVERFLOW, so every worker reports it."""

    def __init__(self, worker: Worker, array: np.ndarray, reduce_op: int) -> None:
        super().__init__(worker, numerics.to_ordered(array))
        self.reduce_op = reduce_op
        self.dtype = array.dtype
        self.stats.dtype = str(array.dtype)
        padded = np.zeros(self.m * self.k, bool)
        padded[:self.size] = np.isnan(array.ravel()) if array.dtype.kind == "f" else False
        self.has_nan = padded.reshape(self.m, self.k).any(axis=1)

    def packet(self, chunk: int, slot: int, version: int, seq: int) -> bytes:
        flags = FLAG_OVERFLOW if self.has_nan[chunk] else 0
        return self.header(chunk, slot, version, seq, flags) + self.elements(chunk)

    def finish(self) -> np.ndarray:
        t0 = time.monotonic()
        if self.overflowed:
            raise not_a_number(self.overflowed, self.dtype, self.k)
        out = numerics.from_ordered(self.sums.ravel()[:self.size], self.dtype).reshape(self.shape)
        self.stats.finish_s = time.monotonic() - t0
        return out


class _Float32Call(_Call):
    """Block floating point in one pass (docs/protocol.md): every worker derives each item's
    exponent alike from results all of them have, so no exponent round trip precedes the
    data. The guess for a chunk is the exponent agreed for it in the last call of the same
    length (of the KEPT_BASES kept), else (first window) the last call's largest or 0, else
    the exponent agreed for the chunk its slot carried last; plus exponent_margin. A chunk
    whose guess was wrong (OVERFLOW, or more than exponent_slack too coarse) goes again at the
    exponent its result agreed (`need`), as item j + window, or at the end of the call."""

    def __init__(self, worker: Worker, array: np.ndarray) -> None:
        super().__init__(worker, array)
        cfg = worker.config
        self.n = cfg.num_workers
        self.window = cfg.window
        self.slack = cfg.exponent_slack
        self.margin = cfg.exponent_margin
        self.dtype = array.dtype
        self.chunks = np.zeros((self.m, self.k), np.float64)      # float32 and narrower widen exactly
        self.chunks.ravel()[:self.size] = array.ravel()
        self.fits_at = quantize.chunk_exponents(self.chunks)       # the smallest exponent each chunk fits
        self.local = np.minimum(self.fits_at, quantize.EXPONENT_MAX)
        self.agreed = np.full(self.m, quantize.EXPONENT_MIN, np.int64)
        # Guesses every worker can make before any result: all chunks after a call of the same
        # length, else the first window. Those are quantised here, at once.
        guesses, same = _first_guess(worker._bases, self.m)
        known = self.m if same else min(self.m, self.window)
        self.used = np.zeros(self.m, np.int64)             # the exponent of each chunk's last item
        self.used[:known] = _bounded_guess(guesses[:known] + self.margin)
        self.prepared = self._quantized(np.arange(known))
        self.known = known
        self.item_chunk: list[int] = []
        self.item_basis: list[int] = []
        self.item_redo: list[bool] = []
        self.fresh = 0                    # chunks 0 .. fresh - 1 have been assigned once
        self.redo: deque[tuple[int, int]] = deque()   # (first item that may carry it, chunk)
        self.failed: list[int] = []
        self.first_pass_done: float | None = None

    def assign(self, index: int) -> int | None:
        if self.redo and (self.redo[0][0] <= index or self.fresh == self.m and self.answered == index):
            _, chunk = self.redo.popleft()
            self.used[chunk] = min(self.agreed[chunk], quantize.EXPONENT_MAX)
            self._add_item(chunk, int(self.used[chunk]), redo=True)
            return chunk
        if self.fresh < self.m:
            chunk = self.fresh
            self.fresh += 1
            if chunk < self.known:
                basis = int(self.used[chunk]) - self.margin
            else:       # the exponent all workers agreed for the item this one's slot carried last
                earlier = index - self.window
                agreed = int(self.agreed[self.item_chunk[earlier]])
                basis = self.item_basis[earlier] if agreed == quantize.EXPONENT_MIN else agreed
                self.used[chunk] = _bounded_guess(basis + self.margin)
            self._add_item(chunk, basis, redo=False)
            return chunk
        self.done = self.answered == index and not self.redo
        return None

    def _add_item(self, chunk: int, basis: int, redo: bool) -> None:
        self.item_chunk.append(chunk)
        self.item_basis.append(basis)
        self.item_redo.append(redo)

    def _quantized(self, chunks: np.ndarray) -> bytes:
        """The wire elements of `chunks` at their `used` exponents; zeros where they do not fit."""
        return quantize.quantize(self.chunks[chunks], self.used[chunks], self.n)[0].astype(">i4").tobytes()

    def packet(self, chunk: int, slot: int, version: int, seq: int) -> bytes:
        exponent = int(self.used[chunk])
        fits = self.fits_at[chunk] <= exponent
        if chunk < self.known and not self.item_redo[-1]:
            elements = self.prepared[self.wire_span(chunk)]
        else:
            span = self.wire_span(chunk)
            elements = self._quantized(np.array([chunk]))[:span.stop - span.start]
        return self.header(chunk, slot, version, seq, 0 if fits else FLAG_OVERFLOW, exponent,
                           int(self.local[chunk])) + elements

    def answered_in_order(self, index: int, chunk: int, flags: int, need: int) -> None:
        self.agreed[chunk] = need
        overflow = bool(flags & FLAG_OVERFLOW)
        if self.item_redo[index]:
            if overflow:
                self.failed.append(chunk)
        else:
            too_coarse = quantize.EXPONENT_MIN < need < int(self.used[chunk]) - self.slack
            if overflow or too_coarse:
                self.redo.append((index + self.window, chunk))
                self.stats.redone_chunks += 1
            if chunk == self.m - 1:
                self.first_pass_done = time.monotonic()

    def finish(self) -> np.ndarray:
        t0 = time.monotonic()
        if self.first_pass_done is not None and self.stats.redone_chunks:
            self.stats.exponent_s = max(0.0, t0 - self.first_pass_done)
        self.worker._bases = _remember(self.worker._bases, self.agreed.copy())
        if self.failed:
            raise float_overflow(sorted(self.failed), self.dtype, self.k)
        values, finite = numerics.from_sums(quantize.dequantize(self.sums, self.used, self.n), self.dtype)
        # Each input fits its dtype, their sum need not (N values near 2^127, or beyond float16's 65504).
        if not finite.all():
            raise beyond_range(np.flatnonzero(~finite).tolist(), self.dtype, self.k)
        out = values.ravel()[:self.size].reshape(self.shape)
        self.stats.finish_s = time.monotonic() - t0
        return out


def int32_overflow(chunks: list[int], k: int) -> IncOverflowError:
    return IncOverflowError(f"the int32 sum overflowed in {len(chunks)} chunk(s) of {k} elements, "
                            f"first at element {chunks[0] * k}", chunks)


def not_a_number(chunks: list[int], dtype: np.dtype, k: int) -> IncOverflowError:
    return IncOverflowError(f"a {dtype} value is not a number in {len(chunks)} chunk(s), "
                            f"first at element {chunks[0] * k}", chunks)


def float_overflow(chunks: list[int], dtype: np.dtype, k: int) -> IncOverflowError:
    return IncOverflowError(f"{dtype} values too large or not finite in {len(chunks)} chunk(s), "
                            f"first at element {chunks[0] * k}", chunks)


def beyond_range(chunks: list[int], dtype: np.dtype, k: int) -> IncOverflowError:
    return IncOverflowError(f"the {dtype} sum exceeds {dtype}'s range in {len(chunks)} chunk(s), "
                            f"first at element {chunks[0] * k}", chunks)


@functools.lru_cache(maxsize=None)
def _dtype_name(dtype: np.dtype) -> str:
    """str(dtype), which numpy computes in Python on every call (a few us of a small call)."""
    return str(dtype)


def _bounded_guess(exponent: np.ndarray | int) -> np.ndarray | int:
    """A guessed exponent within what the header's int8 carries (EXPONENT_MIN means all-zero)."""
    return np.minimum(np.maximum(exponent, quantize.EXPONENT_MIN + 1), quantize.EXPONENT_MAX)


def _first_guess(bases: list[np.ndarray], m: int) -> tuple[np.ndarray, bool]:
    """The first window's bases, and whether they come from a call of m chunks: a kept call of
    the same length's agreed exponents, per chunk, with all-zero chunks at that call's largest;
    else the newest call's largest for every chunk; 0 before any float call. Derived only from
    results every worker saw, so every worker guesses the same."""
    if not bases:
        return np.zeros(m, np.int64), False
    same = [b for b in bases if len(b) == m]
    basis = same[0] if same else bases[-1]
    largest = int(basis.max())           # EXPONENT_MIN (all-zero) is below every known exponent
    fallback = largest if largest > quantize.EXPONENT_MIN else 0
    if not same:
        return np.full(m, fallback, np.int64), False
    return np.where(basis > quantize.EXPONENT_MIN, basis, fallback), True


def _remember(bases: list[np.ndarray], agreed: np.ndarray) -> list[np.ndarray]:
    """The kept calls after one that agreed `agreed`: the newest last, one per length, at most
    KEPT_BASES (a training step's buckets come round in the same order with the same lengths)."""
    others = [b for b in bases if len(b) != len(agreed)]
    return others[max(0, len(others) - quantize.KEPT_BASES + 1):] + [agreed]
