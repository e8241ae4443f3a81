"""The switch's data-plane ports: one raw AF_PACKET socket per `-i PORT@IFACE`, the packet
loop that feeds Switch.process, and BMv2-style per-port pcap files (IFACE_in/out.pcap).
Optionally a slow target (SlowMode): a bounded packet rate, a bounded queue that drops
when full, and added latency, so hosts can be tested against a switch as slow as BMv2.
"""
from __future__ import annotations

import fcntl
import logging
import collections
import os
import queue
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Callable

from scapy.utils import RawPcapWriter

log = logging.getLogger(__name__)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
IFF_UP = 0x1
LINKTYPE_ETHERNET = 1
MAX_FRAME = 65535 + 64
POLL_S = 0.2        # how often the loop looks at the stop flag when no packet arrives
STATS_EVERY_S = 1.0  # a slow target logs its counts at most this often (and when it stops)
# How far a slow target may run behind its schedule and then catch up at full speed: a late
# wake-up from sleep is made up (the average rate stays exact), a long stall is not (no burst).
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


class DataplaneError(Exception):
    """An interface that cannot be used (missing, no permission)."""


def parse_interface(spec: str) -> tuple[int, str]:
    """`PORT@IFACE` -> (port, iface), as simple_switch's `-i` takes it."""
    port, sep, iface = spec.partition("@")
    if not sep or not iface or not port.isdigit():
        raise ValueError(f"expected PORT@IFACE (e.g. 1@veth1), got {spec!r}")
    return int(port), iface


@dataclass
class Port:
    number: int
    iface: str
    sock: socket.socket
    pcap_in: RawPcapWriter | None = None
    pcap_out: RawPcapWriter | None = None


