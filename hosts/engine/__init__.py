"""The hosts' compiled engine: one INC call (hosts/agent.py) or ring call (hosts/ring.py) from
the first packet to the result runs in C, wire-identical to the Python path, on the worker's
kernel UDP socket with batched system calls and the GIL released. Built on first use with
p4sim/cbuild.py (gcc, cached by a hash of the sources) and loaded with cffi in ABI mode.
`library()` raises BuildError where it cannot be built; the agents then use their Python path.
"""
from __future__ import annotations

import functools
import logging
import os
import socket
import struct
from pathlib import Path
from typing import NamedTuple

import numpy as np

import protocol
from hosts import quantize
from hosts.numerics import BFLOAT16
from p4sim.cbuild import Built, BuildError, build

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
SOURCES = ("engine.h", "internal.h", "pacing.c", "numerics.c", "net.c", "inc.c", "ring.c")
ENGINES = ("c", "python")
# Seconds a waiting call keeps reading, yielding the CPU between reads, before it sleeps until a
# datagram comes, as Open MPI's ranks poll with mpi_yield_when_idle: a result due within
# microseconds costs less awake than woken for. A small call (at most POLL_CHUNKS chunks, whose
# results are due within about one round trip) polls long enough for a 16 KiB call at N = 4 on 2
# cores (0.15-0.5 ms); a larger one 100 us. `python -m bench --spin` chose them
# (docs/measurements.md). Timing only, never what is sent.
POLL_CHUNKS = 16
DEFAULT_SPIN = 0.0005
DEFAULT_SPIN_LARGE = 0.0001
DTYPES = {np.dtype(np.int32): 0, np.dtype(np.float32): 1, np.dtype(np.float16): 2, BFLOAT16: 3}
DTYPE_NAMES = {code: str(dtype) for dtype, code in DTYPES.items()}
# The numbers C shares with Python, passed as -D flags (internal.h): one home for each.
DEFINES = {"INC_VERSION": protocol.INC_VERSION, "INC_HEADER_SIZE": protocol.HEADER_SIZE, "POLL_CHUNKS": POLL_CHUNKS,
           "ELEMENTS_PER_BLOCK": protocol.ELEMENTS_PER_BLOCK,
           **{name: getattr(protocol, name) for name in (
               "OP_CONTRIB", "OP_RESULT", "OP_RING", "OP_RING_ACK", "OP_JOIN", "OP_ACK", "OP_WINDOW_ACK", "WINDOW_ACK_ANSWERED", "FLAG_OVERFLOW",
               "FLAG_RETRANSMIT", "FLAG_EAGER", "FLAG_WINDOW_ACKS", "FLAG_ACK_NOW", "COLL_REDUCE", "COLL_BROADCAST",
               "COLL_BARRIER")},
           **{name: getattr(quantize, name) for name in ("EXPONENT_MIN", "EXPONENT_MAX", "WIRE_BITS", "KEPT_BASES")}}

__all__ = ["BuildError", "POLL_CHUNKS", "DEFAULT_SPIN", "DEFAULT_SPIN_LARGE", "Spin", "spin_for", "ENGINES", "DTYPES", "DTYPE_NAMES",
           "DEFINES", "library", "unavailable", "address"]


class Spin(NamedTuple):
    """Seconds a waiting call reads before it sleeps (JobConfig.spin and spin_large)."""
    small: float        # a call of at most POLL_CHUNKS chunks
    large: float        # a larger one


def spin_for(ranks_here: int) -> Spin:
    """The spin of one of `ranks_here` ranks that share this machine's cores. Every call polls
    where each rank has a core; small calls alone up to two ranks a core; none beyond. Mininet,
    2 cores (docs/measurements.md): at N = 4 a 256 B call took 0.18-0.37 ms asleep and 0.11-0.12
    polling (MPI's 0.10-0.22); a large call that polls there takes the cores the switch needs
    (1 MiB 1.8-2.2x slower), while at N = 2 the ring's large calls need the poll (1 MiB 7 ms
    against 9.5). At N = 8 polling was no faster; Open MPI too polls politely once it finds more
    ranks than cores."""
    cores = len(os.sched_getaffinity(0))
    if ranks_here <= cores:
        return Spin(DEFAULT_SPIN, DEFAULT_SPIN_LARGE)
    return Spin(DEFAULT_SPIN if ranks_here <= 2 * cores else 0.0, 0.0)


@functools.lru_cache(maxsize=1)
def library() -> Built:
    """The engine, built (or found in the cache) and loaded once per process."""
    sources = {name: (HERE / name).read_text() for name in SOURCES}
    flags = tuple(f"-D{name}=({value})" for name, value in DEFINES.items())
    return build("hosts-engine", sources, sources["engine.h"], flags)


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why the engine cannot be used here (logged once), or None if it can."""
    try:
        library()
    except BuildError as e:
        log.warning("hosts: the compiled engine is unavailable (%s); using the Python engine", e)
        return str(e)
    return None


def address(ip: str, port: int) -> tuple[int, int]:
    """An IPv4 address and UDP port as the engine keeps them: network byte order, read natively."""
    return (struct.unpack("=I", socket.inet_aton(ip))[0], struct.unpack("=H", port.to_bytes(2, "big"))[0])
