"""The C packet loop (backend c): dataplane.c, built with cbuild and driven from here. A loop
thread runs in C without the GIL (batched receive and send, pcap, the slow target, the current
compiled pipeline); a Python thread, blocked in C while idle, takes what Python must handle:
PacketIns, frames for a Python pipeline (when no compiled one is set), and log lines.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from .. import cbuild
from .ports import DataplaneError, open_port_socket, pcap_paths
from .slow import STATS_EVERY_S, SlowMode, SlowStats

log = logging.getLogger("p4sim.dataplane")

HERE = Path(__file__).resolve().parent
INCLUDE_DIR = HERE.parent / "backends" / "c" / "include"
POLL_MS = 200        # how often the Python thread looks at the stop flag and the slow counts

# dataplane.c's API (frame bytes as char *: cffi passes Python bytes there without a copy).
CDEF = """
typedef struct p4sim_dataplane p4sim_dataplane;
typedef struct dp_item { struct dp_item *next; int64_t t; int32_t kind; uint32_t port; uint32_t len;
                         uint8_t data[]; } dp_item;
typedef struct dp_stats {
    uint64_t received, served, queue_drops, max_queued;
    uint64_t rx, tx, no_port, oversized, send_errors, receive_errors, packet_ins, up_drops, ring_drops;
} dp_stats;
p4sim_dataplane *dp_new(int64_t cpu_port, int debug, double slow_pps, uint32_t slow_queue, double slow_latency_s);
int dp_add_port(p4sim_dataplane *dp, uint32_t number, int fd, const char *iface, const char *pcap_in,
                const char *pcap_out, const char **what);
