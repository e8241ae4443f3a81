"""P4Runtime entities in and out of a switch's `state.SwitchState`: Write updates (table and
default entries, counters, meters, registers, the replication engine, digest configs) checked
against the pipeline's P4Info, and Read answers filled in place. The service (p4runtime.py)
owns the RPCs, sessions and locking order; this module only translates.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, Iterator

import grpc
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from ..state import ActionProfileState, CloneSession, StateError, TableEntry, TableState
from .pipeline_config import Pipeline, RequestError, decode_value, encode_value

Code = grpc.StatusCode
Update = p4runtime_pb2.Update

_MATCH_KINDS = {p4info_pb2.MatchField.EXACT: "exact", p4info_pb2.MatchField.LPM: "lpm",
                p4info_pb2.MatchField.TERNARY: "ternary", p4info_pb2.MatchField.RANGE: "range",
                p4info_pb2.MatchField.OPTIONAL: "optional"}
READ_CHUNK = 10000  # entities per ReadResponse


class ReadResponses:
    """A read's results as ReadResponses of at most READ_CHUNK entities each, so every
    message stays under the client's default 4 MB limit."""

    def __init__(self) -> None:
        self.responses = [p4runtime_pb2.ReadResponse()]

    def add(self) -> p4runtime_pb2.Entity:
        if len(self.responses[-1].entities) >= READ_CHUNK:
            self.responses.append(p4runtime_pb2.ReadResponse())
        return self.responses[-1].entities.add()


