"""One P4Runtime session with one switch: connection, arbitration, pipeline, Write and Read.
Each Switch owns a p4runtime-shell P4RuntimeClient and Context rather than the shell's
module globals, so one process drives many switches (README.md says why).
"""
from __future__ import annotations

import hashlib
import logging
import queue
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import grpc
from google.protobuf import text_format
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2
from p4runtime_sh.context import Context
from p4runtime_sh.p4runtime import P4RuntimeClient

from .errors import ControllerError, SwitchUnavailable
from .registers import Registers, register_access

log = logging.getLogger(__name__)

_CONFIG = p4runtime_pb2.SetForwardingPipelineConfigRequest
_GET_CONFIG = p4runtime_pb2.GetForwardingPipelineConfigRequest


@dataclass(frozen=True)
class Pipeline:
    """A compiled program: its P4Info and the target's device config (p4sim or BMv2 JSON)."""
    name: str
    p4info: p4info_pb2.P4Info
    device_config: bytes

    @classmethod
    def load(cls, p4info_path: str | Path, device_config_path: str | Path) -> Pipeline:
        p4info = p4info_pb2.P4Info()
        try:
            text_format.Merge(Path(p4info_path).read_text(), p4info, allow_unknown_field=True)
            config = Path(device_config_path).read_bytes()
        except OSError as e:
            raise ControllerError(f"cannot read the compiled program: {e.filename}: {e.strerror} "
                                  "(compile it first, e.g. python -m p4sim compile "
                                  "p4src/allreduce.p4 -o build/)") from None
        except text_format.ParseError as e:
            raise ControllerError(f"{p4info_path}: not a P4Info text file: {e}") from None
        return cls(Path(device_config_path).stem, p4info, config)

    @classmethod
    def from_build(cls, build_dir: str | Path, program: str) -> Pipeline:
        """The files p4c (and `p4sim compile`) write: DIR/PROG.p4info.txt and DIR/PROG.json."""
        d = Path(build_dir)
        return cls.load(d / f"{program}.p4info.txt", d / f"{program}.json")

    @property
    def cookie(self) -> int:
        """Identifies this exact pipeline on the device, so a restarted controller can tell
        whether the running pipeline is already ours."""
        digest = hashlib.sha256(self.p4info.SerializeToString(deterministic=True) + self.device_config)
        return int.from_bytes(digest.digest()[:8], "big")


def default_election_id() -> tuple[int, int]:
    """Milliseconds since the epoch: a controller started later wins arbitration."""
    return (0, int(time.time() * 1000))


# The lowest election id: a session that only reads stays a backup, so it never takes
# over from a controller that is writing (P4Runtime lets backups read).
READ_ONLY_ELECTION_ID = (0, 1)


