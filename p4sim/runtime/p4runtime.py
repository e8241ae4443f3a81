"""The P4Runtime gRPC service of one p4sim switch (one device id), over `Switch` and its
`state.SwitchState`: pipeline config, Write/Read, arbitration, packet I/O, digests and
idle-timeout notifications, with the status codes BMv2/PI report.
"""
from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import grpc
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from ..errors import P4Error
from ..p4info import build_p4info
from ..state import TableEntry
from .entities import EntityIO, ReadResponses
from .pipeline_config import Pipeline, RequestError, decode_value, encode_value

log = logging.getLogger(__name__)

API_VERSION = "1.4.1"
Code = grpc.StatusCode
ElectionId = tuple[int, int]
Outputs = list[tuple[int, bytes]]
SetPipeline = p4runtime_pb2.SetForwardingPipelineConfigRequest
GetPipeline = p4runtime_pb2.GetForwardingPipelineConfigRequest
Update = p4runtime_pb2.Update

IDLE_POLL_S = 0.1   # how often support_timeout tables are scanned for expired entries


@dataclass(eq=False)
class _Session:
    """One StreamChannel: its election id and the messages waiting to be sent on it."""
    out: queue.Queue = field(default_factory=queue.Queue)
    election_id: ElectionId | None = None


class _Abort:
    """Queued on a session to end its stream with an error status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        self.code, self.message = code, message


class P4RuntimeService(p4runtime_pb2_grpc.P4RuntimeServicer):
    """P4Runtime for one switch.

    `switch` is a p4sim.Switch (`.state`, `.lock`, `.load(program)`, `.process(port, data)`);
    `load_program(bytes)` turns a device config into a Program (raising P4Error);
    `transmit(port, data)` sends a packet out of a data-plane port. Packets the switch
    emits on `cpu_port` become PacketIn messages to the primary client. `program`, if
    given, is what the switch already runs; it is served with its generated P4Info.
    """

    def __init__(self, switch: Any, load_program: Callable[[bytes], Any], device_id: int = 0,
                 cpu_port: int | None = None,
                 transmit: Callable[[int, bytes], None] = lambda port, data: None,
                 program: Any = None) -> None:
        self.switch = switch
        self.load_program = load_program
        self.device_id = device_id
        self.cpu_port = cpu_port
        self.transmit = transmit
        self.pipeline: Pipeline | None = None
        self._saved: Pipeline | None = None       # VERIFY_AND_SAVE, waiting for COMMIT
        self._lock = threading.RLock()            # pipeline, sessions, digest config
        self._sessions: list[_Session] = []
        self.entities = EntityIO(switch, self._lock)
        self._digest_lists = itertools.count(1)
        self._notified: dict[int, tuple[TableEntry, int]] = {}   # id(entry) -> (entry, last_hit_ns)
        self._stop = threading.Event()
        self._idle_thread: threading.Thread | None = None     # runs while a stream is open
        if program is not None:     # the switch was started with it: serve it before any push
            self.pipeline = Pipeline.create(program, build_p4info(program.info), program.device_config())

    def close(self) -> None:
        """Stop the idle-timeout thread and end every stream."""
        self._stop.set()
        with self._lock:
            idle = self._idle_thread
        if idle is not None:
            idle.join()
        with self._lock:
            for s in self._sessions:
                s.out.put(None)

    # --- data-plane side ------------------------------------------------------
    def handle_outputs(self, outputs: Outputs) -> None:
        """Route what Switch.process emitted: cpu port -> PacketIn, others -> transmit."""
        for port, data in outputs:
            if port == self.cpu_port:
                self.packet_in(data)
            else:
                self.transmit(port, data)

    def packet_in(self, data: bytes) -> None:
        """Strip the packet_in controller header into metadata and send to the primary."""
        with self._lock:
            pipe = self.pipeline
            primary = self._primary()
        if pipe is None or primary is None:
            log.debug("packet to cpu port dropped: no pipeline or no primary client")
            return
        msg = p4runtime_pb2.StreamMessageResponse()
        payload = data
        if pipe.packet_in is not None:
            fields = pipe.packet_in.metadata
            nbytes = sum(m.bitwidth for m in fields) // 8
            header = int.from_bytes(data[:nbytes], "big")
            shift = nbytes * 8
            for m in fields:
                shift -= m.bitwidth
                value = (header >> shift) & ((1 << m.bitwidth) - 1)
                msg.packet.metadata.add(metadata_id=m.id, value=encode_value(value))
            payload = data[nbytes:]
        msg.packet.payload = payload
        primary.out.put(msg)

    def digest(self, name: str, values: tuple[int, ...]) -> None:
        """Switch's on_digest hook: one DigestList per digest, if the controller enabled it."""
        with self._lock:
            pipe = self.pipeline
            primary = self._primary()
            if pipe is None or primary is None:
                return
            digest_id = pipe.ids.get(f"digest:{name}")
            if digest_id not in self.entities.digest_config:
                return
        msg = p4runtime_pb2.StreamMessageResponse()
        msg.digest.digest_id = digest_id
        msg.digest.list_id = next(self._digest_lists)
        msg.digest.timestamp = time.time_ns()
        struct = msg.digest.data.add().struct
        for v in values:
            struct.members.add().bitstring = encode_value(v)
        primary.out.put(msg)

    # --- RPCs -----------------------------------------------------------------
    def Capabilities(self, request, context):
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    def SetForwardingPipelineConfig(self, request, context):
        try:
            self._check_device(request.device_id)
            self._check_primary(request.election_id, request.role)
            self._set_pipeline(request)
        except RequestError as err:
            context.abort(err.code, err.message)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request, context):
        try:
            self._check_device(request.device_id)
            pipe = self._require_pipeline()
        except RequestError as err:
            context.abort(err.code, err.message)
        config = p4runtime_pb2.ForwardingPipelineConfig()
        config.cookie.cookie = pipe.cookie
        kind = request.response_type
        if kind in (GetPipeline.ALL, GetPipeline.P4INFO_AND_COOKIE):
            config.p4info.CopyFrom(pipe.p4info)
        if kind in (GetPipeline.ALL, GetPipeline.DEVICE_CONFIG_AND_COOKIE):
            config.p4_device_config = pipe.device_config
        return p4runtime_pb2.GetForwardingPipelineConfigResponse(config=config)

    def Write(self, request, context):
        try:
            self._check_device(request.device_id)
            self._check_primary(request.election_id, request.role)
            pipe = self._require_pipeline()
            if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
                raise RequestError(Code.UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity is supported")
        except RequestError as err:
            context.abort(err.code, err.message)
        failed: list[p4runtime_pb2.Error] = []
        with self.switch.lock:
            for index, update in enumerate(request.updates):
                try:
                    self.entities.write_one(pipe, update)
                except RequestError as err:
                    log.info("write rejected: update %d: %s: %s", index, err.code.name, err.message)
                    failed.append(p4runtime_pb2.Error(canonical_code=err.code.value[0],
                                                      message=f"update {index}: {err.message}"))
        if failed:
            # UNKNOWN overall with p4.v1.Error details, as PI reports batches. Only failed
            # updates are listed (their index is in the message): p4runtime-shell 0.0.6
            # loops forever on an OK detail, so one-per-update would hang our controller.
            status = status_pb2.Status(code=code_pb2.UNKNOWN, message=failed[0].message)
            for e in failed:
                status.details.add().Pack(e)
            context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
            context.set_code(Code.UNKNOWN)
            context.set_details(f"{len(failed)} of {len(request.updates)} updates failed: {failed[0].message}")
        return p4runtime_pb2.WriteResponse()

    def Read(self, request, context):
        try:
            self._check_device(request.device_id)
            pipe = self._require_pipeline()
            out = ReadResponses()
            with self.switch.lock:
                for entity in request.entities:
                    self.entities.read_one(pipe, entity, out)
        except RequestError as err:
            context.abort(err.code, err.message)
        yield from out.responses

    def StreamChannel(self, request_iterator, context):
        session = _Session()
        with self._lock:
            self._sessions.append(session)
            if self._idle_thread is None:
                self._idle_thread = threading.Thread(target=self._idle_loop, name="p4sim-idle", daemon=True)
                self._idle_thread.start()
        context.add_callback(lambda: session.out.put(None))
        reader = threading.Thread(target=self._read_stream, args=(request_iterator, session),
                                  name="p4sim-stream", daemon=True)
        reader.start()
        try:
            while True:
                msg = session.out.get()
                if msg is None:
                    return
                if isinstance(msg, _Abort):
                    context.abort(msg.code, msg.message)
                yield msg
        finally:
            self._end_session(session)

    # --- pipeline -------------------------------------------------------------
    def _set_pipeline(self, request) -> None:
        action = request.action
        if action == SetPipeline.UNSPECIFIED:
            raise RequestError(Code.INVALID_ARGUMENT, "Invalid SetForwardingPipeline action")
        if action == SetPipeline.COMMIT:
            with self._lock:
                if self._saved is None:
                    raise RequestError(Code.FAILED_PRECONDITION, "COMMIT without a saved config")
                pipe, self._saved = self._saved, None
            self._commit(pipe)
            return
        pipe = self._verify(request.config)
        if action == SetPipeline.VERIFY:
            return
        if action == SetPipeline.VERIFY_AND_SAVE:
            with self._lock:
                self._saved = pipe
            return
        if action == SetPipeline.RECONCILE_AND_COMMIT and self.pipeline is not None:
            self._reconcile(pipe)
            return
        self._commit(pipe)

    def _verify(self, config) -> Pipeline:
        if not config.p4_device_config:
            raise RequestError(Code.INVALID_ARGUMENT, "empty p4_device_config")
        try:
            program = self.load_program(config.p4_device_config)
        except P4Error as err:
            raise RequestError(Code.INVALID_ARGUMENT, str(err)) from None
        return Pipeline.create(program, config.p4info, config.p4_device_config,
                               config.cookie.cookie)

    def _commit(self, pipe: Pipeline) -> None:
        # Always switch.lock before self._lock: packets (digests) take them in that order.
        with self.switch.lock, self._lock:
            self.switch.load(pipe.program)
            self.pipeline = pipe
            self.entities.digest_config.clear()
            self._notified.clear()
        log.info("pipeline committed: %s (%d tables), on the %s backend", pipe.program.info.source_file,
                 len(pipe.tables), getattr(self.switch, "backend", "python"))

    def _reconcile(self, new: Pipeline) -> None:
        """Keep the forwarding state across the change where the new P4Info allows it, as
        PI does: read everything, load, replay it as INSERTs into the new pipeline."""
        old = self.pipeline
        queries = [p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry())]
        for kind in ("multicast_group_entry", "clone_session_entry"):
            query = p4runtime_pb2.Entity()
            getattr(query.packet_replication_engine_entry, kind).SetInParent()
            queries.append(query)
        with self.switch.lock:
            out = ReadResponses()
            for q in queries:
                self.entities.read_one(old, q, out)
            saved = [e for resp in out.responses for e in resp.entities if not e.table_entry.is_const]
            self._commit(new)
            for entity in saved:
                try:
                    self.entities.write_one(new, Update(type=Update.INSERT, entity=entity))
                except RequestError as err:
                    raise RequestError(Code.UNKNOWN, f"Error when reconciling config: {err.message}") from None

    def _require_pipeline(self) -> Pipeline:
        pipe = self.pipeline
        if pipe is None:
            raise RequestError(Code.FAILED_PRECONDITION, "No forwarding pipeline config set for this device")
        return pipe

    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            raise RequestError(Code.NOT_FOUND, f"Invalid device id {device_id}")

    def _check_primary(self, election_id, role: str) -> None:
        if role:
            raise RequestError(Code.UNIMPLEMENTED, "only the default role is supported")
        with self._lock:
            primary = self._primary()
            if primary is None or primary.election_id != (election_id.high, election_id.low):
                raise RequestError(Code.PERMISSION_DENIED, "Not primary")

    # --- stream ---------------------------------------------------------------
    def _read_stream(self, requests: Iterator, session: _Session) -> None:
        try:
            for req in requests:
                kind = req.WhichOneof("update")
                if kind == "arbitration":
                    self._arbitrate(session, req.arbitration)
                elif kind == "packet":
                    self._packet_out(session, req.packet)
                elif kind == "digest_ack":
                    pass     # one digest per list, nothing to hold back
                else:
                    log.warning("ignoring stream message %s", kind)
        except grpc.RpcError:
            pass         # the client went away; the generator side cleans up
        except RequestError as err:
            session.out.put(_Abort(err.code, err.message))
            return
        session.out.put(None)

    def _arbitrate(self, session: _Session, update) -> None:
        if update.device_id != self.device_id:
            raise RequestError(Code.NOT_FOUND, f"Invalid device id {update.device_id}")
        if update.role.name:
            raise RequestError(Code.UNIMPLEMENTED, "only the default role is supported")
        eid = (update.election_id.high, update.election_id.low)
        with self._lock:
            if any(s.election_id == eid for s in self._sessions if s is not session):
                raise RequestError(Code.INVALID_ARGUMENT, "Election id already exists")
            before = self._primary()
            session.election_id = eid
            after = self._primary()
            self._announce(self._sessions if after is not before else [session])
        log.info("arbitration: election id %s is %s", eid, "primary" if after is session else "backup")

    def _announce(self, sessions: Iterable[_Session]) -> None:
        """Tell sessions who is primary: OK to the primary, ALREADY_EXISTS to backups (as PI)."""
        primary = self._primary()
        for s in sessions:
            if s.election_id is None:
                continue
            msg = p4runtime_pb2.StreamMessageResponse()
            a = msg.arbitration
            a.device_id = self.device_id
            if primary is not None:
                a.election_id.high, a.election_id.low = primary.election_id
            if s is primary:
                a.status.code, a.status.message = code_pb2.OK, "Is primary"
            else:
                a.status.code, a.status.message = code_pb2.ALREADY_EXISTS, "Is backup"
            s.out.put(msg)

    def _primary(self) -> _Session | None:
        elected = [s for s in self._sessions if s.election_id is not None]
        return max(elected, key=lambda s: s.election_id, default=None)

    def _end_session(self, session: _Session) -> None:
        with self._lock:
            was_primary = self._primary() is session
            self._sessions.remove(session)
            if was_primary:
                self._announce(self._sessions)

    def _packet_out(self, session: _Session, packet) -> None:
        with self._lock:
            pipe = self.pipeline
            is_primary = self._primary() is session
        error = None
        if not is_primary:
            error = (Code.PERMISSION_DENIED, "PacketOut from a client that is not primary")
        elif pipe is None:
            error = (Code.FAILED_PRECONDITION, "No forwarding pipeline config set for this device")
        elif self.cpu_port is None:
            error = (Code.FAILED_PRECONDITION, "no --cpu-port: PacketOut is disabled")
        if error is None:
            try:
                data = self._packet_out_header(pipe, packet.metadata) + packet.payload
            except RequestError as err:
                error = (err.code, err.message)
        if error is not None:
            msg = p4runtime_pb2.StreamMessageResponse()
            msg.error.canonical_code, msg.error.message = error[0].value[0], error[1]
            msg.error.packet_out.packet_out.CopyFrom(packet)
            session.out.put(msg)
            return
        self.handle_outputs(self.switch.process(self.cpu_port, data))

    @staticmethod
    def _packet_out_header(pipe: Pipeline, metadata) -> bytes:
        """The packet_out controller header built from the metadata (absent fields are 0)."""
        if pipe.packet_out is None:
            if len(metadata):
                raise RequestError(Code.INVALID_ARGUMENT, "the program has no packet_out header")
            return b""
        fields = {m.id: m for m in pipe.packet_out.metadata}
        values = {}
        for md in metadata:
            if md.metadata_id not in fields:
                raise RequestError(Code.INVALID_ARGUMENT, f"Unknown packet_out metadata id {md.metadata_id}")
            f = fields[md.metadata_id]
            values[f.id] = decode_value(md.value, f.bitwidth, f"packet_out.{f.name}")
        header, width = 0, 0
        for f in pipe.packet_out.metadata:
            header = (header << f.bitwidth) | values.get(f.id, 0)
            width += f.bitwidth
        return header.to_bytes((width + 7) // 8, "big")

    # --- idle timeout ---------------------------------------------------------
    def _idle_loop(self) -> None:
        while not self._stop.wait(IDLE_POLL_S):
            with self._lock:
                if not self._sessions:   # nobody to notify: end (not leak); the next stream restarts it
                    self._idle_thread = None
                    return
            try:
                self._notify_idle()
            except Exception:   # keep the thread alive; a bug here must not stop the server
                log.exception("idle-timeout scan failed")

    def _notify_idle(self) -> None:
        with self._lock:
            pipe, primary = self.pipeline, self._primary()
        if pipe is None or primary is None:
            return
        now = time.monotonic_ns()
        expired = []
        notified: dict[int, tuple[TableEntry, int]] = {}    # rebuilt: deleted entries drop out
        with self.switch.lock:
            for t in pipe.tables.values():
                if t.idle_timeout_behavior != p4info_pb2.Table.NOTIFY_CONTROL:
                    continue
                for entry in self.switch.state.tables[t.preamble.name].entries():
                    if not entry.idle_timeout_ns or now - entry.last_hit_ns < entry.idle_timeout_ns:
                        continue
                    notified[id(entry)] = (entry, entry.last_hit_ns)
                    seen = self._notified.get(id(entry))
                    if seen is not None and seen[0] is entry and seen[1] == entry.last_hit_ns:
                        continue   # already reported; again only after the entry is hit
                    expired.append((t, entry))
            self._notified = notified
            if not expired:
                return
            msg = p4runtime_pb2.StreamMessageResponse()
            for t, entry in expired:
                self.entities.fill_entry(msg.idle_timeout_notification.table_entry.add(), pipe, t, entry)
        msg.idle_timeout_notification.timestamp = time.time_ns()
        primary.out.put(msg)


def serve(service: P4RuntimeService, address: str = "127.0.0.1:9559", workers: int = 16) -> tuple[grpc.Server, int]:
    """Start a gRPC server for `service` on `address` ("HOST:0" picks a free port).

    Returns the server and the port it listens on; raises OSError if it cannot bind.
    """
    limit = 64 << 20     # device configs and big batches above gRPC's 4 MB default
    pool = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="p4rt")
    server = grpc.server(pool, options=[("grpc.max_receive_message_length", limit),
                                        ("grpc.max_send_message_length", limit)])
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(service, server)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as err:
        raise OSError(f"cannot listen on {address}: {err}") from None
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    server.start()
    # server.stop() leaves the pool's threads idling forever: end them with the server.
    threading.Thread(target=lambda: (server.wait_for_termination(), pool.shutdown(wait=False)),
                     name="p4rt-pool-end", daemon=True).start()
    log.info("P4Runtime server listening on %s", address.rsplit(":", 1)[0] + f":{port}")
    return server, port
