"""A worker's side of in-network AllReduce: `Worker.allreduce(array)` chunks the array
into K-element packets, keeps a window of slots in flight through a Transport, retransmits
on timeout and reports int32 overflow instead of returning a wrong sum.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from hosts import quantize
from hosts.inc import (FLAG_OVERFLOW, INC_K, MAX_WORKERS, OP_CONTRIB, OP_RESULT, IncFormatError,
                       IncHeader, pack, unpack)
from hosts.transport import Transport

log = logging.getLogger(__name__)


class IncError(RuntimeError):
    """An AllReduce that did not produce a correct result."""


class IncOverflowError(IncError):
    """The sum does not fit: int32 wrapped, or float32 values too large or not finite."""

    def __init__(self, message: str, chunks: list[int]) -> None:
        super().__init__(message)
        self.chunks = chunks


class IncTimeoutError(IncError):
    """No result for a chunk after every retry: the switch, job or a peer is missing.

    The job's slots are then out of step: reset the job (controller) and start new workers.
    """


@dataclass(frozen=True)
class JobConfig:
    """One worker's view of its job, as the controller installed it. All workers of a job
    must use the same window (it maps chunks to slots)."""
    job_id: int
    worker_id: int
    num_workers: int
    window: int = 16             # slots in flight; at most the job's num_slots
    timeout: float = 0.02        # seconds before a chunk is sent again
    max_retries: int = 200
    exponent_slack: int = 4      # float32: redo a chunk whose guessed exponent was this much too big

    def __post_init__(self) -> None:
        if not 1 <= self.num_workers <= MAX_WORKERS:
            raise ValueError(f"num_workers must be 1..{MAX_WORKERS}, not {self.num_workers}")
        if not 0 <= self.worker_id < self.num_workers:
            raise ValueError(f"worker_id must be 0..{self.num_workers - 1}, not {self.worker_id}")
        if not 0 <= self.job_id < 1 << 16:
            raise ValueError(f"job_id must be 0..65535, not {self.job_id}")
        if not 1 <= self.window < 1 << 15:
            raise ValueError(f"window must be 1..32767 slots, not {self.window}")
        if self.timeout <= 0 or self.max_retries < 0:
            raise ValueError("timeout must be positive and max_retries not negative")


@dataclass
class _InFlight:
    index: int
    seq: int
    payload: bytes
    deadline: float
    tries: int = 1


@dataclass
class _Exchange:
    """The switch's answers for a batch of chunks."""
    sums: np.ndarray        # (m, K) int32
    flags: np.ndarray       # (m,) the results' flags
    needs: np.ndarray       # (m,) int8 max of the contributions' need


