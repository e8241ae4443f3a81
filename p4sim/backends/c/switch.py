"""CSwitch: a v1model switch whose pipeline is a program compiled to C, with PythonSwitch's
interface (load, process, state, stats, lock, on_digest), plus what the C dataplane needs:
the pipeline's process function and context as two addresses (c_pipeline), told again after
every load (add_pipeline_listener).

A program the C backend cannot run (a construct it does not support yet, a failed build)
runs on an embedded PythonSwitch instead, with one warning line saying why.
"""
from __future__ import annotations

import logging
import random
import struct
import threading
import time
import weakref
from typing import Any, Callable

from ...program import Program
from ...state import SwitchState
from . import CBackendUnavailable, core_library, fallback_note, pipeline_library
from .codegen import CProgram
from .mirror import CMirror

log = logging.getLogger(__name__)

STATS = ("rx", "tx", "dropped", "malformed", "errors")
DIGEST_WAIT_MS = 200             # the digest thread notices close() and new pipelines this often
DIGEST_BUFFER = 1 << 16
KEEP_PROGRAMS = 16               # generations whose digests may still be decoded
_RECORD = struct.Struct("<IIII")

PipelinePair = tuple[int, int]   # (address of the p4sim_process_fn, address of its context)


class _Core:
    """The C core of one switch: its lock, statistics, random numbers and digest queue."""

    def __init__(self, seed: int | None) -> None:
        built = core_library()
        self.ffi, self.lib = built.ffi, built.lib
        state = random.Random(seed).getstate()[1]       # CPython's MT19937: 624 words and the index
        self.ptr = self.lib.p4s_core_new(self.ffi.new("uint32_t[]", list(state)))
        if self.ptr == self.ffi.NULL:
            raise MemoryError("cannot allocate the C switch core")
        self.stats = self.lib.p4s_core_stats(self.ptr)
        self.free = weakref.finalize(self, self.lib.p4s_core_free, self.ptr)


def _free_pipeline(free: Any, ptr: Any, keep: tuple) -> None:
    free(ptr)        # `keep` rides along: the core and the object must outlive their pipelines


class _Pipeline:
    """One program's C pipeline (its object and its memory)."""

    def __init__(self, core: _Core, program: Program, gen: int) -> None:
        self.cprog, built = pipeline_library(program)
        self.ffi, self.lib = built.ffi, built.lib
        self.built = built
        self.gen = gen
        self.ptr = self.lib.p4s_pipeline_new(core.ptr, gen)
        if self.ptr == self.ffi.NULL:
            raise MemoryError("cannot allocate a C pipeline")
        # The C function is looked up now: a finalizer may run in the middle of another cffi
        # lookup, which holds the FFI's lock, and a lookup there would wait for it forever.
        self.free = weakref.finalize(self, _free_pipeline, self.lib.p4s_pipeline_free, self.ptr,
                                     (core, built))

    def pair(self) -> PipelinePair:
        return (int(self.ffi.cast("uintptr_t", self.lib.p4s_process)), int(self.ffi.cast("uintptr_t", self.ptr)))