class Dataplane:
    """Raw sockets on the switch's interfaces; `transmit` sends, `run` receives."""

    def __init__(self, interfaces: dict[int, str], pcap_dir: str | None = None,
                 slow: SlowMode | None = None) -> None:
        self.ports: dict[int, Port] = {}
        self.slow = slow
        self.stats = SlowStats()
        self._delayed: collections.deque[tuple[float, int, bytes]] = collections.deque()
        self._delayed_ready = threading.Condition()
        try:
            for number, iface in interfaces.items():
                self.ports[number] = self._open(number, iface, pcap_dir)
        except BaseException:
            self.close()
            raise
        self._by_fd = {p.sock.fileno(): p for p in self.ports.values()}

    def transmit(self, port: int, data: bytes) -> None:
        """Send a frame out of a switch port (after the slow target's latency, if any);
        frames for ports without an interface are dropped."""
        if self.slow is not None and self.slow.latency_s > 0:
            with self._delayed_ready:
                self._delayed.append((time.monotonic() + self.slow.latency_s, port, data))
                self._delayed_ready.notify()
            return
        self._send(port, data)

    def _send(self, port: int, data: bytes) -> None:
        p = self.ports.get(port)
        if p is None:
            log.debug("no interface for port %d: %d-byte frame dropped", port, len(data))
            return
        try:
            p.sock.send(data)
        except OSError as err:
            log.warning("send on %s failed: %s", p.iface, err)
            return
        if p.pcap_out is not None:
            p.pcap_out.write(data)

    def run(self, on_packet: Callable[[int, bytes], None], stop: threading.Event) -> None:
        """Call on_packet(port, frame) for every frame received, until `stop` is set.

        A slow target queues frames here and serves them from a pipeline thread at its rate.
        """
        if self.slow is None:
            self._receive(on_packet, stop)
            return
        waiting: queue.Queue[tuple[float, int, bytes]] = queue.Queue(self.slow.queue_depth)
        threads = [threading.Thread(target=self._serve, args=(waiting, on_packet, stop), name="p4sim-pipeline")]
        if self.slow.latency_s > 0:
            threads.append(threading.Thread(target=self._send_delayed, args=(stop,), name="p4sim-latency"))
        for t in threads:
            t.start()
        try:
            self._receive(lambda port, data: self._enqueue(waiting, port, data), stop)
        finally:
            stop.set()
            for t in threads:
                t.join()
            log.info("%s", self.stats)

    def _enqueue(self, waiting: queue.Queue, port: int, data: bytes) -> None:
        self.stats.received += 1
        try:
            waiting.put_nowait((time.monotonic(), port, data))
        except queue.Full:
            self.stats.queue_drops += 1
            return
        self.stats.max_queued = max(self.stats.max_queued, waiting.qsize())

    def _serve(self, waiting: queue.Queue, on_packet: Callable[[int, bytes], None], stop: threading.Event) -> None:
        """The slow pipeline: each packet leaves service 1/pps after the previous one (or after
        it arrived, if the pipeline was idle), then goes through the program."""
        service = self.slow.service_s
        busy_until = logged_at = 0.0
        logged = ""
        while not stop.is_set():
            try:
                arrived, port, data = waiting.get(timeout=POLL_S)
            except queue.Empty:
                arrived = None
            now = time.monotonic()
            if arrived is not None:
                busy_until = max(arrived, busy_until, now - MAX_LAG_SERVICES * service) + service
                if busy_until > now:
                    time.sleep(busy_until - now)
                on_packet(port, data)
                self.stats.served += 1
            if now - logged_at >= STATS_EVERY_S and str(self.stats) != logged:
                logged, logged_at = str(self.stats), now
                log.info("%s", logged)

    def _send_delayed(self, stop: threading.Event) -> None:
        """Send what the pipeline emitted once its latency has passed (FIFO: one latency for all)."""
        while not stop.is_set():
            with self._delayed_ready:
                if not self._delayed:
                    self._delayed_ready.wait(POLL_S)
                    continue
                due, port, data = self._delayed.popleft()
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._send(port, data)

    def _receive(self, on_packet: Callable[[int, bytes], None], stop: threading.Event) -> None:
        poller = select.poll()
        for fd in self._by_fd:
            poller.register(fd, select.POLLIN)
        while not stop.is_set():
            for fd, _ in poller.poll(POLL_S * 1000):
                p = self._by_fd[fd]
                try:
                    data, addr = p.sock.recvfrom(MAX_FRAME)
                except OSError as err:
                    log.warning("receive on %s failed: %s", p.iface, err)
                    continue
                if addr[2] == socket.PACKET_OUTGOING:   # our own transmission, looped back
                    continue
                if p.pcap_in is not None:
                    p.pcap_in.write(data)
                on_packet(p.number, data)

    def close(self) -> None:
        for p in self.ports.values():
            p.sock.close()
            for pcap in (p.pcap_in, p.pcap_out):
                if pcap is not None:
                    pcap.close()
        self.ports.clear()

    @staticmethod
    def _open(number: int, iface: str, pcap_dir: str | None) -> Port:
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        except PermissionError:
            raise DataplaneError("raw sockets need root (or CAP_NET_RAW)") from None
        try:
            sock.bind((iface, 0))
            _ensure_up(sock, iface)
            # Promiscuous for as long as the socket is open, as BMv2 sets its ports.
            mreq = struct.pack("iHH8s", socket.if_nametoindex(iface), PACKET_MR_PROMISC, 0, b"")
            sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        except OSError as err:
            sock.close()
            raise DataplaneError(f"cannot use interface {iface!r} for port {number}: {err.strerror or err}") from None
        port = Port(number, iface, sock)
        if pcap_dir is not None:
            os.makedirs(pcap_dir, exist_ok=True)
            port.pcap_in = RawPcapWriter(os.path.join(pcap_dir, f"{iface}_in.pcap"),
                                         linktype=LINKTYPE_ETHERNET, sync=True)
            port.pcap_out = RawPcapWriter(os.path.join(pcap_dir, f"{iface}_out.pcap"),
                                          linktype=LINKTYPE_ETHERNET, sync=True)
        log.info("port %d is %s", number, iface)
        return port


def _ensure_up(sock: socket.socket, iface: str) -> None:
    """Bring the interface up if it is down: a down port would silently pass nothing."""
    ifreq = struct.pack("16sH22x", iface.encode(), 0)
    flags = struct.unpack("16sH22x", fcntl.ioctl(sock, SIOCGIFFLAGS, ifreq))[1]
    if not flags & IFF_UP:
        log.info("bringing %s up", iface)
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH22x", iface.encode(), flags | IFF_UP))