class EntityIO:
    """Writes and reads of one switch's entities. `lock` guards `digest_config` (the service
    reads it when a digest arrives); the caller holds `switch.lock` around state changes."""

    def __init__(self, switch: Any, lock: threading.RLock) -> None:
        self.switch = switch
        self.lock = lock
        self.digest_config: dict[int, p4runtime_pb2.DigestEntry.Config] = {}

    # --- write ----------------------------------------------------------------
    def write_one(self, pipe: Pipeline, update) -> None:
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
            "action_profile_member": self._write_member,
            "action_profile_group": self._write_group,
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
        if t.implementation_id:
            entry = self._indirect_entry(pipe, t, msg.action)
        else:
            action, args = self._action(pipe, t, msg.action, default=False)
            entry = TableEntry(match, action, args)
        if msg.HasField("meter_config"):
            _check_meter_config(msg.meter_config)    # before anything changes
        entry.match, entry.priority = match, msg.priority
        entry.idle_timeout_ns, entry.metadata = msg.idle_timeout_ns, msg.metadata
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

    def _indirect_entry(self, pipe: Pipeline, t, table_action) -> TableEntry:
        """An entry of a table with an action profile: a member, or a selector's group."""
        kind = table_action.WhichOneof("type")
        if kind == "action_profile_member_id":
            entry = TableEntry((), "", member=table_action.action_profile_member_id)
        elif kind == "action_profile_group_id":
            entry = TableEntry((), "", group=table_action.action_profile_group_id)
        else:
            raise RequestError(Code.INVALID_ARGUMENT, f"table {t.preamble.name} has an action profile: "
                               "its entries take a member or group id, not an action")
        self._profile(pipe, t.implementation_id).check_entry(entry)
        return entry

    def _profile(self, pipe: Pipeline, profile_id: int) -> ActionProfileState:
        return self.switch.state.action_profiles[pipe.action_profile(profile_id).preamble.name]

    def _action(self, pipe: Pipeline, t, table_action, default: bool) -> tuple[str, tuple[int, ...]]:
        kind = table_action.WhichOneof("type")
        if kind != "action":
            raise RequestError(Code.INVALID_ARGUMENT if not t.implementation_id else Code.UNIMPLEMENTED,
                               f"{kind} for table {t.preamble.name}: " + (
                                   "it has no action profile" if not t.implementation_id
                                   else "default entries of indirect tables are not supported"))
        return self._action_call(pipe, t, table_action.action, default)

    def _action_call(self, pipe: Pipeline, t, a, default: bool) -> tuple[str, tuple[int, ...]]:
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

    def _write_member(self, pipe: Pipeline, op: int, msg) -> None:
        p = pipe.action_profile(msg.action_profile_id)
        profile = self._profile(pipe, msg.action_profile_id)
        if op == Update.DELETE:
            profile.delete_member(msg.member_id, self._tables_of(pipe, p))
            return
        # A member runs in each of the profile's tables: its action must be one of theirs.
        action, args = self._action_call(pipe, pipe.table(p.table_ids[0]), msg.action, default=False)
        if op == Update.INSERT:
            profile.insert_member(msg.member_id, action, args)
        else:
            profile.modify_member(msg.member_id, action, args)

    def _write_group(self, pipe: Pipeline, op: int, msg) -> None:
        p = pipe.action_profile(msg.action_profile_id)
        profile = self._profile(pipe, msg.action_profile_id)
        if op == Update.DELETE:
            profile.delete_group(msg.group_id, self._tables_of(pipe, p))
            return
        for m in msg.members:
            if m.weight < 1:
                raise RequestError(Code.INVALID_ARGUMENT, f"member {m.member_id} has weight {m.weight}: "
                                   "weights are positive")
            if m.weight > 1:
                raise RequestError(Code.UNIMPLEMENTED, "member weights above 1 are not supported")
        profile.write_group(msg.group_id, [m.member_id for m in msg.members], msg.max_size,
                            insert=op == Update.INSERT)

    def _tables_of(self, pipe: Pipeline, p) -> list[TableState]:
        return [self.switch.state.tables[pipe.table(t).preamble.name] for t in p.table_ids]

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
        with self.lock:
            exists = msg.digest_id in self.digest_config
            if op == Update.INSERT and exists:
                raise RequestError(Code.ALREADY_EXISTS, "digest already configured")
            if op != Update.INSERT and not exists:
                raise RequestError(Code.NOT_FOUND, "digest not configured")
            if op == Update.DELETE:
                del self.digest_config[msg.digest_id]
            else:
                self.digest_config[msg.digest_id] = msg.config

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
    def read_one(self, pipe: Pipeline, entity, out: ReadResponses) -> None:
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
            "action_profile_member": self._read_members,
            "action_profile_group": self._read_groups,
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
                self.fill_entry(new(), pipe, t, entry, msg)

    def fill_entry(self, out, pipe: Pipeline, t, entry: TableEntry, query=None) -> None:
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
        if entry.member is not None:
            out.action.action_profile_member_id = entry.member
        elif entry.group is not None:
            out.action.action_profile_group_id = entry.group
        else:
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

    def _read_profiles(self, pipe: Pipeline, profile_id: int) -> Iterator[tuple[int, ActionProfileState]]:
        """(id, state) of the profile asked for, or of every profile for id 0."""
        ids = [profile_id] if profile_id else list(pipe.action_profiles)
        for i in ids:
            yield i, self._profile(pipe, i)

    def _read_members(self, pipe: Pipeline, msg, new: Callable) -> None:
        for profile_id, profile in self._read_profiles(pipe, msg.action_profile_id):
            for member_id, m in sorted(profile.members.items()):
                if msg.member_id and member_id != msg.member_id:
                    continue
                out = new()
                out.action_profile_id, out.member_id = profile_id, member_id
                self._fill_action(pipe, out.action, m.action, m.args)

    def _read_groups(self, pipe: Pipeline, msg, new: Callable) -> None:
        for profile_id, profile in self._read_profiles(pipe, msg.action_profile_id):
            for group_id, g in sorted(profile.groups.items()):
                if msg.group_id and group_id != msg.group_id:
                    continue
                out = new()
                out.action_profile_id, out.group_id, out.max_size = profile_id, group_id, g.max_size
                for member_id in sorted(g.members):
                    out.members.add(member_id=member_id, weight=1)

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
            self.fill_entry(out.table_entry, pipe, t, entry)
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
            self.fill_entry(out.table_entry, pipe, t, entry)
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
        with self.lock:
            configs = dict(self.digest_config)
        for digest_id, config in configs.items():
            if msg.digest_id in (0, digest_id):
                out = new()
                out.digest_id = digest_id
                out.config.CopyFrom(config)


def _check_meter_config(config) -> None:
    if config.pir < config.cir:
        raise RequestError(Code.INVALID_ARGUMENT, "meter PIR must not be below CIR")
