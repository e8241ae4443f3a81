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
from ..state import CloneSession, StateError, TableEntry
from .pipeline_config import Pipeline, RequestError, decode_value, encode_value

log = logging.getLogger(__name__)

API_VERSION = "1.4.1"
Code = grpc.StatusCode
ElectionId = tuple[int, int]
Outputs = list[tuple[int, bytes]]
SetPipeline = p4runtime_pb2.SetForwardingPipelineConfigRequest
GetPipeline = p4runtime_pb2.GetForwardingPipelineConfigRequest
Update = p4runtime_pb2.Update

_MATCH_KINDS = {p4info_pb2.MatchField.EXACT: "exact", p4info_pb2.MatchField.LPM: "lpm",
                p4info_pb2.MatchField.TERNARY: "ternary", p4info_pb2.MatchField.RANGE: "range",
                p4info_pb2.MatchField.OPTIONAL: "optional"}
IDLE_POLL_S = 0.1   # how often support_timeout tables are scanned for expired entries
READ_CHUNK = 10000  # entities per ReadResponse


@dataclass(eq=False)
class _Session:
    """One StreamChannel: its election id and the messages waiting to be sent on it."""
    out: queue.Queue = field(default_factory=queue.Queue)
    election_id: ElectionId | None = None


class _Entities:
    """A read's results as ReadResponses of at most READ_CHUNK entities each, so every
    message stays under the client's default 4 MB limit."""

    def __init__(self) -> None:
        self.responses = [p4runtime_pb2.ReadResponse()]

    def add(self) -> p4runtime_pb2.Entity:
        if len(self.responses[-1].entities) >= READ_CHUNK:
            self.responses.append(p4runtime_pb2.ReadResponse())
        return self.responses[-1].entities.add()


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
        self._digest_config: dict[int, p4runtime_pb2.DigestEntry.Config] = {}
        self._digest_lists = itertools.count(1)
        self._notified: dict[int, tuple[TableEntry, int]] = {}   # id(entry) -> (entry, last_hit_ns)
        self._stop = threading.Event()
        self._idle_thread = threading.Thread(target=self._idle_loop, name="p4sim-idle", daemon=True)
        self._idle_thread.start()
        if program is not None:     # the switch was started with it: serve it before any push
            self.pipeline = Pipeline.create(program, build_p4info(program.info), program.device_config())

    def close(self) -> None:
        """Stop the idle-timeout thread and end every stream."""
        self._stop.set()
        self._idle_thread.join()
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
            if digest_id not in self._digest_config:
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
                    self._write_one(pipe, update)
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
            out = _Entities()
            with self.switch.lock:
                for entity in request.entities:
                    self._read_one(pipe, entity, out)
        except RequestError as err:
            context.abort(err.code, err.message)
        yield from out.responses

    def StreamChannel(self, request_iterator, context):
        session = _Session()
        with self._lock:
            self._sessions.append(session)
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
            self._digest_config.clear()
            self._notified.clear()
        log.info("pipeline committed: %s (%d tables)", pipe.program.info.source_file, len(pipe.tables))

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
            out = _Entities()
            for q in queries:
                self._read_one(old, q, out)
            saved = [e for resp in out.responses for e in resp.entities if not e.table_entry.is_const]
            self._commit(new)
            for entity in saved:
                try:
                    self._write_one(new, Update(type=Update.INSERT, entity=entity))
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

    # --- write ----------------------------------------------------------------
    def _write_one(self, pipe: Pipeline, update) -> None:
        if update.type == Update.UNSPECIFIED:
            raise RequestError(Code.INVALID_ARGUMENT, "update type is UNSPECIFIED")
        entity = update.entity
        kind = entity.WhichOneof("entity")
        handler = {
            "table_entry": self._write_table_entry,
            "counter_entry": self._write_counter,
            "direct_counter_entry": self._write_direct_counter,
            "meter_entry": self._write_meter,
            "direct_meter_entry": self._write_direct_meter,
            "register_entry": self._write_register,
            "packet_replication_engine_entry": self._write_pre,
            "digest_entry": self._write_digest,
        }.get(kind)
        if handler is None:
            raise RequestError(Code.UNIMPLEMENTED, f"{kind or 'empty entity'} writes are not supported")
        try:
            handler(pipe, update.type, getattr(entity, kind))
        except StateError as err:
            raise RequestError.from_state(err) from None

    def _write_table_entry(self, pipe: Pipeline, op: int, msg) -> None:
        t = pipe.table(msg.table_id)
        table = self.switch.state.tables[t.preamble.name]
        if msg.is_default_action:
            self._write_default_entry(pipe, t, table, op, msg)
            return
        if t.is_const_table:
            raise RequestError(Code.PERMISSION_DENIED, f"table {t.preamble.name} has const entries")
        if msg.idle_timeout_ns and t.idle_timeout_behavior != p4info_pb2.Table.NOTIFY_CONTROL:
            raise RequestError(Code.INVALID_ARGUMENT,
                               f"table {t.preamble.name} does not support idle timeout")
        match = self._match(t, msg.match)
        if op == Update.DELETE:
            table.delete(match, msg.priority)
            return
        if not msg.HasField("action"):
            raise RequestError(Code.INVALID_ARGUMENT, "table entry without an action")
        action, args = self._action(pipe, t, msg.action, default=False)
        if msg.HasField("meter_config"):
            _check_meter_config(msg.meter_config)    # before anything changes
        entry = TableEntry(match, action, args, msg.priority, msg.idle_timeout_ns, msg.metadata)
        if op == Update.INSERT:
            self._set_direct_resources(entry, msg)
            table.insert(entry)
        else:
            table.modify(entry)
            self._set_direct_resources(table.get(match, msg.priority), msg)

    def _write_default_entry(self, pipe: Pipeline, t, table, op: int, msg) -> None:
        if op != Update.MODIFY:
            raise RequestError(Code.INVALID_ARGUMENT, "the default entry can only be modified")
        if len(msg.match) or msg.priority:
            raise RequestError(Code.INVALID_ARGUMENT, "a default entry has no match key or priority")
        if not msg.HasField("action"):
            table.reset_default()      # P4Runtime: MODIFY without action restores the P4 default
            return
        action, args = self._action(pipe, t, msg.action, default=True)
        table.set_default(action, args)

    @staticmethod
    def _set_direct_resources(entry: TableEntry, msg) -> None:
        if msg.HasField("counter_data"):
            entry.packets = msg.counter_data.packet_count
            entry.bytes = msg.counter_data.byte_count
        if msg.HasField("meter_config"):
            c = msg.meter_config
            entry.meter.set_config(c.cir, c.cburst, c.pir, c.pburst)

    def _match(self, t, fields) -> tuple:
        by_id = {m.id: (i, m) for i, m in enumerate(t.match_fields)}
        match: list = [None] * len(t.match_fields)
        for fm in fields:
            if fm.field_id not in by_id:
                raise RequestError(Code.INVALID_ARGUMENT,
                                   f"Unknown match field id {fm.field_id} for table {t.preamble.name}")
            i, info = by_id[fm.field_id]
            if match[i] is not None:
                raise RequestError(Code.INVALID_ARGUMENT, f"Duplicate match field {info.name}")
            kind = _MATCH_KINDS[info.match_type]
            given = fm.WhichOneof("field_match_type")
            if given != kind:
                raise RequestError(Code.INVALID_ARGUMENT,
                                   f"match field {info.name} is {kind}, request has {given}")
            value = getattr(fm, kind)
            w, name = info.bitwidth, info.name
            if kind in ("exact", "optional"):
                match[i] = (kind, decode_value(value.value, w, name))
            elif kind == "lpm":
                if value.prefix_len <= 0:
                    raise RequestError(Code.INVALID_ARGUMENT, f"prefix length of {name} must be above 0 "
                                       "(omit the field for a don't-care)")
                match[i] = ("lpm", decode_value(value.value, w, name), value.prefix_len)
            elif kind == "ternary":
                mask = decode_value(value.mask, w, name)
                if mask == 0:
                    raise RequestError(Code.INVALID_ARGUMENT, f"zero mask for {name} "
                                       "(omit the field for a don't-care)")
                match[i] = ("ternary", decode_value(value.value, w, name), mask)
            else:
                lo, hi = decode_value(value.low, w, name), decode_value(value.high, w, name)
                if (lo, hi) == (0, (1 << w) - 1):
                    raise RequestError(Code.INVALID_ARGUMENT, f"full range for {name} "
                                       "(omit the field for a don't-care)")
                match[i] = ("range", lo, hi)
        return tuple(match)

    def _action(self, pipe: Pipeline, t, table_action, default: bool) -> tuple[str, tuple[int, ...]]:
        kind = table_action.WhichOneof("type")
        if kind != "action":
            raise RequestError(Code.UNIMPLEMENTED, f"{kind} is not supported (no action profiles)")
        a = table_action.action
        info = pipe.action(a.action_id)
        refs = {r.id: r for r in t.action_refs}
        ref = refs.get(a.action_id)
        if ref is None:
            raise RequestError(Code.INVALID_ARGUMENT,
                               f"action {info.preamble.name} is not an action of table {t.preamble.name}")
        if default and ref.scope == p4info_pb2.ActionRef.TABLE_ONLY:
            raise RequestError(Code.INVALID_ARGUMENT, f"action {info.preamble.name} is @tableonly")
        if not default and ref.scope == p4info_pb2.ActionRef.DEFAULT_ONLY:
            raise RequestError(Code.INVALID_ARGUMENT, f"action {info.preamble.name} is @defaultonly")
        given = {}
        for p in a.params:
            given.setdefault(p.param_id, []).append(p.value)
        params = {p.id: p for p in info.params}
        for pid, values in given.items():
            if pid not in params:
                raise RequestError(Code.INVALID_ARGUMENT,
                                   f"Unknown param id {pid} for action {info.preamble.name}")
            if len(values) > 1:
                raise RequestError(Code.INVALID_ARGUMENT, f"Duplicate param {params[pid].name}")
        args = []
        for p in info.params:
            if p.id not in given:
                raise RequestError(Code.INVALID_ARGUMENT,
                                   f"Missing param {p.name} for action {info.preamble.name}")
            args.append(decode_value(given[p.id][0], p.bitwidth, f"{info.preamble.name}.{p.name}"))
        return info.preamble.name, tuple(args)

    def _write_counter(self, pipe: Pipeline, op: int, msg) -> None:
        if op != Update.MODIFY:
            raise RequestError(Code.INVALID_ARGUMENT, "counters can only be modified")
        c = self._get_by_id(pipe.counters, msg.counter_id, pipe.direct_counters, "CounterEntry")
        array = self.switch.state.counters[c.preamble.name]
        for i in self._indexes(msg, c.size, c.preamble.name):
            array.packets[i] = msg.data.packet_count
            array.bytes[i] = msg.data.byte_count

    def _write_direct_counter(self, pipe: Pipeline, op: int, msg) -> None:
        if op != Update.MODIFY:
            raise RequestError(Code.INVALID_ARGUMENT, "direct counters can only be modified")
        entry = self._direct_entry(pipe, msg.table_entry, p4info_pb2.P4Ids.DIRECT_COUNTER)
        entry.packets, entry.bytes = msg.data.packet_count, msg.data.byte_count

    def _write_meter(self, pipe: Pipeline, op: int, msg) -> None:
        if op == Update.INSERT:
            raise RequestError(Code.INVALID_ARGUMENT, "INSERT update type not supported for meters")
        m = self._get_by_id(pipe.meters, msg.meter_id, pipe.direct_meters, "MeterEntry")
        array = self.switch.state.meters[m.preamble.name]
        indexes = self._indexes(msg, m.size, m.preamble.name)
        c = msg.config
        _check_meter_config(c)      # before any index changes
        for i in indexes:
            if op == Update.DELETE or not msg.HasField("config"):
                array.meters[i].reset()
            else:
                array.set_config(i, c.cir, c.cburst, c.pir, c.pburst)

    def _write_direct_meter(self, pipe: Pipeline, op: int, msg) -> None:
        if op == Update.INSERT:
            raise RequestError(Code.INVALID_ARGUMENT, "INSERT update type not supported for meters")
        entry = self._direct_entry(pipe, msg.table_entry, p4info_pb2.P4Ids.DIRECT_METER)
        if op == Update.DELETE or not msg.HasField("config"):
            entry.meter.reset()
        else:
            c = msg.config
            entry.meter.set_config(c.cir, c.cburst, c.pir, c.pburst)

    def _write_register(self, pipe: Pipeline, op: int, msg) -> None:
        if op != Update.MODIFY:
            raise RequestError(Code.INVALID_ARGUMENT, "registers can only be modified")
        r = Pipeline._get(pipe.registers, msg.register_id)
        if msg.data.WhichOneof("data") != "bitstring":
            raise RequestError(Code.INVALID_ARGUMENT, "register data must be a bitstring")
        value = decode_value(msg.data.bitstring, r.type_spec.bitstring.bit.bitwidth, r.preamble.name)
        array = self.switch.state.registers[r.preamble.name]
        for i in self._indexes(msg, r.size, r.preamble.name):
            array.write(i, value)

    def _write_pre(self, pipe: Pipeline, op: int, msg) -> None:
        state = self.switch.state
        kind = msg.WhichOneof("type")
        if kind == "multicast_group_entry":
            g = msg.multicast_group_entry
            key, table, what = g.multicast_group_id, state.multicast_groups, "multicast group"
            value = self._replicas(g.replicas)
        elif kind == "clone_session_entry":
            c = msg.clone_session_entry
            key, table, what = c.session_id, state.clone_sessions, "clone session"
            value = CloneSession(self._replicas(c.replicas), c.class_of_service, c.packet_length_bytes)
        else:
            raise RequestError(Code.INVALID_ARGUMENT, "empty PacketReplicationEngineEntry")
        if key == 0:
            raise RequestError(Code.INVALID_ARGUMENT, f"{what} id 0 is reserved")
        exists = key in table
        if op == Update.INSERT and exists:
            raise RequestError(Code.ALREADY_EXISTS, f"{what} {key} already exists")
        if op != Update.INSERT and not exists:
            raise RequestError(Code.NOT_FOUND, f"{what} {key} does not exist")
        if op == Update.DELETE:
            del table[key]
        else:
            table[key] = value

    def _write_digest(self, pipe: Pipeline, op: int, msg) -> None:
        Pipeline._get(pipe.digests, msg.digest_id)
        with self._lock:
            exists = msg.digest_id in self._digest_config
            if op == Update.INSERT and exists:
                raise RequestError(Code.ALREADY_EXISTS, "digest already configured")
            if op != Update.INSERT and not exists:
                raise RequestError(Code.NOT_FOUND, "digest not configured")
            if op == Update.DELETE:
                del self._digest_config[msg.digest_id]
            else:
                self._digest_config[msg.digest_id] = msg.config

    @staticmethod
    def _replicas(replicas) -> list[tuple[int, int]]:
        out = []
        for r in replicas:
            port = decode_value(r.port, 32, "replica port") if r.port else r.egress_port
            if (port, r.instance) in out:
                raise RequestError(Code.INVALID_ARGUMENT, f"duplicate replica ({port}, {r.instance})")
            out.append((port, r.instance))
        return out

    @staticmethod
    def _get_by_id(by_id: dict, id_: int, direct: dict, entity: str):
        if id_ in direct:
            raise RequestError(Code.INVALID_ARGUMENT, f"Cannot use {entity} with a direct resource")
        return Pipeline._get(by_id, id_)

    @staticmethod
    def _indexes(msg, size: int, name: str) -> range:
        if not msg.HasField("index"):
            return range(size)
        i = msg.index.index
        if not 0 <= i < size:
            raise RequestError(Code.OUT_OF_RANGE, f"index {i} outside {name}[{size}]")
        return range(i, i + 1)

    def _direct_entry(self, pipe: Pipeline, msg, resource: int) -> TableEntry:
        t = pipe.table(msg.table_id)
        if not any(rid >> 24 == resource for rid in t.direct_resource_ids):
            what = "counters" if resource == p4info_pb2.P4Ids.DIRECT_COUNTER else "meters"
            raise RequestError(Code.INVALID_ARGUMENT, f"Table has no direct {what}")
        return self.switch.state.tables[t.preamble.name].get(self._match(t, msg.match), msg.priority)

    # --- read -----------------------------------------------------------------
    # Readers fill messages in place: pure-Python protobuf makes copies the main cost.
    def _read_one(self, pipe: Pipeline, entity, out: _Entities) -> None:
        kind = entity.WhichOneof("entity")
        reader = {
            "table_entry": self._read_table_entries,
            "counter_entry": self._read_counters,
            "direct_counter_entry": self._read_direct_counters,
            "meter_entry": self._read_meters,
            "direct_meter_entry": self._read_direct_meters,
            "register_entry": self._read_registers,
            "packet_replication_engine_entry": self._read_pre,
            "digest_entry": self._read_digests,
        }.get(kind)
        if reader is None:
            raise RequestError(Code.UNIMPLEMENTED, f"{kind or 'empty entity'} reads are not supported")
        try:
            reader(pipe, getattr(entity, kind), lambda: getattr(out.add(), kind))
        except StateError as err:
            raise RequestError.from_state(err) from None

    def _read_table_entries(self, pipe: Pipeline, msg, new: Callable) -> None:
        tables = [pipe.table(msg.table_id)] if msg.table_id else list(pipe.tables.values())
        for t in tables:
            table = self.switch.state.tables[t.preamble.name]
            if msg.is_default_action:
                out = new()
                out.table_id, out.is_default_action = t.preamble.id, True
                self._fill_action(pipe, out.action.action, table.default_action, table.default_args)
                continue
            if msg.table_id and len(msg.match):
                try:
                    entries = [table.get(self._match(t, msg.match), msg.priority)]
                except StateError as err:
                    if err.code != "NOT_FOUND":
                        raise
                    entries = []      # as PI: reading a missing entry returns nothing
            else:
                entries = table.entries()
            for entry in entries:
                self._fill_entry(new(), pipe, t, entry, msg)

    def _fill_entry(self, out, pipe: Pipeline, t, entry: TableEntry, query=None) -> None:
        out.table_id, out.priority = t.preamble.id, entry.priority
        out.idle_timeout_ns, out.metadata, out.is_const = entry.idle_timeout_ns, entry.metadata, t.is_const_table
        for f, m in zip(t.match_fields, entry.match):
            if m is None:
                continue
            fm = out.match.add(field_id=f.id)
            if m[0] in ("exact", "optional"):
                getattr(fm, m[0]).value = encode_value(m[1])
            elif m[0] == "lpm":
                fm.lpm.value, fm.lpm.prefix_len = encode_value(m[1]), m[2]
            elif m[0] == "ternary":
                fm.ternary.value, fm.ternary.mask = encode_value(m[1]), encode_value(m[2])
            else:
                fm.range.low, fm.range.high = encode_value(m[1]), encode_value(m[2])
        self._fill_action(pipe, out.action.action, entry.action, entry.args)
        if query is None:
            return
        kinds = {rid >> 24 for rid in t.direct_resource_ids}
        if query.HasField("counter_data") and p4info_pb2.P4Ids.DIRECT_COUNTER in kinds:
            out.counter_data.packet_count, out.counter_data.byte_count = entry.packets, entry.bytes
        if query.HasField("meter_config") and entry.meter.config is not None:
            self._fill_meter(out.meter_config, entry.meter.config)
        if query.HasField("time_since_last_hit"):
            out.time_since_last_hit.elapsed_ns = time.monotonic_ns() - entry.last_hit_ns

    @staticmethod
    def _fill_action(pipe: Pipeline, out, name: str, args: tuple[int, ...]) -> None:
        out.action_id = pipe.ids[f"action:{name}"]
        for p, v in zip(pipe.actions[out.action_id].params, args):
            out.params.add(param_id=p.id, value=encode_value(v))

    @staticmethod
    def _fill_meter(out, config: tuple[float, int, float, int]) -> None:
        # Rates set over Thrift may be fractional (per microsecond there); P4Runtime's are ints.
        out.cir, out.cburst, out.pir, out.pburst = (round(v) for v in config)

    def _read_counters(self, pipe: Pipeline, msg, new: Callable) -> None:
        counters = ([self._get_by_id(pipe.counters, msg.counter_id, pipe.direct_counters, "CounterEntry")]
                    if msg.counter_id else list(pipe.counters.values()))
        for c in counters:
            array = self.switch.state.counters[c.preamble.name]
            for i in self._indexes(msg, c.size, c.preamble.name):
                out = new()
                out.counter_id, out.index.index = c.preamble.id, i
                out.data.packet_count, out.data.byte_count = array.packets[i], array.bytes[i]

    def _read_direct_counters(self, pipe: Pipeline, msg, new: Callable) -> None:
        for t, entry in self._direct_entries(pipe, msg.table_entry, p4info_pb2.P4Ids.DIRECT_COUNTER):
            out = new()
            self._fill_entry(out.table_entry, pipe, t, entry)
            out.data.packet_count, out.data.byte_count = entry.packets, entry.bytes

    def _read_meters(self, pipe: Pipeline, msg, new: Callable) -> None:
        meters = ([self._get_by_id(pipe.meters, msg.meter_id, pipe.direct_meters, "MeterEntry")]
                  if msg.meter_id else list(pipe.meters.values()))
        for m in meters:
            array = self.switch.state.meters[m.preamble.name]
            for i in self._indexes(msg, m.size, m.preamble.name):
                out = new()
                out.meter_id, out.index.index = m.preamble.id, i
                if array.meters[i].config is not None:
                    self._fill_meter(out.config, array.meters[i].config)

    def _read_direct_meters(self, pipe: Pipeline, msg, new: Callable) -> None:
        for t, entry in self._direct_entries(pipe, msg.table_entry, p4info_pb2.P4Ids.DIRECT_METER):
            out = new()
            self._fill_entry(out.table_entry, pipe, t, entry)
            if entry.meter.config is not None:
                self._fill_meter(out.config, entry.meter.config)

    def _direct_entries(self, pipe: Pipeline, msg, resource: int) -> Iterator:
        """One entry (match given), all entries of a table, or of every table with the resource."""
        if msg.table_id and len(msg.match):
            yield pipe.table(msg.table_id), self._direct_entry(pipe, msg, resource)
            return
        tables = [pipe.table(msg.table_id)] if msg.table_id else list(pipe.tables.values())
        for t in tables:
            if any(rid >> 24 == resource for rid in t.direct_resource_ids):
                for entry in self.switch.state.tables[t.preamble.name].entries():
                    yield t, entry
            elif msg.table_id:
                raise RequestError(Code.INVALID_ARGUMENT, f"Table {t.preamble.name} has no such direct resource")

    def _read_registers(self, pipe: Pipeline, msg, new: Callable) -> None:
        registers = ([Pipeline._get(pipe.registers, msg.register_id)] if msg.register_id
                     else list(pipe.registers.values()))
        for r in registers:
            values = self.switch.state.registers[r.preamble.name].values
            for i in self._indexes(msg, r.size, r.preamble.name):
                out = new()
                out.register_id, out.index.index, out.data.bitstring = r.preamble.id, i, encode_value(values[i])

    def _read_pre(self, pipe: Pipeline, msg, new: Callable) -> None:
        state = self.switch.state
        kind = msg.WhichOneof("type")
        if kind == "multicast_group_entry":
            wanted = msg.multicast_group_entry.multicast_group_id
            for gid, replicas in sorted(state.multicast_groups.items()):
                if wanted in (0, gid):
                    out = new().multicast_group_entry
                    out.multicast_group_id = gid
                    self._fill_replicas(out.replicas, replicas)
        elif kind == "clone_session_entry":
            wanted = msg.clone_session_entry.session_id
            for sid, s in sorted(state.clone_sessions.items()):
                if wanted in (0, sid):
                    out = new().clone_session_entry
                    out.session_id, out.class_of_service = sid, s.class_of_service
                    out.packet_length_bytes = s.packet_length_bytes
                    self._fill_replicas(out.replicas, s.replicas)
        else:
            raise RequestError(Code.INVALID_ARGUMENT, "empty PacketReplicationEngineEntry")

    @staticmethod
    def _fill_replicas(out, replicas: Iterable[tuple[int, int]]) -> None:
        for port, rid in replicas:
            out.add(egress_port=port, instance=rid)

    def _read_digests(self, pipe: Pipeline, msg, new: Callable) -> None:
        with self._lock:
            configs = dict(self._digest_config)
        for digest_id, config in configs.items():
            if msg.digest_id in (0, digest_id):
                out = new()
                out.digest_id = digest_id
                out.config.CopyFrom(config)

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
                self._fill_entry(msg.idle_timeout_notification.table_entry.add(), pipe, t, entry)
        msg.idle_timeout_notification.timestamp = time.time_ns()
        primary.out.put(msg)


def _check_meter_config(config) -> None:
    if config.pir < config.cir:
        raise RequestError(Code.INVALID_ARGUMENT, "meter PIR must not be below CIR")


def serve(service: P4RuntimeService, address: str = "127.0.0.1:9559", workers: int = 16) -> tuple[grpc.Server, int]:
    """Start a gRPC server for `service` on `address` ("HOST:0" picks a free port).

    Returns the server and the port it listens on; raises OSError if it cannot bind.
    """
    limit = 64 << 20     # device configs and big batches above gRPC's 4 MB default
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="p4rt"),
                         options=[("grpc.max_receive_message_length", limit),
                                  ("grpc.max_send_message_length", limit)])
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(service, server)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as err:
        raise OSError(f"cannot listen on {address}: {err}") from None
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    server.start()
    log.info("P4Runtime server listening on %s", address.rsplit(":", 1)[0] + f":{port}")
    return server, port
