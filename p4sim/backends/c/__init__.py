"""The C backend, p4sim's fast path: the checked program becomes one generated C file
(codegen/, split by idea as backends/python's), built with the hand-written runtime
(runtime/: tables, hashes, meters, the v1model traffic manager) into one shared object per
program (p4sim/cbuild.py: cached by hash), loaded with cffi and run by `CSwitch` (switch.py).

What the generator cannot do yet it refuses with a located CUnsupported (a P4Error); then,
as when there is no C compiler or the build fails, `Switch(...)` runs the program on the
Python backend and logs one line saying why (backends/__init__.py).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ...cbuild import Built, BuildError, build, compile_object
from ...program import Program, internal_errors
from .codegen import CProgram, CUnsupported, TableLayout, generate

log = logging.getLogger(__name__)

__all__ = ["CBackendUnavailable", "CProgram", "CSwitch", "CUnsupported", "TableLayout", "c_program",
           "core_library", "pipeline_library"]

HERE = Path(__file__).resolve().parent
RUNTIME = HERE / "runtime"
INCLUDE = HERE / "include"

# What Python calls in a program's object (generic: the same for every program).
PIPELINE_CDEF = """
typedef struct p4sim_frame { uint32_t port; uint32_t len; uint32_t offset; } p4sim_frame;
typedef struct p4sim_outbuf { uint8_t *data; uint32_t used, cap; p4sim_frame *frames; uint32_t count, max; } p4sim_outbuf;
typedef struct p4s_meter { double cir, pir, cburst, pburst, tc, tp, last; int32_t configured, _pad; } p4s_meter;
typedef struct p4s_direct { uint64_t packets, bytes, last_hit_ns; p4s_meter meter; } p4s_direct;
typedef struct p4s_core p4s_core;
void *p4s_pipeline_new(p4s_core *core, uint32_t gen);
void p4s_pipeline_free(void *pl);
int p4s_process(void *pl, uint32_t port, const char *data, uint32_t len, p4sim_outbuf *out);
const char *p4s_fault_reason(void *pl);
uint64_t p4s_bench(void *pl, const uint32_t *ports, const char *data, const uint32_t *offs, const uint32_t *lens,
                   uint32_t n, uint32_t repeat, p4sim_outbuf *out);
int p4s_table_add(void *pl, uint32_t tid, uint32_t slot, const uint64_t *match, int64_t priority, int32_t action,
                  const uint64_t *args, uint32_t nargs, int64_t member, int64_t group);
int p4s_table_modify(void *pl, uint32_t tid, uint32_t slot, int32_t action, const uint64_t *args, uint32_t nargs,
                     int64_t member, int64_t group);
void p4s_table_delete(void *pl, uint32_t tid, uint32_t slot);
void p4s_table_set_default(void *pl, uint32_t tid, int32_t action, const uint64_t *args, uint32_t nargs);
p4s_direct *p4s_table_direct(void *pl, uint32_t tid, uint32_t slot);
void *p4s_register_cells(void *pl, uint32_t rid);
uint64_t *p4s_counter_cells(void *pl, uint32_t cid, int bytes);
p4s_meter *p4s_meter_cell(void *pl, uint32_t mid, uint32_t index);
void p4s_meter_config(void *pl, p4s_meter *m, int configured, double cir, double cburst, double pir, double pburst);
int p4s_vset_set(void *pl, uint32_t vid, const uint64_t *matches, uint32_t n);
int p4s_profile_member(void *pl, uint32_t pid, uint64_t id, int present, int32_t action, const uint64_t *args,
                       uint32_t nargs);
int p4s_profile_group(void *pl, uint32_t pid, uint64_t id, int present, const uint64_t *ids, uint32_t n);
int p4s_replicas_set(void *pl, int kind, uint64_t id, int present, const uint32_t *ports, const uint32_t *rids,
                     uint32_t n, uint32_t packet_length_bytes);
