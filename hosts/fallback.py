"""AllReduce in the switch while it answers, on the host ring once it does not: `FallbackAllReduce`
wraps an INC `Worker` and, when a call runs out of time (the switch, or its job, is gone), redoes
that whole call on the ring (hosts/ring.py) and uses the ring from then on. Every fallback is
logged and counted. The ranks first agree, over the ring, which call each one was in, so ranks
that got one call further through the switch than others redo it with them; `close` is one
more call, so that holds for the last call too.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, TypeVar

import numpy as np

from hosts import numerics
from hosts.agent import IncError, IncTimeoutError, Worker
from hosts.ring import RingConfig, RingWorker
from hosts.transport import PeerTransport

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class FallbackEvent:
    """The switch path given up at `call` (0-based, this worker's calls) because of `reason`."""
    call: int
    reason: str


@dataclass
class FallbackAllReduce:
    """`allreduce(array, op)` through `inc` (None: on the ring from the start) with the ring
    over `ring_transport` as the way out; `run` does the same for any collective. Every rank of
    the job must wrap its worker alike and make the same calls. `on_fallback` hears of each
    fallback (also kept in `events`)."""
    inc: Worker | None
    ring_config: RingConfig
    ring_transport: PeerTransport
    on_fallback: Callable[[FallbackEvent], None] = lambda event: None
    events: list[FallbackEvent] = field(default_factory=list)
    calls: int = 0
    ring: RingWorker | None = field(default=None, repr=False)
    _previous: Callable[[RingWorker], object] | None = field(default=None, repr=False)   # last call, on the ring

    @property
    def on_ring(self) -> bool:
        return self.inc is None

    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        array = np.asarray(array)
        numerics.reduce_op(op, array.dtype)          # the same TypeError/ValueError on either path
        mine = array if self.inc is None else array.copy()   # the caller may overwrite it; a redo needs it
        return self.run(lambda inc: inc.allreduce(array, op), lambda ring: ring_reduce(ring, mine, op))

    def run(self, on_switch: Callable[[Worker], T], on_ring: Callable[[RingWorker], T]) -> T:
        """One call of a collective: `on_switch` through the switch while it answers, else
        `on_ring`, also to redo this call (now, or with the next call for a rank left behind),
        so `on_ring` must keep its own copy of what the caller may change after the call."""
        call = self.calls
        self.calls += 1
        if self.inc is not None:
            try:
                result = on_switch(self.inc)
            except IncTimeoutError as e:
                self._give_up_switch(call, f"the switch stopped answering mid-call: {e}")
                return self._redo(call, on_ring)
            self._previous = on_ring
            return result
        return on_ring(self._ring())

    def fall_back(self, reason: str) -> None:
        """Use the ring from the first call on (before any call: no rank has used the switch)."""
        if self.calls:
            raise IncError("fall_back() is for before the first call; later, a timed-out call falls back")
        self._give_up_switch(0, reason)

    def close(self) -> None:
        """Collective, as the calls are: every rank first makes one more (one-element) call, so
        a rank that lost the last call's result from the switch finds the others still there
        to redo that call with it on the ring. Then release the sockets."""
        try:
            if self.calls:
                self.allreduce(np.zeros(1, np.int32))
        except IncError as e:
            log.warning("job %d rank %d: the closing call failed: %s", self.ring_config.job_id,
                        self.ring_config.rank, e)
        finally:
            if self.inc is not None:
                self.inc.close()
            if self.ring is not None:
                self.ring.close()
            else:
                self.ring_transport.close()

    def _give_up_switch(self, call: int, reason: str) -> None:
        event = FallbackEvent(call, reason)
        log.warning("job %d rank %d: falling back to the host ring at call %d: %s", self.ring_config.job_id,
                    self.ring_config.rank, call, reason)
        self.events.append(event)
        if self.inc is not None:
            self.inc.close()
            self.inc = None
        self.on_fallback(event)

    def _ring(self) -> RingWorker:
        if self.ring is None:
            self.ring = RingWorker(self.ring_config, self.ring_transport)
        return self.ring

    def _redo(self, call: int, on_ring: Callable[[RingWorker], T]) -> T:
        """Agree with the other ranks on the first call someone has no result for, redo from
        there on the ring. A call completes through the switch only once every rank has sent
        all of it, so ranks are at most one call apart: `call` or `call - 1`."""
        ring = self._ring()
        n = self.ring_config.num_workers
        where = np.zeros(n, np.int32)
        where[self.ring_config.rank] = call + 1
        stuck_at = ring_reduce(ring, where, "sum").astype(int) - 1
        first = int(stuck_at.min())
        if call - first not in (0, 1) or (call - first == 1 and self._previous is None):
            raise IncError(f"job {self.ring_config.job_id}: ranks lost the switch at calls {stuck_at.tolist()}; "
                           f"they cannot be brought back in step")
        if call > first:
            log.info("job %d rank %d: redoing call %d on the ring with the ranks still in it",
                     self.ring_config.job_id, self.ring_config.rank, first)
            self._previous(ring)      # this rank has its result already
        self._previous = None
        return on_ring(ring)


def ring_reduce(ring: RingWorker, array: np.ndarray, op: str) -> np.ndarray:
    """`op` over the ranks on the ring, which only sums int32 and float32: float16 and bfloat16
    sum in float32 and are rounded once; min and max gather every rank's words (a sum of one
    array and zeros, exact) and reduce locally."""
    if op == "sum":
        if array.dtype in (np.int32, np.float32):
            return ring.allreduce(array)
        return ring.allreduce(array.astype(np.float32)).astype(array.dtype)
    n, rank = ring.config.num_workers, ring.config.rank
    words = np.ascontiguousarray(array).view(np.int32).ravel()      # min and max take 4-byte dtypes only
    placed = np.zeros((n, words.size), np.int32)
    placed[rank] = words
    gathered = ring.allreduce(placed.ravel()).reshape(n, -1).view(array.dtype).reshape(n, *array.shape)
    return (np.min if op == "min" else np.max)(gathered, axis=0)
