"""A switch port's interface: `-i PORT@IFACE` parsing and the raw AF_PACKET socket both packet
loops use (bound, interface brought up, promiscuous while open), with the same checks and errors.
"""
from __future__ import annotations

import fcntl
import logging
import os
import socket
import struct

log = logging.getLogger("p4sim.dataplane")

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
IFF_UP = 0x1


class DataplaneError(Exception):
    """An interface that cannot be used (missing, no permission)."""


def parse_interface(spec: str) -> tuple[int, str]:
    """`PORT@IFACE` -> (port, iface), as simple_switch's `-i` takes it."""
    port, sep, iface = spec.partition("@")
    if not sep or not iface or not port.isdigit():
        raise ValueError(f"expected PORT@IFACE (e.g. 1@veth1), got {spec!r}")
    return int(port), iface


def open_port_socket(number: int, iface: str) -> socket.socket:
    """A raw socket on `iface` for switch port `number`; raises DataplaneError."""
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
        # Bound while the interface was down, the socket holds an error (ENETDOWN) that its
        # first read would report: taking it here clears it.
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    except OSError as err:
        sock.close()
        raise DataplaneError(f"cannot use interface {iface!r} for port {number}: {err.strerror or err}") from None
    return sock


def pcap_paths(pcap_dir: str, iface: str) -> tuple[str, str]:
    """IFACE_in.pcap and IFACE_out.pcap in `pcap_dir` (made if missing), as BMv2 names them."""
    os.makedirs(pcap_dir, exist_ok=True)
    return os.path.join(pcap_dir, f"{iface}_in.pcap"), os.path.join(pcap_dir, f"{iface}_out.pcap")


def _ensure_up(sock: socket.socket, iface: str) -> None:
    """Bring the interface up if it is down: a down port would silently pass nothing."""
    ifreq = struct.pack("16sH22x", iface.encode(), 0)
    flags = struct.unpack("16sH22x", fcntl.ioctl(sock, SIOCGIFFLAGS, ifreq))[1]
    if not flags & IFF_UP:
        log.info("bringing %s up", iface)
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH22x", iface.encode(), flags | IFF_UP))
