"""How a worker agent reaches the aggregator (Transport) or, for the ring baseline, its
peers (PeerTransport): small interfaces and their kernel UDP socket implementations for
Mininet hosts and loopback; the in-process ones are in inprocess.py.
"""
from __future__ import annotations

import errno
import logging
import select
import socket
import time
from dataclasses import dataclass
from typing import Protocol

from hosts.inc import AGG_IP, INC_PORT, RING_PORT

log = logging.getLogger(__name__)
MAX_DATAGRAM = 65535            # any UDP datagram: jumbo frames carry K up to 2208 elements


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


@dataclass
class SendCounters:
    """What a kernel socket refused: sends that had to wait (EAGAIN/ENOBUFS, then sent)
    and sends given up (the packet counts as lost; the sender's retransmission covers it)."""
    waits: int = 0
    dropped: int = 0
    last_error: str = ""


# Errors after which the socket takes the packet if asked again a little later.
_RETRY_ERRNOS = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS})
SEND_PATIENCE_S = 0.05      # how long one send may wait for the kernel before the packet counts as lost


class _UdpSocket:
    """A non-blocking UDP socket with a large receive buffer, bound to an address.

    Sending never raises: a full socket buffer or device queue (EAGAIN, ENOBUFS) is waited
    out (until writable, then briefly backing off) and counted; a packet the kernel still
    refuses, or any other socket error, is counted and dropped like a lost packet.
    """

    def __init__(self, bind: tuple[str, int], interface: str | None) -> None:
        self.counters = SendCounters()
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

    def send_to_address(self, payload: bytes, address: tuple[str, int]) -> None:
        """Send one datagram; see the class docstring for what happens when it cannot go."""
        deadline = None
        pause = 0.0005
        while True:
            try:
                self.sock.sendto(payload, address)
                return
            except OSError as e:
                if e.errno not in _RETRY_ERRNOS:
                    self._drop(e)
                    return
                now = time.monotonic()
                if deadline is None:
                    self.counters.waits += 1
                    deadline = now + SEND_PATIENCE_S
                elif now >= deadline:
                    self._drop(e)
                    return
                # Writable says the socket buffer has room; ENOBUFS (the device queue) needs a pause too.
                select.select([], [self.sock], [], deadline - now)
                if e.errno == errno.ENOBUFS:
                    time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                    pause *= 2

    def _drop(self, error: OSError) -> None:
        self.counters.dropped += 1
        self.counters.last_error = f"{error.strerror or error} (errno {error.errno})"
        log.debug("send dropped: %s", self.counters.last_error)

    def recv(self, timeout: float) -> bytes | None:
        got = self.recv_from(timeout)
        return None if got is None else got[0]

    def recv_from(self, timeout: float) -> tuple[bytes, tuple[str, int]] | None:
        """The next datagram and its sender, or None after `timeout` seconds."""
        ready, _, _ = select.select([self.sock], [], [], max(timeout, 0.0))
        if not ready:
            return None
        try:
            return self.sock.recvfrom(MAX_DATAGRAM)
        except OSError as e:      # EAGAIN after a spurious wake-up, or an ICMP error queued on the socket
            log.debug("recv: %s", e)
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
        self.send_to_address(payload, self.aggregator)

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
        self.send_to_address(payload, self.peers[peer])
