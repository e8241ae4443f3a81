"""Workers and a switch in one process: an InProcessFabric wraps INC payloads in
Ethernet/IPv4/UDP (to the aggregator, or host to host for the ring baseline), feeds them to
`p4sim.Switch.process` and hands the switch's output to the hosts' transports, with optional
loss, duplication, reordering and latency on every link.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import queue
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from hosts.inc import AGG_IP, AGG_MAC, HEADER_SIZE, INC_PORT, MAX_ELEMENTS, RING_PORT

log = logging.getLogger(__name__)

_ETH_IP_UDP = 14 + 20 + 8
_AGG_IP = bytes(int(b) for b in AGG_IP.split("."))
_INC_PORT = INC_PORT.to_bytes(2, "big")


class PacketSwitch(Protocol):
    """What the fabric needs of a switch: p4sim.Switch's `process`."""

    def process(self, port: int, data: bytes) -> list[tuple[int, bytes]]: ...


@dataclass(frozen=True)
class Host:
    """A worker's attachment: switch port and addresses (as the controller installed them)."""
    port: int
    mac: str
    ip: str
    udp_port: int = INC_PORT


@dataclass(frozen=True)
class Faults:
    """Per packet and per link direction: probabilities of loss, duplication and delay."""
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0          # delayed by up to max_delay, so later packets overtake it
    max_delay: float = 0.005      # seconds
    latency: float = 0.0          # seconds every packet takes on every link (a slow switch or a long cable)
    seed: int = 0


class InProcessFabric:
    """N hosts cabled to one in-process switch; `transport(i)` is host i's Transport to the
    aggregator, `peer_transport(i)` its PeerTransport to the other hosts (on RING_PORT)."""

    def __init__(self, switch: PacketSwitch, hosts: Sequence[Host], faults: Faults = Faults()) -> None:
        self.switch = switch
        self.hosts = list(hosts)
        self.faults = faults
        self._rng = random.Random(faults.seed)
        self._rng_lock = threading.Lock()
        self._inboxes = {(h.port, udp_port): queue.Queue() for h in self.hosts
                         for udp_port in (h.udp_port, RING_PORT)}
        self._by_port = {h.port: h for h in self.hosts}
        # By payload size (a contribution's of the job's K, or a JOIN's header alone), built on first use.
        self._prefixes: dict[int, list[bytes]] = {}
        self._peer_prefixes: dict[int, list[list[bytes]]] = {}
        self._delayed: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._cv = threading.Condition()
        self._closed = False
        self._timer = threading.Thread(target=self._run_delayed, name="fabric-delay", daemon=True)
        self._timer.start()

    def transport(self, index: int) -> "InProcessTransport":
        return InProcessTransport(self, index)

    def peer_transport(self, index: int) -> "InProcessPeerTransport":
        return InProcessPeerTransport(self, index)

    def inbox(self, index: int, udp_port: int | None = None) -> queue.Queue:
        """UDP payloads delivered to host `index` on `udp_port` (default: its INC port)."""
        h = self.hosts[index]
        return self._inboxes[(h.port, h.udp_port if udp_port is None else udp_port)]

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._timer.join()

    def __enter__(self) -> "InProcessFabric":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_frame(self, port: int, frame: bytes) -> None:
        """Put a whole frame on the link from the host at `port` to the switch."""
        self._over_link(lambda: self._to_switch(port, frame))

    def send_payload(self, index: int, payload: bytes) -> None:
        """Host `index` sends an INC payload to the aggregator."""
        size = len(payload)
        prefixes = self._prefixes.get(size)
        if prefixes is None:
            if not (size == HEADER_SIZE or size > HEADER_SIZE and (size - HEADER_SIZE) % 4 == 0
                    and size <= HEADER_SIZE + 4 * MAX_ELEMENTS):
                raise ValueError(f"an INC payload is the {HEADER_SIZE}-byte header and up to {MAX_ELEMENTS} "
                                 f"4-byte elements, not {size} bytes")
            prefixes = self._prefixes[size] = [_prefix(h, AGG_MAC, AGG_IP, h.udp_port, INC_PORT, size)
                                               for h in self.hosts]
        self.send_frame(self.hosts[index].port, prefixes[index] + payload)

    def send_to_peer(self, index: int, peer: int, payload: bytes) -> None:
        """Host `index` sends a ring payload to host `peer`, through the switch's forwarding."""
        prefixes = self._peer_prefixes.get(len(payload))
        if prefixes is None:
            prefixes = self._peer_prefixes[len(payload)] = [
                [_prefix(h, p.mac, p.ip, RING_PORT, RING_PORT, len(payload)) for p in self.hosts] for h in self.hosts]
        self.send_frame(self.hosts[index].port, prefixes[index][peer] + payload)

    def _to_switch(self, port: int, frame: bytes) -> None:
        for out_port, out in self.switch.process(port, frame):
            host = self._by_port.get(out_port)
            if host is None:
                log.debug("switch sent %d bytes to unconnected port %d", len(out), out_port)
                continue
            self._over_link(lambda h=host, f=out: self._to_host(h, f))

    def _to_host(self, host: Host, frame: bytes) -> None:
        """Deliver the UDP payload, as the host's kernel would, if it is for this host's port;
        on the INC port only from the aggregator's address, as UdpTransport accepts it."""
        if len(frame) < _ETH_IP_UDP or frame[12:14] != b"\x08\x00" or frame[23] != 17:
            return
        ihl = (frame[14] & 0x0F) * 4
        udp = 14 + ihl
        dport = int.from_bytes(frame[udp + 2:udp + 4], "big")
        inbox = self._inboxes.get((host.port, dport))
        if frame[30:34] != _ip_bytes(host.ip) or inbox is None:
            return
        if dport == host.udp_port and (frame[26:30] != _AGG_IP or frame[udp:udp + 2] != _INC_PORT):
            log.debug("host %s drops a datagram on its INC port not from the aggregator", host.ip)
            return
        inbox.put(frame[udp + 8:])

    def _over_link(self, deliver: Callable[[], None]) -> None:
        f = self.faults
        with self._rng_lock:
            lost = self._rng.random() < f.loss
            copies = 2 if self._rng.random() < f.duplicate else 1
            delays = [f.latency + (self._rng.random() * f.max_delay if self._rng.random() < f.reorder else 0.0)
                      for _ in range(copies)]
        if lost:
            return
        for delay in delays:
            if delay == 0.0:
                deliver()
            else:
                with self._cv:
                    heapq.heappush(self._delayed, (time.monotonic() + delay, next(self._order), deliver))
                    self._cv.notify()

    def _run_delayed(self) -> None:
        while True:
            with self._cv:
                while not self._closed and (not self._delayed or self._delayed[0][0] > time.monotonic()):
                    self._cv.wait(self._delayed[0][0] - time.monotonic() if self._delayed else None)
                if self._closed:
                    return
                _, _, deliver = heapq.heappop(self._delayed)
            deliver()


