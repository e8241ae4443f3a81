"""The switch's data-plane ports: one raw AF_PACKET socket per `-i PORT@IFACE`, the packet
loop that feeds Switch.process, and BMv2-style per-port pcap files (IFACE_in/out.pcap).
"""
from __future__ import annotations

import fcntl
import logging
import os
import select
import socket
import struct
import threading
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

    def __init__(self, interfaces: dict[int, str], pcap_dir: str | None = None) -> None:
        self.ports: dict[int, Port] = {}
        try:
            for number, iface in interfaces.items():
                self.ports[number] = self._open(number, iface, pcap_dir)
        except BaseException:
            self.close()
            raise
        self._by_fd = {p.sock.fileno(): p for p in self.ports.values()}

    def transmit(self, port: int, data: bytes) -> None:
        """Send a frame out of a switch port; frames for ports without an interface are dropped."""
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
        """Call on_packet(port, frame) for every frame received, until `stop` is set."""
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