void dp_set_pipeline(p4sim_dataplane *dp, uintptr_t fn, uintptr_t ctx);
void dp_transmit(p4sim_dataplane *dp, uint32_t port, const char *data, uint32_t len);
void dp_run(p4sim_dataplane *dp);
void dp_stop(p4sim_dataplane *dp);
dp_item *dp_next(p4sim_dataplane *dp, int timeout_ms);
void dp_item_free(dp_item *it);
void dp_get_stats(p4sim_dataplane *dp, dp_stats *s);
void dp_free(p4sim_dataplane *dp);
"""
UP_RX, UP_CPU, UP_LOG = 1, 2, 3      # dp_item.kind
SLOW_COUNTS = ("received", "served", "queue_drops", "max_queued")
COUNTERS = ("rx", "tx", "no_port", "oversized", "send_errors", "receive_errors", "packet_ins", "up_drops",
            "ring_drops")


@functools.cache
def library() -> cbuild.Built:
    """dataplane.c, built once (cached across processes); raises cbuild.BuildError."""
    return cbuild.build("p4sim-dataplane", {"dataplane.c": (HERE / "dataplane.c").read_text()}, CDEF,
                        include_dirs=(INCLUDE_DIR,))


class CDataplane:
    """The switch's ports driven by C. `set_pipeline((process_fn, ctx))` gives the loop a compiled
    pipeline (p4sim_pipeline.h), None hands received frames to `run`'s on_packet instead;
    `transmit` sends from Python (PacketOut); `run` loops until `stop` is set."""

    def __init__(self, interfaces: dict[int, str], pcap_dir: str | None = None,
                 slow: SlowMode | None = None, cpu_port: int | None = None) -> None:
        built = library()
        self._ffi, self._lib = built.ffi, built.lib
        self.slow = slow
        self._stopping = False
        self._socks = []
        self._closed_counts: dict[str, int] = {}      # the counts when it closed
        self._dp = self._lib.dp_new(-1 if cpu_port is None else cpu_port, log.isEnabledFor(logging.DEBUG),
                                    slow.pps if slow else 0.0, slow.queue_depth if slow else 0,
                                    slow.latency_s if slow else 0.0)
        if self._dp == self._ffi.NULL:
            raise MemoryError("data plane")
        try:
            for number, iface in interfaces.items():
                self._add_port(number, iface, pcap_dir)
        except BaseException:
            self.close()
            raise

    def _add_port(self, number: int, iface: str, pcap_dir: str | None) -> None:
        sock = open_port_socket(number, iface)
        self._socks.append(sock)
        try:
            paths = pcap_paths(pcap_dir, iface) if pcap_dir is not None else (None, None)
        except OSError as err:
            raise DataplaneError(f"cannot write pcap files for {iface}: {err.strerror or err}") from None
        what = self._ffi.new("const char **")
        err = self._lib.dp_add_port(self._dp, number, sock.fileno(), iface.encode(),
                                    *(self._ffi.NULL if p is None else p.encode() for p in paths), what)
        if err:
            raise DataplaneError(f"cannot set up the {self._ffi.string(what[0]).decode()} of {iface} "
                                 f"for port {number}: {os.strerror(err)}")
        log.info("port %d is %s", number, iface)

    def set_pipeline(self, pipeline: tuple[int, int] | None) -> None:
        """Run frames through compiled pipeline (process_fn address, context address) from now
        on, or through run's on_packet if None; returns once the old one is no longer in use."""
        if self._dp is None:        # closed: the switch outlived its ports
            return
        fn, ctx = pipeline or (0, 0)
        self._lib.dp_set_pipeline(self._dp, fn, ctx)

    def follow(self, switch: Any) -> None:
        """Run `switch`'s compiled pipeline, and the next one after each load; a switch without
        one (the Python backend, or a program the C backend left to it) runs through on_packet."""
        if hasattr(switch, "add_pipeline_listener"):
            switch.add_pipeline_listener(self.set_pipeline)
            self.set_pipeline(switch.c_pipeline())

    def transmit(self, port: int, data: bytes) -> None:
        """Send a frame out of a switch port (after the slow target's latency, if any);
        frames for ports without an interface are dropped."""
        self._lib.dp_transmit(self._dp, port, data, len(data))

    @property
    def stats(self) -> SlowStats:
        """The slow target's counts (all 0 without one)."""
        counts = self._counts()
        return SlowStats(*(counts[name] for name in SLOW_COUNTS))

    @property
    def counters(self) -> dict[str, int]:
        """Frames received, sent, dropped for a port without an interface, too big to receive,
        failed sends and receives, PacketIns, dropped because Python fell behind, and dropped by
        the kernel because a port's receive ring was full."""
        counts = self._counts()
        return {name: counts[name] for name in COUNTERS}

    def _counts(self) -> dict[str, int]:
        if self._dp is None:
            return self._closed_counts
        s = self._ffi.new("dp_stats *")
        self._lib.dp_get_stats(self._dp, s)
        return {name: getattr(s, name) for name in SLOW_COUNTS + COUNTERS}

    def run(self, on_packet: Callable[[int, bytes], None], stop: threading.Event,
            packet_in: Callable[[bytes], None] | None = None) -> None:
        """Loop until `stop` is set: frames received while no compiled pipeline is set go to
        on_packet(port, frame), frames the pipeline sends to the CPU port to packet_in(frame)."""
        loop = threading.Thread(target=self._lib.dp_run, args=(self._dp,), name="p4sim-dataplane")
        up = threading.Thread(target=self._drain, args=(on_packet, packet_in), name="p4sim-dataplane-up")
        self._stopping = False
        loop.start()
        try:
            up.start()
            while not stop.wait(POLL_MS / 1000):
                pass
        finally:
            self._stopping = True
            self._lib.dp_stop(self._dp)
            loop.join()
            if up.ident is not None:
                up.join()
            if self.slow is not None:
                log.info("%s", self.stats)

    def _drain(self, on_packet: Callable[[int, bytes], None], packet_in: Callable[[bytes], None] | None) -> None:
        logged, logged_at = "", 0.0
        while True:
            item = self._lib.dp_next(self._dp, POLL_MS)
            if item == self._ffi.NULL:
                if self._stopping:
                    return
            else:
                try:
                    kind, port, data = item.kind, item.port, self._ffi.buffer(item.data, item.len)[:]
                finally:
                    self._lib.dp_item_free(item)
                self._deliver(kind, port, data, on_packet, packet_in)
            if self.slow is not None and time.monotonic() - logged_at >= STATS_EVERY_S:
                if (text := str(self.stats)) != logged:
                    logged, logged_at = text, time.monotonic()
                    log.info("%s", text)

    @staticmethod
    def _deliver(kind: int, port: int, data: bytes, on_packet: Callable[[int, bytes], None],
                 packet_in: Callable[[bytes], None] | None) -> None:
        if kind == UP_LOG:
            log.log(port, "%s", data.decode(errors="replace"))
            return
        try:
            if kind == UP_RX:
                on_packet(port, data)
            elif packet_in is not None:
                packet_in(data)
        except Exception as err:    # one bad frame must not stop the switch's packet path
            log.error("handling a %d-byte frame from port %d failed: %s", len(data), port, err)

    def close(self) -> None:
        """Free the C side and close the sockets (after run returned)."""
        if self._dp is not None:
            self._closed_counts = self._counts()
            self._lib.dp_free(self._dp)
            self._dp = None
        for sock in self._socks:
            sock.close()
        self._socks.clear()

