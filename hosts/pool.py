"""A job's side of the controller's slot pool service (docs/protocol.md, "The slot pool
service"): `request_slots` asks for a slot range for the job's workers and returns a `Lease`
that holds it until `release()`. JSON lines over TCP ("HOST:PORT") or a Unix socket ("unix:PATH").
"""
from __future__ import annotations

import json
import logging
import socket
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

# Why a request was refused: the service's reasons, and UNREACHABLE also when no service answers.
NO_ROOM, UNREACHABLE, CANNOT_AGGREGATE, BAD_REQUEST = "no_room", "unreachable", "cannot_aggregate", "bad_request"


class PoolRefused(RuntimeError):
    """No slots for the job; `reason` says why (NO_ROOM, UNREACHABLE, CANNOT_AGGREGATE, BAD_REQUEST)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Lease:
    """Slots the pool granted a job; they stay the job's while this connection is open."""
    job_id: int
    switch: str
    slot_base: int
    num_slots: int
    _conn: socket.socket | None = field(default=None, repr=False)

    def release(self) -> None:
        """Give the slots back (closing the connection does it too, so a dead job loses them)."""
        if self._conn is None:
            return
        try:
            _exchange(self._conn, {"op": "release", "job_id": self.job_id})
        except PoolRefused as e:
            log.warning("pool: releasing job %d: %s", self.job_id, e)
        finally:
            self._conn.close()
            self._conn = None


def request_slots(address: str, workers: list[tuple[str, int]], slots: int, timeout: float = 10.0) -> Lease:
    """A lease of `slots` slots for a job whose worker w receives results at workers[w] (ip, udp_port)."""
    conn = connect(address, timeout)
    try:
        reply = _exchange(conn, {"op": "request", "workers": [list(w) for w in workers], "slots": slots})
        return Lease(int(reply["job_id"]), str(reply["switch"]), int(reply["slot_base"]),
                     int(reply["num_slots"]), conn)
    except BaseException:
        conn.close()
        raise


def connect(address: str, timeout: float) -> socket.socket:
    """A connection to the service at "HOST:PORT" or "unix:PATH"; PoolRefused(UNREACHABLE) if none."""
    try:
        if address.startswith("unix:"):
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.settimeout(timeout)
                conn.connect(address[len("unix:"):])
            except OSError:
                conn.close()
                raise
        else:
            host, _, port = address.rpartition(":")
            conn = socket.create_connection((host, int(port)), timeout=timeout)
    except ValueError:
        raise PoolRefused(BAD_REQUEST, f"pool address {address!r} is not HOST:PORT or unix:PATH") from None
    except OSError as e:
        raise PoolRefused(UNREACHABLE, f"no pool service at {address}: {e.strerror or e}") from None
    return conn


def _exchange(conn: socket.socket, message: dict[str, Any]) -> dict[str, Any]:
    try:
        conn.sendall((json.dumps(message) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                raise PoolRefused(UNREACHABLE, "the pool service closed the connection")
            data += chunk
    except OSError as e:
        raise PoolRefused(UNREACHABLE, f"the pool service stopped answering: {e.strerror or e}") from None
    try:
        reply = json.loads(data)
    except json.JSONDecodeError:
        raise PoolRefused(BAD_REQUEST, f"the pool service answered no JSON: {data[:100]!r}") from None
    if not reply.get("ok"):
        raise PoolRefused(str(reply.get("reason", BAD_REQUEST)), str(reply.get("error", reply)))
    return reply
