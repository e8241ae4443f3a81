"""How a worker agent reaches the aggregator (Transport) or, for the ring baseline, its
peers (PeerTransport): small interfaces and their kernel UDP socket implementations for
Mininet hosts and loopback; the in-process ones are in inprocess.py.
"""
from __future__ import annotations

import logging
import select
import socket
import time
from typing import Protocol

from hosts.inc import AGG_IP, INC_PORT, RING_PORT

log = logging.getLogger(__name__)


class Transport(Protocol):
    """Carries INC UDP payloads between one worker and the switch."""

    def send(self, payload: bytes) -> None:
        """Send one INC payload (header and elements) to the aggregator."""

    def recv(self, timeout: float) -> bytes | None:
        """The next INC payload addressed to this worker, or None after `timeout` seconds."""

    def close(self) -> None:
        """Release the transport's resources."""


class PeerTransport(Protocol):
    """Carries payloads between one ring worker and its peers, named by rank."""

    def send_to(self, peer: int, payload: bytes) -> None:
        """Send one payload to the worker of rank `peer`."""

    def recv(self, timeout: float) -> bytes | None:
        """The next payload addressed to this worker, or None after `timeout` seconds."""

    def close(self) -> None:
        """Release the transport's resources."""


class _UdpSocket:
    """A non-blocking UDP socket with a large receive buffer, bound to an address."""

    def __init__(self, bind: tuple[str, int], interface: str | None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            if interface:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, interface.encode())
            self.sock.bind(bind)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)

    @property
    def address(self) -> tuple[str, int]:
        return self.sock.getsockname()

    def recv(self, timeout: float) -> bytes | None:
        got = self.recv_from(timeout)
        return None if got is None else got[0]

    def recv_from(self, timeout: float) -> tuple[bytes, tuple[str, int]] | None:
        """The next datagram and its sender, or None after `timeout` seconds."""
        ready, _, _ = select.select([self.sock], [], [], max(timeout, 0.0))
        if not ready:
            return None
        try:
            return self.sock.recvfrom(2048)
        except BlockingIOError:
            return None

    def close(self) -> None:
        self.sock.close()


class UdpTransport(_UdpSocket):
    """A kernel UDP socket bound to the worker's INC port, sending to the aggregator."""

    def __init__(self, aggregator: tuple[str, int] = (AGG_IP, INC_PORT),
                 bind: tuple[str, int] = ("0.0.0.0", INC_PORT), interface: str | None = None) -> None:
        # As recvfrom names senders: a dotted IPv4 address (a host name is resolved once here).
        self.aggregator = (socket.gethostbyname(aggregator[0]), aggregator[1])
        super().__init__(bind, interface)
        log.debug("UDP transport on %s to %s", bind, aggregator)

    def send(self, payload: bytes) -> None:
        self.sock.sendto(payload, self.aggregator)

    def recv(self, timeout: float) -> bytes | None:
        """The next datagram from the aggregator's address; others (another host sending
        look-alike results straight to this worker) are dropped."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            got = self.recv_from(deadline - time.monotonic())
            if got is None:
                return None
            data, sender = got
            if sender == self.aggregator:
                return data
            log.debug("dropping a datagram from %s:%d, not the aggregator", *sender)


class UdpPeerTransport(_UdpSocket):
    """A kernel UDP socket for the ring baseline; `peers[rank]` is each worker's (ip, port)."""

    def __init__(self, peers: list[tuple[str, int]], bind: tuple[str, int] = ("0.0.0.0", RING_PORT),
                 interface: str | None = None) -> None:
        super().__init__(bind, interface)
        self.peers = peers

    def send_to(self, peer: int, payload: bytes) -> None:
        self.sock.sendto(payload, self.peers[peer])