"""

# What Python calls in the core's object (runtime/core.c).
CORE_CDEF = """
p4s_core *p4s_core_new(const uint32_t *mt);
void p4s_core_free(p4s_core *c);
void p4s_core_lock(p4s_core *c);
void p4s_core_unlock(p4s_core *c);
void p4s_core_rng_state(p4s_core *c, uint32_t *out);
int p4s_digest_wait(p4s_core *c, int timeout_ms);
uint32_t p4s_digest_take(p4s_core *c, uint8_t *out, uint32_t cap);
void p4s_digest_shutdown(p4s_core *c);
const uint64_t *p4s_core_stats(p4s_core *c);
void p4s_core_set_clock(p4s_core *c, uint64_t ns);
void p4s_outbuf_release(p4sim_outbuf *ob);
"""

CDEF = PIPELINE_CDEF + CORE_CDEF
LINK_FLAGS = ("-Wl,-z,defs",)      # an undefined symbol fails the build, not the load
RUNTIME_HEADERS = ("p4s.h", "p4s_core.h", "v1model_tm.h")
RUNTIME_SOURCES = ("tables.c", "algos.c")


class CBackendUnavailable(Exception):
    """The C backend cannot run this program here (a construct, no compiler, a failed build);
    str() is the one line the fallback logs."""


def fallback_note(program: Program | None, why: object) -> str:
    """The one line said when a program runs on the Python backend instead."""
    name = f"{program.source_file} " if program is not None else ""
    return f"p4sim: the C backend cannot run {name}({why}); using the Python backend"


def c_program(program: Program) -> CProgram:
    """The program's generated C, made once per program; CUnsupported if it cannot be."""
    key = "c"
    if key not in program.artifacts:
        try:
            with internal_errors("compiling to C", program.source_file):
                program.artifacts[key] = generate(program.checked)
        except CUnsupported as err:
            program.artifacts[key] = err
    result = program.artifacts[key]
    if isinstance(result, CUnsupported):
        raise result
    return result


def _runtime(names: tuple[str, ...]) -> dict[str, str]:
    return {name: (RUNTIME / name).read_text() for name in names}


def pipeline_library(program: Program) -> tuple[CProgram, Built]:
    """The program's shared object (built or from the cache), once per program.
    Raises CBackendUnavailable saying why it cannot be had."""
    key = "c-built"
    if key not in program.artifacts:
        try:
            cprog = c_program(program)
        except CUnsupported as err:
            raise CBackendUnavailable(f"{err}") from None
        sources = {"program.c": cprog.source, **_runtime(RUNTIME_HEADERS)}
        try:
            built = build("p4sim-pipeline", sources, CDEF, flags=LINK_FLAGS, include_dirs=(INCLUDE,), ffi=shared_ffi(),
                          objects=runtime_objects())
        except BuildError as err:
            if err.details:
                log.debug("C compiler output for %s:\n%s", program.source_file, err.details)
            raise CBackendUnavailable(str(err)) from None
        program.artifacts[key] = (cprog, built)
    return program.artifacts[key]


def runtime_objects() -> tuple[Path, ...]:
    """The runtime's C files, compiled once (cached) and linked into every program's object."""
    headers = _runtime(RUNTIME_HEADERS)
    return tuple(compile_object(f"p4sim-{Path(name).stem}", {name: (RUNTIME / name).read_text(), **headers},
                                include_dirs=(INCLUDE,))
                 for name in RUNTIME_SOURCES)


_CORE: Built | None = None
_FFI: Any = None


def shared_ffi() -> Any:
    """The one FFI of the C backend: the core's and every program's objects pass each other
    pointers (the core, outbufs), which cffi allows only within one FFI."""
    global _FFI
    if _FFI is None:
        import cffi
        _FFI = cffi.FFI()
        _FFI.cdef(CDEF)
    return _FFI


def core_library() -> Built:
    """The switch core's shared object (one per process; built once per machine)."""
    global _CORE
    if _CORE is None:
        try:
            _CORE = build("p4sim-core", {"core.c": (RUNTIME / "core.c").read_text(), **_runtime(("p4s_core.h",))},
                          CDEF, flags=LINK_FLAGS, include_dirs=(INCLUDE,), ffi=shared_ffi())
        except BuildError as err:
            if err.details:
                log.debug("C compiler output for the switch core:\n%s", err.details)
            raise CBackendUnavailable(str(err)) from None
    return _CORE


from .switch import CSwitch  # noqa: E402  (switch.py imports from here)
