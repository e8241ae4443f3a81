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

import numpy as np

import protocol
from hosts import quantize
from hosts.numerics import BFLOAT16
from p4sim.cbuild import Built, BuildError, build

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
SOURCES = ("engine.h", "internal.h", "pacing.c", "numerics.c", "net.c", "inc.c", "ring.c")
ENGINES = ("c", "python")
# Seconds an engine keeps reading (yielding the CPU between reads) before it sleeps until a
# datagram comes, as Open MPI's ranks poll with mpi_yield_when_idle: a result due within
# microseconds costs less awake than woken for. `python -m bench --spin` chose it on the
# 2-core bench machine (docs/measurements.md); timing only, never what is sent.
DEFAULT_SPIN = 0.0001
DTYPES = {np.dtype(np.int32): 0, np.dtype(np.float32): 1, np.dtype(np.float16): 2, BFLOAT16: 3}
# The numbers C shares with Python, passed as -D flags (internal.h): one home for each.
DEFINES = {"INC_VERSION": protocol.INC_VERSION, "INC_HEADER_SIZE": protocol.HEADER_SIZE,
           **{name: getattr(protocol, name) for name in (
               "OP_CONTRIB", "OP_RESULT", "OP_RING", "OP_RING_ACK", "OP_JOIN", "OP_ACK", "OP_WINDOW_ACK", "WINDOW_ACK_ANSWERED", "FLAG_OVERFLOW",
               "FLAG_RETRANSMIT", "FLAG_EAGER", "FLAG_WINDOW_ACKS", "FLAG_ACK_NOW", "COLL_REDUCE", "COLL_BROADCAST",
               "COLL_BARRIER")},
           **{name: getattr(quantize, name) for name in ("EXPONENT_MIN", "EXPONENT_MAX", "WIRE_BITS", "KEPT_BASES")}}

__all__ = ["BuildError", "DEFAULT_SPIN", "spin_for", "ENGINES", "DTYPES", "DEFINES", "library", "unavailable",
           "address"]


def spin_for(ranks_here: int) -> float:
    """The spin of one of `ranks_here` ranks that share this machine's cores: DEFAULT_SPIN where
    each has a core of its own, else none. Ranks that outnumber the cores need them to run, not
    to read (Mininet, N=8 on 2 cores: a 1 MiB call 20-30% slower and 50% more CPU spinning, small
    calls no faster); Open MPI likewise polls politely once it finds more ranks than cores."""
    return DEFAULT_SPIN if ranks_here <= len(os.sched_getaffinity(0)) else 0.0


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
