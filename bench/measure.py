"""Wall time of a block of code and, when asked, the functions it spent that time in."""
from __future__ import annotations

import cProfile
import io
import pstats
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator


@dataclass
class Measurement:
    seconds: float = 0.0
    profile_top: list[str] = field(default_factory=list)   # cProfile's table, by own time


@contextmanager
def measured(profile: bool = False, lines: int = 12) -> Iterator[Measurement]:
    """Profiling slows the block: take rates from an unprofiled run, functions from a profiled one."""
    result = Measurement()
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    try:
        yield result
    finally:
        if profiler:
            profiler.disable()
        result.seconds = time.perf_counter() - start
        if profiler:
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(lines)
            result.profile_top = text.getvalue().splitlines()
