"""Build C source into a shared object with the system C compiler, cache it, load it with cffi.

p4sim's C backend builds one object per program; the hosts' compiled engine builds one for
the whole process. Objects are cached by a hash of the sources, the declarations, the flags
and the compiler's version, so a restart or a test run does not build again; a lock makes
processes that start together (a fabric's workers) build each object once.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CC_ENV = "CC"                          # the compiler, as make takes it (default: cc, then gcc)
CACHE_ENV = "P4SIM_CACHE"              # where objects are kept (default: $XDG_CACHE_HOME/p4sim)
CFLAGS_ENV = "P4SIM_CFLAGS"            # more flags for every build (e.g. -fsanitize=undefined to check the C)
BASE_FLAGS = ("-O2", "-shared", "-fPIC", "-std=gnu11", "-Wall", "-Wno-unused", "-Wno-unused-parameter",
              "-pthread")


class BuildError(Exception):
    """No C compiler, or the compiler refused the source; `details` keeps what it said."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


@dataclass(frozen=True)
class Built:
    """A loaded shared object: `ffi` knows the declarations, `lib` calls into the object."""
    ffi: Any
    lib: Any
    path: Path
    cached: bool        # loaded from the cache, not built now


def compiler() -> str | None:
    """The C compiler's path: $CC, else cc, else gcc; None if there is none."""
    for name in ([os.environ[CC_ENV]] if os.environ.get(CC_ENV) else []) + ["cc", "gcc"]:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "p4sim"


def build(name: str, sources: dict[str, str], cdef: str, flags: tuple[str, ...] = (),
          include_dirs: tuple[Path, ...] = (), ffi: Any = None, objects: tuple[Path, ...] = ()) -> Built:
    """Compile `sources` (file name -> C text; headers among them are written beside the
    .c files) and link `objects` (from compile_object) into `name-<hash>.so` unless the cache
    has it, and load it with `cdef`, the declarations Python calls. Objects that hand each
    other pointers share one `ffi` that already declares `cdef` (cffi refuses pointers of
    another FFI's types). Raises BuildError with the compiler's message."""
    import cffi
    cc = _compiler_or_fail()
    flags = flags + _extra_flags()
    key = _key(cc, sources, cdef, flags + tuple(p.name for p in objects), include_dirs)
    target, made = _cached(f"{name}-{key}.so", lambda out: _compile(cc, sources, flags, include_dirs, out, objects))
    cached = not made
    if ffi is None:
        ffi = cffi.FFI()
        ffi.cdef(cdef)
    try:
        lib = ffi.dlopen(str(target))
    except OSError as err:
        raise BuildError(f"cannot load {target}: {err}") from None
    log.debug("%s %s", "loaded cached" if cached else "built", target)
    return Built(ffi, lib, target, cached)


def compile_object(name: str, sources: dict[str, str], flags: tuple[str, ...] = (),
                   include_dirs: tuple[Path, ...] = ()) -> Path:
    """One C file of `sources` (the others: headers it includes) compiled to a cached
    position-independent object, to link into many shared objects without compiling it
    again for each (p4sim's C runtime, into every program's object)."""
    cc = _compiler_or_fail()
    flags = flags + _extra_flags()
    key = _key(cc, sources, "", flags, include_dirs)
    return _cached(f"{name}-{key}.o", lambda out: _compile(cc, sources, ("-c",) + flags, include_dirs, out))[0]


def _extra_flags() -> tuple[str, ...]:
    return tuple(shlex.split(os.environ.get(CFLAGS_ENV, "")))


def _compiler_or_fail() -> str:
    cc = compiler()
    if cc is None:
        raise BuildError("no C compiler found (install gcc: make setup; or set CC)")
    return cc


def _cached(filename: str, make: Any) -> tuple[Path, bool]:
    """(cache_dir()/filename, whether it was made now): made by make(path) unless it exists;
    a lock makes processes that start together make it once."""
    out_dir = cache_dir()
    target = out_dir / filename
    made = False
    if not target.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        lock_path = out_dir / f"{filename}.lock"
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)        # another process may be making the same file
            if not target.exists():
                make(target)
                made = True
        lock_path.unlink(missing_ok=True)
    return target, made


def _key(cc: str, sources: dict[str, str], cdef: str, flags: tuple[str, ...],
         include_dirs: tuple[Path, ...]) -> str:
    h = hashlib.sha256()
    for part in (_compiler_version(cc), cdef, *BASE_FLAGS, *flags):
        h.update(part.encode() + b"\0")
    for name in sorted(sources):
        h.update(name.encode() + b"\0" + sources[name].encode() + b"\0")
    for d in include_dirs:          # headers the sources include from elsewhere count too
        for f in sorted(Path(d).glob("*.h")):
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:20]


@functools.lru_cache(maxsize=None)
def _compiler_version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return cc


def _compile(cc: str, sources: dict[str, str], flags: tuple[str, ...], include_dirs: tuple[Path, ...],
             target: Path, objects: tuple[Path, ...] = ()) -> None:
    with tempfile.TemporaryDirectory(prefix="p4sim-build-") as tmp:
        files = []
        for fname, text in sources.items():
            (Path(tmp) / fname).write_text(text)
            if fname.endswith(".c"):
                files.append(str(Path(tmp) / fname))
        partial = Path(tmp) / target.name
        link = [] if "-c" in flags else [*(str(o) for o in objects), "-lm"]
        cmd = [cc, *BASE_FLAGS, *flags, *(f"-I{d}" for d in include_dirs), "-I", tmp, "-o", str(partial),
               *files, *link]
        log.info("building %s", target.name)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as err:
            raise BuildError(f"{cc} could not run: {err}") from None
        if proc.returncode != 0:
            first = next((line for line in proc.stderr.splitlines() if "error" in line), proc.stderr.strip()[:200])
            raise BuildError(f"{Path(cc).name} failed: {first}", proc.stderr)
        # Atomic: a process that finds the name finds the whole object.
        os.replace(partial, target)
