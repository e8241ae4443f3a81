"""The in-process p4sim switch behind a loopback UDP address, so that workers on real kernel
sockets (the compiled engine, or `python -m hosts.worker` processes) reach it: UDP from
127.0.0.(w+1) enters the switch as worker w's frame (through an InProcessFabric, with its
faults), and what the switch sends to worker w goes back to 127.0.0.(w+1):worker_port.
"""
from __future__ import annotations

import socket
import threading
from typing import Callable

from hosts.inprocess import InProcessFabric

BRIDGE_IP = "127.0.0.254"


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback_ip(worker: int) -> str:
    return f"127.0.0.{worker + 1}"


class UdpBridge:
    """The aggregator on loopback for the n hosts of `fabric`; `sent[w]` lists the UDP payloads
    worker w sent, in arrival order. `deliver(w, payload)`, if given, says what worker w gets
    in place of each of the switch's packets to it, in order: [] loses it, and packets it kept
    back from before, given after it, come late (exactly these losses and reorderings). Call
    `close`."""

    def __init__(self, fabric: InProcessFabric, n: int, worker_port: int,
                 deliver: Callable[[int, bytes], list[bytes]] | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((BRIDGE_IP, 0))
        self.sock.settimeout(0.05)
        self.address = self.sock.getsockname()
        self.transports = [fabric.transport(w) for w in range(n)]
        self.worker_port = worker_port
        self.deliver = deliver
        self.sent: list[list[bytes]] = [[] for _ in range(n)]
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._uplink, name="bridge-up")] + [
            threading.Thread(target=self._downlink, args=(w,), name=f"bridge-down-{w}") for w in range(n)]
        for t in self.threads:
            t.start()

    def _uplink(self) -> None:
        while not self.stop.is_set():
            try:
                payload, (ip, _) = self.sock.recvfrom(2048)
            except socket.timeout:
                continue
            w = int(ip.rsplit(".", 1)[1]) - 1
            self.sent[w].append(payload)
            self.transports[w].send(payload)

    def _downlink(self, w: int) -> None:
        while not self.stop.is_set():
            payload = self.transports[w].recv(0.05)
            if payload is None:
                continue
            for out in [payload] if self.deliver is None else self.deliver(w, payload):
                self.sock.sendto(out, (loopback_ip(w), self.worker_port))

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        self.sock.close()

    def __enter__(self) -> "UdpBridge":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
