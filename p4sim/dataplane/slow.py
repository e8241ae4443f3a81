"""The slow target's figures (SlowMode, its presets) and counts (SlowStats), shared by both
packet loops: a bounded packet rate, a bounded queue that drops when full, added latency.
"""
from __future__ import annotations

from dataclasses import dataclass

STATS_EVERY_S = 1.0  # a slow target logs its counts at most this often (and when it stops)
# How far a slow target may run behind its schedule and then catch up at full speed: a late
# wake-up from sleep is made up (the average rate stays exact), a long stall is not (no burst).
# dataplane.c's MAX_LAG_SERVICES is the same figure.
MAX_LAG_SERVICES = 4


@dataclass(frozen=True)
class SlowMode:
    """A switch slower than p4sim: the pipeline serves at most `pps` packets a second (each
    received packet takes 1/pps, whatever it emits), at most `queue_depth` packets wait for
    it (more are dropped and counted, as BMv2 drops when its input buffer is full), and
    everything the switch sends leaves `latency_s` later."""
    pps: float
    queue_depth: int
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.pps > 0 or self.queue_depth < 1 or self.latency_s < 0:
            raise ValueError(f"a slow target needs pps > 0, queue >= 1 and latency >= 0, not {self.pps:g} pps, "
                             f"queue {self.queue_depth}, latency {self.latency_s * 1e6:g} us")

    @property
    def service_s(self) -> float:
        return 1.0 / self.pps


# BMv2 1.15.0's default build measured on this project's 2 cores: 8.5-9.5k packets/s forwarded,
# a 99-326 us round trip; its simple_switch input buffer holds 1024 packets. "bmv2-tenth" is a
# tenth of that speed (ten times the latency): a slower switch, or a busy host.
SLOW_PRESETS = {"bmv2": SlowMode(pps=8500, queue_depth=1024, latency_s=100e-6),
                "bmv2-tenth": SlowMode(pps=850, queue_depth=1024, latency_s=1e-3)}


@dataclass
class SlowStats:
    """What a slow target did: packets received, served by the pipeline, dropped on a full queue."""
    received: int = 0
    served: int = 0
    queue_drops: int = 0
    max_queued: int = 0

    def __str__(self) -> str:
        return (f"slow target: {self.received} packets received, {self.served} served, "
                f"{self.queue_drops} dropped (queue full), at most {self.max_queued} queued")