@dataclass
class Worker:
    """One worker of a job. Every worker of the job must call `allreduce` with arrays of the
    same length and dtype in the same order: the chunk sequence numbers (and so the slots
    and versions) are derived from that order, never negotiated."""
    config: JobConfig
    transport: Transport
    next_seq: int = 0
    _exponents: np.ndarray | None = field(default=None, repr=False)   # last float call's, per chunk

    def allreduce(self, array: np.ndarray) -> np.ndarray:
        """The element-wise sum of `array` over all workers, same shape and dtype."""
        array = np.asarray(array)
        if array.dtype not in (np.int32, np.float32):
            raise TypeError(f"allreduce takes int32 or float32 arrays, not {array.dtype}")
        if array.size == 0:
            return array.copy()
        if array.dtype == np.int32:
            return self._allreduce_int32(array)
        return self._allreduce_float32(array)

    def close(self) -> None:
        """Release the transport. Nothing is owed to anyone: the switch keeps the results."""
        self.transport.close()

    def _allreduce_int32(self, array: np.ndarray) -> np.ndarray:
        chunks, counts = _chunked(array.ravel())
        m = len(chunks)
        result = self._exchange(chunks, counts, np.zeros(m, np.int64), np.zeros(m, np.int64),
                                np.zeros(m, np.int64))
        overflowed = np.flatnonzero(result.flags & FLAG_OVERFLOW).tolist()
        if overflowed:
            raise IncOverflowError(f"the int32 sum overflowed in {len(overflowed)} chunk(s) of "
                                   f"{INC_K} elements, first at element {overflowed[0] * INC_K}", overflowed)
        return result.sums.ravel()[:array.size].reshape(array.shape)

    def _allreduce_float32(self, array: np.ndarray) -> np.ndarray:
        """Two passes at most: the first at an exponent every worker guesses alike (the last
        call's), the second, for chunks where the guess was wrong, at the switch's max."""
        n = self.config.num_workers
        chunks, counts = _chunked(array.ravel())
        m = len(chunks)
        local = np.minimum(quantize.chunk_exponents(chunks), quantize.EXPONENT_MAX)
        exponents = self._guess_exponents(m)
        q, fits = quantize.quantize(chunks, exponents, n)
        first = self._exchange(q, counts, exponents, np.where(fits, 0, FLAG_OVERFLOW), local)
        sums = first.sums
        needed = first.needs.astype(np.int64)
        too_small = (first.flags & FLAG_OVERFLOW) != 0
        too_coarse = (needed > quantize.EXPONENT_MIN) & (needed < exponents - self.config.exponent_slack)
        redo = np.flatnonzero(too_small | too_coarse)
        failed: list[int] = []
        if len(redo):
            log.debug("float32 allreduce: %d of %d chunks again at the agreed exponent", len(redo), m)
            exponents = exponents.copy()
            exponents[redo] = np.minimum(needed[redo], quantize.EXPONENT_MAX)
            q2, fits2 = quantize.quantize(chunks[redo], exponents[redo], n)
            second = self._exchange(q2, counts[redo], exponents[redo], np.where(fits2, 0, FLAG_OVERFLOW),
                                    local[redo])
            sums = sums.copy()
            sums[redo] = second.sums
            failed = redo[(second.flags & FLAG_OVERFLOW) != 0].tolist()
        self._exponents = exponents
        if failed:
            raise IncOverflowError(f"float32 values too large or not finite in {len(failed)} chunk(s), "
                                   f"first at element {failed[0] * INC_K}", failed)
        values = quantize.dequantize(sums, exponents, n)
        # Each input fits float32, their sum need not (N values near 2^127).
        too_big = np.flatnonzero(~np.all(np.isfinite(values), axis=1)).tolist()
        if too_big:
            raise IncOverflowError(f"the float32 sum exceeds float32's range in {len(too_big)} chunk(s), "
                                   f"first at element {too_big[0] * INC_K}", too_big)
        return values.ravel()[:array.size].reshape(array.shape)

    def _guess_exponents(self, m: int) -> np.ndarray:
        """Derived only from results all workers saw, so every worker guesses the same."""
        if self._exponents is None:
            return np.zeros(m, np.int64)
        if len(self._exponents) == m:
            return self._exponents.copy()
        return np.full(m, int(self._exponents.max()), np.int64)

    def _exchange(self, chunks: np.ndarray, counts: np.ndarray, exponents: np.ndarray,
                  flags: np.ndarray, needs: np.ndarray) -> _Exchange:
        """Send every chunk, a window of slots at a time, and collect every result.

        Chunk i gets seq = next_seq + i, slot = seq % window, and the slot's version flips
        on each reuse: version = (seq // window) % 2.
        """
        cfg = self.config
        m = len(chunks)
        first_seq = self.next_seq
        self.next_seq += m
        out = _Exchange(np.zeros((m, INC_K), np.int32), np.zeros(m, np.int64), np.zeros(m, np.int64))
        in_flight: dict[int, _InFlight] = {}
        next_index = done = 0
        while done < m:
            while next_index < m and (first_seq + next_index) % cfg.window not in in_flight:
                seq = first_seq + next_index
                header = IncHeader(opcode=OP_CONTRIB, job_id=cfg.job_id, worker_id=cfg.worker_id,
                                   count=int(counts[next_index]), slot=seq % cfg.window,
                                   pool_version=(seq // cfg.window) % 2, seq=seq & 0xFFFFFFFF,
                                   flags=int(flags[next_index]), exponent=int(exponents[next_index]),
                                   need=int(needs[next_index]))
                payload = pack(header, chunks[next_index])
                self.transport.send(payload)
                in_flight[header.slot] = _InFlight(next_index, header.seq, payload,
                                                   time.monotonic() + cfg.timeout)
                next_index += 1
            wait = min(f.deadline for f in in_flight.values()) - time.monotonic()
            data = self.transport.recv(wait)
            if data is not None:
                done += self._accept(data, in_flight, out)
            self._retransmit_expired(in_flight)
        return out

    def _accept(self, data: bytes, in_flight: dict[int, _InFlight], out: _Exchange) -> int:
        """Record a result for a chunk in flight; 1 if it was one, else 0 (stale or foreign)."""
        try:
            header, elements = unpack(data)
        except IncFormatError as e:
            log.debug("ignoring a packet: %s", e)
            return 0
        waiting = in_flight.get(header.slot)
        if (header.opcode != OP_RESULT or header.job_id != self.config.job_id
                or waiting is None or waiting.seq != header.seq):
            log.debug("ignoring %s", header)
            return 0
        del in_flight[header.slot]
        out.sums[waiting.index] = elements
        out.flags[waiting.index] = header.flags
        out.needs[waiting.index] = header.need
        return 1

    def _retransmit_expired(self, in_flight: dict[int, _InFlight]) -> None:
        now = time.monotonic()
        for f in in_flight.values():
            if f.deadline > now:
                continue
            if f.tries > self.config.max_retries:
                raise IncTimeoutError(f"job {self.config.job_id} worker {self.config.worker_id}: no result "
                                      f"for seq {f.seq} after {f.tries} tries; are the switch, the job "
                                      f"and all {self.config.num_workers} workers up, with the same "
                                      f"window ({self.config.window}) within the job's slots?")
            log.debug("retransmitting seq %d (try %d)", f.seq, f.tries + 1)
            self.transport.send(f.payload)
            f.tries += 1
            f.deadline = now + self.config.timeout


def _chunked(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(chunks, counts): `flat` zero padded to whole K-element rows, and each row's length."""
    m = -(-flat.size // INC_K)
    chunks = np.zeros((m, INC_K), dtype=flat.dtype)
    chunks.ravel()[:flat.size] = flat
    counts = np.full(m, INC_K, np.int64)
    counts[-1] = flat.size - (m - 1) * INC_K
    return chunks, counts
