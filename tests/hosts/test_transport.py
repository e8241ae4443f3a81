"""UdpTransport on loopback with a socket that refuses sends the way a busy kernel does
(EAGAIN, ENOBUFS, or worse): the send waits, retries and counts, or drops and counts, but
never raises; and a Worker on it still gets the exact sum, with the waits in its stats."""
from __future__ import annotations

import errno
import socket
import threading
import time
from typing import Iterator

import numpy as np
import pytest

from hosts.agent import JobConfig, Worker
from hosts.inc import OP_RESULT
from hosts.transport import SEND_PATIENCE_S, UdpTransport


class RefusingSocket:
    """A real UDP socket whose sendto raises `errors[k]` on its k-th call where given
    (None: sent), or `always` on every call."""

    def __init__(self, sock: socket.socket, errors: dict[int, int] | None = None, always: int | None = None) -> None:
        self.sock = sock
        self.errors = errors or {}
        self.always = always
        self.calls = self.refused = 0

    def sendto(self, payload: bytes, address: tuple[str, int]) -> int:
        code = self.always if self.always is not None else self.errors.get(self.calls)
        self.calls += 1
        if code is not None:
            self.refused += 1
            raise OSError(code, errno.errorcode[code])
        return self.sock.sendto(payload, address)

    def __getattr__(self, name: str):  # noqa: ANN204 - everything else is the real socket's
        return getattr(self.sock, name)


@pytest.fixture
def receiver() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    try:
        yield sock
    finally:
        sock.close()


@pytest.fixture
def transport(receiver: socket.socket) -> Iterator[UdpTransport]:
    t = UdpTransport(aggregator=receiver.getsockname(), bind=("127.0.0.1", 0))
    try:
        yield t
    finally:
        t.close()


def test_eagain_is_waited_out_retried_and_counted(transport: UdpTransport, receiver: socket.socket) -> None:
    transport.sock = RefusingSocket(transport.sock, {0: errno.EAGAIN, 1: errno.EAGAIN, 3: errno.EAGAIN})
    transport.send(b"first")
    transport.send(b"second")
    assert [receiver.recv(100) for _ in range(2)] == [b"first", b"second"]
    assert transport.counters.waits == 2 and transport.counters.dropped == 0


def test_enobufs_that_persists_drops_the_packet_after_a_bounded_wait(transport: UdpTransport) -> None:
    transport.sock = RefusingSocket(transport.sock, always=errno.ENOBUFS)
    start = time.monotonic()
    transport.send(b"lost")
    assert SEND_PATIENCE_S <= time.monotonic() - start < SEND_PATIENCE_S + 1.0
    assert transport.counters.waits == 1 and transport.counters.dropped == 1
    assert "errno 105" in transport.counters.last_error


def test_other_socket_errors_drop_the_packet_without_a_traceback(transport: UdpTransport) -> None:
    transport.sock = RefusingSocket(transport.sock, always=errno.ENETUNREACH)
    transport.send(b"lost")
    assert transport.counters.dropped == 1 and transport.counters.waits == 0
    assert f"errno {errno.ENETUNREACH}" in transport.counters.last_error


class LoopbackEcho:
    """A one-worker aggregator: answers each contribution with itself as the result."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                data, peer = self.sock.recvfrom(2048)
            except socket.timeout:
                continue
            self.sock.sendto(bytes([(1 << 4) | OP_RESULT]) + data[1:], peer)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


def test_worker_gets_the_exact_sum_through_a_socket_that_keeps_saying_eagain() -> None:
    echo = LoopbackEcho()
    transport = UdpTransport(aggregator=echo.sock.getsockname(), bind=("127.0.0.1", 0))
    try:
        refusing = RefusingSocket(transport.sock, {k: errno.EAGAIN for k in range(0, 400, 3)})
        transport.sock = refusing
        # The Python engine: the compiled one sends on the socket's descriptor, past this wrapper
        # (tests/hosts/test_engine.py checks its own refused sends).
        worker = Worker(JobConfig(1, 0, 1, window=8, engine="python"), transport)
        x = np.arange(100 * 32, dtype=np.int32)
        np.testing.assert_array_equal(worker.allreduce(x), x)
        stats = worker.last_stats
        # Every third sendto is refused: 50 of the 150 calls 100 packets take. Each refusal is
        # waited out and retried, none dropped. On a busy machine the echo thread may stall past
        # the RTO (20 ms at least), and the retransmissions meet refusals too.
        assert stats.send_waits == refusing.refused >= 50 and stats.send_drops == 0
        assert stats.packets_sent == 100 + stats.retransmits
    finally:
        transport.close()
        echo.close()