class _Lock:
    """switch.lock: a threading.RLock that also holds the C core's lock while held, so packets
    the C dataplane runs wait for what the holder reads and writes. When the last hold ends,
    what load() deferred runs (telling the dataplane of a new pipeline, freeing the old)."""

    def __init__(self, switch: CSwitch) -> None:
        self.rlock = threading.RLock()
        self._switch = switch
        self._depth = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self.rlock.acquire(blocking, timeout):
            return False
        self._depth += 1
        core = self._switch._core
        if self._depth == 1 and core.free.alive:
            core.lib.p4s_core_lock(core.ptr)
        return True

    def release(self) -> None:
        self._depth -= 1
        last = self._depth == 0
        core = self._switch._core
        if last and core.free.alive:
            core.lib.p4s_core_unlock(core.ptr)
        self.rlock.release()
        if last:
            self._switch._after_unlock()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class CSwitch:
    """One v1model switch on the C backend. process() is the data plane; state is the control
    plane's view (backends/c/mirror.py keeps the C copy in step)."""

    def __init__(self, program: Program | None = None, cpu_port: int | None = None, trace: bool = False,
                 on_digest: Callable[[str, tuple], None] | None = None, seed: int | None = None) -> None:
        self.cpu_port = cpu_port
        self.trace = trace
        self.on_digest = on_digest
        self._seed = seed
        self._core = _Core(seed)
        self.lock = _Lock(self)
        self.program: Program | None = None
        self.state: SwitchState | None = None
        self._pipeline: _Pipeline | None = None
        self._fallback: Any = None               # a PythonSwitch running what C cannot
        self._idle = dict.fromkeys(STATS, 0)     # packets seen with no program loaded
        self._gen = 0
        self._programs: dict[int, CProgram] = {}   # pipeline generation -> its program, for digests
        self._retired: list[_Pipeline] = []      # replaced pipelines, freed once the dataplane is told
        self._told: PipelinePair | None = None   # what the listeners were told last
        self._listeners: list[Callable[[PipelinePair | None], None]] = []
        self._outbuf = self._core.ffi.new("p4sim_outbuf *")
        self._outbuf_free = weakref.finalize(self, self._core.lib.p4s_outbuf_release, self._outbuf)
        self._digest_lock = threading.Lock()
        self._digest_buf = self._core.ffi.new("uint8_t[]", DIGEST_BUFFER)
        self._digest_thread: threading.Thread | None = None
        self._closed = False
        self._warned_errors = False
        if program is not None:
            self.load(program, fallback=False)

    # ---- control plane ----------------------------------------------------------------
    def load(self, program: Program, fallback: bool = True) -> None:
        """Switch to a new pipeline with fresh state. A program C cannot run runs on the
        Python backend (one warning); with fallback False that raises CBackendUnavailable."""
        if not isinstance(program, Program):
            raise TypeError(f"Switch runs a p4sim.Program (from compile_file), not {type(program).__name__}")
        with self.lock:
            if self._closed:
                raise RuntimeError("this switch is closed")
            try:
                pipeline = _Pipeline(self._core, program, self._gen + 1)
            except CBackendUnavailable as err:
                if not fallback:
                    raise
                log.warning("%s", fallback_note(program, err))
                self._run_on_python(program)
                return
            self._gen += 1
            state = SwitchState(program.info, CMirror(pipeline, pipeline.cprog, program.info))
            self._retire()
            self._pipeline, self.program, self.state = pipeline, program, state
            self._fallback = None
            self._programs[pipeline.gen] = pipeline.cprog

    def _run_on_python(self, program: Program) -> None:
        from ..python import PythonSwitch
        py = PythonSwitch(None, cpu_port=self.cpu_port, trace=self.trace, on_digest=self._deliver, seed=self._seed)
        py.load(program)
        self._retire()
        self._pipeline, self._fallback = None, py
        self.program, self.state = program, py.state

    def _retire(self) -> None:
        if self._pipeline is not None:
            self._retired.append(self._pipeline)

    def _after_unlock(self) -> None:
        """Tell the dataplane of the current pipeline (outside every lock: its listener may wait
        for its own thread, which may be waiting for ours), then free the ones it let go of."""
        current = None if self._pipeline is None or self._closed else self._pipeline.pair()
        if current != self._told:
            self._told = current
            for listener in list(self._listeners):
                listener(current)
        retired, self._retired = self._retired, []
        for p in retired:
            p.free()
        # Digests of recent pipelines may still wait in the queue: keep their programs a while.
        for gen in [g for g in self._programs if g <= self._gen - KEEP_PROGRAMS]:
            del self._programs[gen]

    def add_pipeline_listener(self, listener: Callable[[PipelinePair | None], None]) -> None:
        """Call listener(pair) with every new pipeline (None: none, or one the Python backend
        runs); the old pipeline stays valid until the listeners have returned."""
        self._listeners.append(listener)

    def c_pipeline(self) -> PipelinePair | None:
        """(address of the program's p4sim_process_fn, address of its context), or None when no
        C pipeline runs (no program, or one on the Python backend: call process()). Digests of
        packets run that way reach on_digest from a thread of this switch."""
        with self.lock:
            if self._pipeline is None or self._closed:
                return None
            self._start_digest_thread()
            return self._pipeline.pair()

    def close(self) -> None:
        """Free the pipeline and the core; stop the digest thread. The switch is unusable after."""
        with self.lock:
            if self._closed:
                return
            self._closed = True
            self._retire()
            self._pipeline = None
            self.state = None
        thread, self._digest_thread = self._digest_thread, None
        if thread is not None:
            self._core.lib.p4s_digest_shutdown(self._core.ptr)
            thread.join()
        self._outbuf_free()
        self._core.free()

    # ---- data plane -------------------------------------------------------------------
    @property
    def stats(self) -> dict[str, int]:
        """rx, tx, dropped, malformed, errors (PythonSwitch's meanings)."""
        c = self._core.stats
        out = {k: c[i] + self._idle[k] for i, k in enumerate(STATS)}
        if self._fallback is not None:
            for k, v in self._fallback.stats.items():
                out[k] += v
        return out

    def process(self, port: int, data: bytes) -> list[tuple[int, bytes]]:
        """Run one packet through the switch; every packet it sends, in order."""
        fallback = self._fallback
        if fallback is not None:
            return fallback.process(port, data)
        # The switch's lock first, as every holder of both takes them (the digest thread
        # takes only the digest lock, and calls on_digest with neither).
        with self.lock.rlock:
            with self._digest_lock:
                pipeline = self._pipeline
                if pipeline is None or self._closed:
                    self._idle["rx"] += 1
                    self._idle["dropped"] += 1
                    return []
                errors = self._core.stats[4]
                ob = self._outbuf
                ob.used = ob.count = 0
                data = bytes(data)
                pipeline.lib.p4s_process(pipeline.ptr, port & 0xFFFFFFFF, data, len(data), ob)
                out = []
                if ob.count:
                    blob = self._core.ffi.buffer(ob.data, ob.used)[:]
                    frames = ob.frames
                    for i in range(ob.count):
                        f = frames[i]
                        out.append((f.port, blob[f.offset:f.offset + f.len]))
                if self._core.stats[4] != errors:
                    self._log_error(pipeline, port)
                records = self._take_digests()
        self._deliver_records(records)
        return out

    def run_batch(self, frames: list[tuple[int, bytes]], repeat: int = 1) -> tuple[int, float]:
        """For benchmarks: the frames, `repeat` times, through the pipeline in a C loop (what
        the switch sends is counted and dropped). (frames sent, seconds in the loop)."""
        with self.lock.rlock:
            pipeline = self._pipeline
            if pipeline is None:
                raise RuntimeError("run_batch needs a program the C backend runs")
            ffi = self._core.ffi
            data = b"".join(f for _, f in frames)
            offsets, at = [], 0
            for _, f in frames:
                offsets.append(at)
                at += len(f)
            ports = ffi.new("uint32_t[]", [p & 0xFFFFFFFF for p, _ in frames])
            offs = ffi.new("uint32_t[]", offsets)
            lens = ffi.new("uint32_t[]", [len(f) for _, f in frames])
            start = time.perf_counter()
            sent = pipeline.lib.p4s_bench(pipeline.ptr, ports, data, offs, lens, len(frames), repeat, self._outbuf)
            seconds = time.perf_counter() - start
            self._take_digests()
            return sent, seconds

    def _log_error(self, pipeline: _Pipeline, port: int) -> None:
        why = self._core.ffi.string(pipeline.lib.p4s_fault_reason(pipeline.ptr)).decode()
        # Say it once loudly; a program failing on every packet must not flood the log.
        level = logging.DEBUG if self._warned_errors else logging.WARNING
        self._warned_errors = True
        log.log(level, "packet on port %d dropped: %s", port, why)

    # ---- digests ----------------------------------------------------------------------
    def _take_digests(self) -> list[tuple[int, int, tuple[int, ...]]]:
        """Every digest waiting, as (pipeline generation, digest index, words)."""
        core = self._core
        records = []
        while True:
            n = core.lib.p4s_digest_take(core.ptr, self._digest_buf, DIGEST_BUFFER)
            if n == 0:
                return records
            raw = core.ffi.buffer(self._digest_buf, n)[:]
            at = 0
            while at < n:
                gen, index, nwords, _ = _RECORD.unpack_from(raw, at)
                at += _RECORD.size
                records.append((gen, index, struct.unpack_from(f"<{nwords}Q", raw, at)))
                at += 8 * nwords

    def _deliver_records(self, records: list) -> None:
        for gen, index, words in records:
            cprog = self._programs.get(gen)
            if cprog is None:
                continue
            name, fields = cprog.digests[index]
            values, at = [], 0
            for width, signed, boolean in fields:
                v = words[at] | (words[at + 1] << 64 if width > 64 else 0)
                at += 2 if width > 64 else 1
                v &= (1 << width) - 1
                if signed and v >> (width - 1):
                    v -= 1 << width
                values.append(bool(v) if boolean else v)
            self._deliver(name, tuple(values))

    def _deliver(self, name: str, values: tuple) -> None:
        if self.on_digest is not None:
            self.on_digest(name, values)

    def _start_digest_thread(self) -> None:
        if self._digest_thread is None:
            self._digest_thread = threading.Thread(target=self._digest_loop, name="p4sim-digests", daemon=True)
            self._digest_thread.start()

    def _digest_loop(self) -> None:
        """Digests of packets the C dataplane ran: waits in C (without the GIL) for them."""
        core = self._core
        while not self._closed:
            if core.lib.p4s_digest_wait(core.ptr, DIGEST_WAIT_MS):
                with self._digest_lock:
                    records = self._take_digests()
                self._deliver_records(records)