class InProcessTransport:
    """Host `index`'s Transport on an InProcessFabric."""

    def __init__(self, fabric: InProcessFabric, index: int) -> None:
        self.fabric = fabric
        self.index = index
        self._inbox = fabric.inbox(index)

    def send(self, payload: bytes) -> None:
        self.fabric.send_payload(self.index, payload)

    def recv(self, timeout: float) -> bytes | None:
        try:
            return self._inbox.get(timeout=max(timeout, 0.0)) if timeout > 0 else self._inbox.get_nowait()
        except queue.Empty:
            return None

    def close(self) -> None:
        """Nothing to release: the fabric owns the links."""


class InProcessPeerTransport(InProcessTransport):
    """Host `index`'s PeerTransport on an InProcessFabric, for the ring baseline."""

    def __init__(self, fabric: InProcessFabric, index: int) -> None:
        super().__init__(fabric, index)
        self._inbox = fabric.inbox(index, RING_PORT)

    def send_to(self, peer: int, payload: bytes) -> None:
        self.fabric.send_to_peer(self.index, peer, payload)


def _ip_bytes(ip: str) -> bytes:
    return bytes(int(b) for b in ip.split("."))


def _prefix(host: Host, dst_mac: str, dst_ip: str, sport: int, dport: int, size: int) -> bytes:
    """Ethernet/IPv4/UDP header bytes of every packet with a `size`-byte payload from `host`
    to one destination, built once with Scapy."""
    frame = (Ether(src=host.mac, dst=dst_mac) / IP(src=host.ip, dst=dst_ip)
             / UDP(sport=sport, dport=dport, chksum=0) / Raw(bytes(size)))
    return bytes(frame)[:_ETH_IP_UDP]
