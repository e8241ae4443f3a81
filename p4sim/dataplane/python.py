"""The Python packet loop (backend python): one raw socket per port, a loop that feeds
Switch.process frame by frame, BMv2-style per-port pcap files (IFACE_in/out.pcap), and the
slow target served by Python threads. dataplane.c does the same in C for the C backend.
"""
from __future__ import annotations

import collections
import logging
import queue
import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

from scapy.utils import RawPcapWriter

from .ports import DataplaneError, open_port_socket, pcap_paths
from .slow import MAX_LAG_SERVICES, STATS_EVERY_S, SlowMode, SlowStats

log = logging.getLogger("p4sim.dataplane")

LINKTYPE_ETHERNET = 1
MAX_FRAME = 65535 + 64
POLL_S = 0.2        # how often the loop looks at the stop flag when no packet arrives


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
        port = Port(number, iface, open_port_socket(number, iface))
        if pcap_dir is not None:
            try:
                in_path, out_path = pcap_paths(pcap_dir, iface)
                port.pcap_in = RawPcapWriter(in_path, linktype=LINKTYPE_ETHERNET, sync=True)
                port.pcap_out = RawPcapWriter(out_path, linktype=LINKTYPE_ETHERNET, sync=True)
            except OSError as err:
                port.sock.close()
                raise DataplaneError(f"cannot write pcap files for {iface}: {err.strerror or err}") from None
        log.info("port %d is %s", number, iface)
        return port