class Switch:
    """A P4Runtime session with one device; a context manager that connects and closes.

    Names are resolved through `context` (the device's P4Info, or the one just pushed).
    `registers` reaches the registers the way the target allows (see registers.py).
    """

    def __init__(self, name: str, grpc_addr: str, device_id: int = 0,
                 election_id: tuple[int, int] | None = None, target: str = "p4sim",
                 thrift_port: int | None = None) -> None:
        self.name = name
        self.grpc_addr = grpc_addr
        self.device_id = device_id
        self.election_id = election_id or default_election_id()
        self.is_primary = False
        # BMv2 serves Thrift where it serves P4Runtime (p4sim: on loopback).
        self.registers: Registers = register_access(target, self, thrift_port,
                                                          grpc_addr.rpartition(":")[0] or "127.0.0.1")
        self._client: _Client | None = None
        self._context: Context | None = None

    def __enter__(self) -> Switch:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Switch({self.name!r}, {self.grpc_addr}, device_id={self.device_id})"

    def connect(self, timeout: float = 10.0) -> None:
        """Open the channel and the StreamChannel and run arbitration with our election id."""
        probe = grpc.insecure_channel(self.grpc_addr)
        try:
            grpc.channel_ready_future(probe).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise SwitchUnavailable(f"{self.name}: no P4Runtime server at {self.grpc_addr} "
                                    f"(waited {timeout:g} s)") from None
        finally:
            probe.close()
        client = _Client(self.device_id, self.grpc_addr, self.election_id, timeout)
        if client.arbitration is None:
            _close_client(client)
            raise SwitchUnavailable(f"{self.name}: {self.grpc_addr} did not answer arbitration "
                                    f"for device {self.device_id}")
        self._client = client
        self._note_arbitration(client.arbitration)
        pipeline = self.device_pipeline()
        self._context = _context_for(pipeline.p4info) if pipeline else None

    def close(self) -> None:
        if self._client is not None:
            _close_client(self._client)
            self._client = None
        self.is_primary = False

    @property
    def connected(self) -> bool:
        """False once the StreamChannel has ended (switch gone, restarted, or closed)."""
        return self._client is not None and self._client.stream_recv_thread.is_alive()

    def poll(self) -> bool:
        """Take in arbitration updates (another controller may have become primary);
        return whether the session is still up."""
        if self._client is None:
            return False
        while True:
            try:
                msg = self._client.stream_in_q["arbitration"].get_nowait()
            except queue.Empty:
                return self.connected
            if msg is not None:
                self._note_arbitration(msg.arbitration)

    @property
    def context(self) -> Context:
        if self._context is None:
            raise ControllerError(f"{self.name} has no pipeline yet: run setup first")
        return self._context

    def device_pipeline(self) -> p4runtime_pb2.ForwardingPipelineConfig | None:
        """The pipeline the device runs (P4Info and cookie), or None before the first push."""
        req = _GET_CONFIG(device_id=self.device_id, response_type=_GET_CONFIG.P4INFO_AND_COOKIE)
        try:
            config = self._require_client().stub.GetForwardingPipelineConfig(req).config
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                return None
            raise self._rpc_error("GetForwardingPipelineConfig", e) from None
        if not config.p4info.tables and not config.p4info.actions:
            return None
        return config

    def set_pipeline(self, pipeline: Pipeline) -> None:
        """VERIFY_AND_COMMIT `pipeline`: the device drops all its state and runs it."""
        self._require_primary("set the pipeline")
        req = _CONFIG(device_id=self.device_id, action=_CONFIG.VERIFY_AND_COMMIT)
        req.election_id.high, req.election_id.low = self.election_id
        req.config.p4info.CopyFrom(pipeline.p4info)
        req.config.p4_device_config = pipeline.device_config
        req.config.cookie.cookie = pipeline.cookie
        try:
            self._require_client().stub.SetForwardingPipelineConfig(req)
        except grpc.RpcError as e:
            raise self._rpc_error("SetForwardingPipelineConfig", e) from None
        self._context = _context_for(pipeline.p4info)

    def write(self, updates: Sequence[p4runtime_pb2.Update]) -> None:
        """Send one Write batch; a refused update raises with the switch's own message."""
        if not updates:
            return
        self._require_primary("write")
        req = p4runtime_pb2.WriteRequest(device_id=self.device_id, updates=list(updates))
        req.election_id.high, req.election_id.low = self.election_id
        try:
            self._require_client().stub.Write(req)
        except grpc.RpcError as e:
            errors = _update_errors(e, len(updates))
            if not errors:
                raise self._rpc_error("Write", e) from None
            lines = [f"\n  * {code}: {message}" if i is None else
                     f"\n  * update {i} ({self._describe(updates[i])}): {code}: {message}"
                     for i, code, message in errors]
            raise ControllerError(f"{self.name} refused the write:" + "".join(lines)) from None

    def read(self, entities: Iterable[p4runtime_pb2.Entity]) -> list[p4runtime_pb2.Entity]:
        """Every entity the switch returns for the given (possibly wildcard) entities."""
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id, entities=list(entities))
        try:
            return [e for rep in self._require_client().stub.Read(req) for e in rep.entities]
        except grpc.RpcError as e:
            raise self._rpc_error("Read", e) from None

    def _require_client(self) -> _Client:
        if self._client is None:
            raise ControllerError(f"{self.name} is not connected")
        return self._client

    def _require_primary(self, what: str) -> None:
        if not self.is_primary:
            raise ControllerError(f"{self.name}: cannot {what}: another controller with a higher "
                                  f"election id is primary (ours is {self.election_id})")

    def _note_arbitration(self, arbitration: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        primary = arbitration.status.code == code_pb2.OK
        if primary != self.is_primary:
            log.info("%s: %s controller (election id %s)", self.name,
                     "primary" if primary else "backup", self.election_id)
        self.is_primary = primary

    def _describe(self, update: p4runtime_pb2.Update) -> str:
        """What a refused update was, in the program's names, so the user can find it."""
        kind = update.entity.WhichOneof("entity")
        what = kind.replace("_", " ")
        if kind == "table_entry" and self._context is not None:
            what = f"entry of {self._context.get_name_from_id(update.entity.table_entry.table_id)}"
        return f"{p4runtime_pb2.Update.Type.Name(update.type)} {what}"

    def _rpc_error(self, rpc: str, e: grpc.RpcError) -> ControllerError:
        if e.code() == grpc.StatusCode.UNAVAILABLE:
            return SwitchUnavailable(f"{self.name}: {rpc}: switch unavailable: {e.details()}")
        return ControllerError(f"{self.name}: {rpc} failed: {e.code().name}: {e.details()}")


class _Client(P4RuntimeClient):
    """p4runtime-shell's client, with a handshake that reports instead of exiting the process."""

    def __init__(self, device_id: int, grpc_addr: str, election_id: tuple[int, int],
                 timeout: float) -> None:
        self.arbitration: p4runtime_pb2.MasterArbitrationUpdate | None = None
        self._timeout = timeout
        super().__init__(device_id, grpc_addr, election_id)

    def handshake(self) -> None:
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.high, req.arbitration.election_id.low = self.election_id
        self.stream_out_q.put(req)
        rep = self.get_stream_packet("arbitration", timeout=self._timeout)
        self.arbitration = rep.arbitration if rep is not None else None


def _close_client(client: _Client, timeout: float = 2.0) -> None:
    """End the stream (half-close, then cancel if the server keeps it open) and the channel."""
    client.stream_out_q.put(None)
    client.stream_recv_thread.join(timeout)
    if client.stream_recv_thread.is_alive():
        client.stream.cancel()
        client.stream_recv_thread.join()
    client.channel.close()


def _context_for(p4info: p4info_pb2.P4Info) -> Context:
    ctx = Context()
    ctx.set_p4info(p4info)
    return ctx


def _update_errors(e: grpc.RpcError, n_updates: int) -> list[tuple[int | None, str, str]]:
    """The per-update errors of a refused Write batch, (index, code, message), from the
    status details P4Runtime servers attach: one per update (PI/BMv2), or only the failed
    ones (p4sim; then the index is in the message, not known here). p4runtime-shell
    0.0.6's own parser (P4RuntimeErrorIterator) never ends on an OK detail."""
    status = status_pb2.Status()
    for key, value in e.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status.ParseFromString(value)
    one_per_update = len(status.details) == n_updates
    errors: list[tuple[int | None, str, str]] = []
    for i, detail in enumerate(status.details):
        err = p4runtime_pb2.Error()
        if detail.Unpack(err) and err.canonical_code != code_pb2.OK:
            errors.append((i if one_per_update else None, code_pb2.Code.Name(err.canonical_code),
                           err.message))
    return errors
