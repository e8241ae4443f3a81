"""Table entries, multicast groups and clone sessions by name, as the P4 tutorials'
runtime JSON writes them, and their translation to and from P4Runtime messages
through p4runtime-shell's name context (P4Info names, never raw ids).
"""
from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2
from p4runtime_sh.context import Context, P4Type

from .errors import ControllerError

Value = int | str
"""A field value: an int, or a string p4runtime-shell parses ("10.0.0.1", "08:00:00:00:00:01", "0x1f")."""


@dataclass(frozen=True)
class TableEntry:
    """One table entry as the tutorials' runtime JSON writes it.

    `match` maps a key name to a value for exact/optional keys, `[value, prefix_len]`
    for lpm, `[value, mask]` for ternary and `[low, high]` for range; a key left out
    is a don't-care. With `default_action` the entry sets the table's default action.
    """
    table: str
    action_name: str
    action_params: dict[str, Value] = field(default_factory=dict)
    match: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    default_action: bool = False

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TableEntry:
        try:
            return cls(table=obj["table"], action_name=obj["action_name"],
                       action_params=dict(obj.get("action_params", {})),
                       match=dict(obj.get("match", {})), priority=int(obj.get("priority", 0)),
                       default_action=bool(obj.get("default_action", False)))
        except (KeyError, TypeError, ValueError) as e:
            raise ControllerError(f"bad table entry {obj!r}: {e}") from None

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"table": self.table}
        if self.default_action:
            obj["default_action"] = True
        else:
            obj["match"] = self.match
        if self.priority:
            obj["priority"] = self.priority
        obj["action_name"] = self.action_name
        obj["action_params"] = self.action_params
        return obj


@dataclass(frozen=True)
class Replica:
    egress_port: int
    instance: int = 0


@dataclass(frozen=True)
class MulticastGroup:
    multicast_group_id: int
    replicas: tuple[Replica, ...]

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> MulticastGroup:
        try:
            return cls(int(obj["multicast_group_id"]), _replicas_from_json(obj["replicas"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ControllerError(f"bad multicast group entry {obj!r}: {e}") from None

    def to_json(self) -> dict[str, Any]:
        return {"multicast_group_id": self.multicast_group_id,
                "replicas": [_replica_json(r) for r in self.replicas]}


@dataclass(frozen=True)
class CloneSession:
    clone_session_id: int
    replicas: tuple[Replica, ...]
    class_of_service: int = 0
    packet_length_bytes: int = 0

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CloneSession:
        try:
            return cls(int(obj["clone_session_id"]), _replicas_from_json(obj["replicas"]),
                       int(obj.get("class_of_service", 0)), int(obj.get("packet_length_bytes", 0)))
        except (KeyError, TypeError, ValueError) as e:
            raise ControllerError(f"bad clone session entry {obj!r}: {e}") from None

    def to_json(self) -> dict[str, Any]:
        return {"clone_session_id": self.clone_session_id,
                "replicas": [_replica_json(r) for r in self.replicas],
                "class_of_service": self.class_of_service,
                "packet_length_bytes": self.packet_length_bytes}


@dataclass(frozen=True)
class RuntimeConfig:
    """The contents of one tutorials-style `sN-runtime.json`."""
    table_entries: tuple[TableEntry, ...] = ()
    multicast_group_entries: tuple[MulticastGroup, ...] = ()
    clone_session_entries: tuple[CloneSession, ...] = ()

    @classmethod
    def load(cls, path: str | Path) -> RuntimeConfig:
        try:
            obj = json.loads(Path(path).read_text())
        except OSError as e:
            raise ControllerError(f"cannot read runtime config {path}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise ControllerError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
        if not isinstance(obj, dict):
            raise ControllerError(f"{path}: expected a JSON object with table_entries")
        return cls(tuple(TableEntry.from_json(e) for e in obj.get("table_entries", [])),
                   tuple(MulticastGroup.from_json(e) for e in obj.get("multicast_group_entries", [])),
                   tuple(CloneSession.from_json(e) for e in obj.get("clone_session_entries", [])))

    def to_json(self) -> dict[str, Any]:
        return {"table_entries": [e.to_json() for e in self.table_entries],
                "multicast_group_entries": [g.to_json() for g in self.multicast_group_entries],
                "clone_session_entries": [s.to_json() for s in self.clone_session_entries]}


def parse_value(value: Value, bitwidth: int) -> int:
    """A field value as an int; width is left for the switch to check, as P4Runtime says."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ControllerError(f"bad value {value!r}: expected an int or a string")
    if isinstance(value, int):
        if value < 0:
            raise ControllerError(f"bad value {value}: negative")
        return value
    text = value.strip()
    try:
        if bitwidth == 32 and "." in text:
            return int(ipaddress.IPv4Address(text))
        if bitwidth == 128 and ":" in text:
            return int(ipaddress.IPv6Address(text))
        if bitwidth == 48 and ":" in text:
            octets = text.split(":")
            if len(octets) != 6:
                raise ValueError
            return int.from_bytes(bytes(int(o, 16) for o in octets), "big")
        return int(text, 0)
    except ValueError:
        raise ControllerError(f"bad value {value!r} for a {bitwidth}-bit field") from None


def to_bytes(value: int) -> bytes:
    """P4Runtime's canonical bytestring: no leading zero bytes, at least one byte."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def from_bytes(data: bytes) -> int:
    return int.from_bytes(data, "big")


def table_entry_to_proto(ctx: Context, entry: TableEntry) -> p4runtime_pb2.TableEntry:
    table = lookup(ctx, P4Type.table, entry.table)
    msg = p4runtime_pb2.TableEntry(table_id=table.preamble.id, priority=entry.priority,
                                   is_default_action=entry.default_action)
    if entry.default_action and entry.match:
        raise ControllerError(f"default entry of {entry.table} must not have a match")
    fields = {mf.name: mf for mf in table.match_fields}
    for name, value in entry.match.items():
        if name not in fields:
            raise ControllerError(f"table {entry.table} has no key {name!r} "
                                  f"(keys: {', '.join(fields) or 'none'})")
        msg.match.append(_field_match(fields[name], value))
    action = lookup(ctx, P4Type.action, entry.action_name)
    if action.preamble.id not in {a.id for a in table.action_refs}:
        raise ControllerError(f"action {action.preamble.name} is not an action of table {entry.table}")
    msg.action.action.action_id = action.preamble.id
    params = {p.name: p for p in action.params}
    for name in params.keys() - entry.action_params.keys():
        raise ControllerError(f"action {action.preamble.name} needs parameter {name!r}")
    for name, value in entry.action_params.items():
        if name not in params:
            raise ControllerError(f"action {action.preamble.name} has no parameter {name!r} "
                                  f"(parameters: {', '.join(params) or 'none'})")
        msg.action.action.params.add(param_id=params[name].id,
                                     value=to_bytes(parse_value(value, params[name].bitwidth)))
    return msg


def table_entry_from_proto(ctx: Context, msg: p4runtime_pb2.TableEntry) -> TableEntry:
    """The entry as the switch reports it, values as ints (direct counters left out)."""
    table = ctx.get_obj_by_id(msg.table_id)
    fields = {mf.id: mf for mf in table.match_fields}
    match: dict[str, Any] = {}
    for m in msg.match:
        kind = m.WhichOneof("field_match_type")
        f = getattr(m, kind)
        name = fields[m.field_id].name
        if kind in ("exact", "optional"):
            match[name] = from_bytes(f.value)
        elif kind == "lpm":
            match[name] = [from_bytes(f.value), f.prefix_len]
        elif kind == "ternary":
            match[name] = [from_bytes(f.value), from_bytes(f.mask)]
        else:
            match[name] = [from_bytes(f.low), from_bytes(f.high)]
    action = ctx.get_obj_by_id(msg.action.action.action_id)
    param_names = {p.id: p.name for p in action.params}
    params = {param_names[p.param_id]: from_bytes(p.value) for p in msg.action.action.params}
    return TableEntry(table=table.preamble.name, action_name=action.preamble.name,
                      action_params=params, match=match, priority=msg.priority,
                      default_action=msg.is_default_action)


def normalized(ctx: Context, entry: TableEntry) -> TableEntry:
    """The entry with full names and int values, as a read-back reports it, to compare."""
    return table_entry_from_proto(ctx, table_entry_to_proto(ctx, entry))


def multicast_group_to_proto(group: MulticastGroup) -> p4runtime_pb2.PacketReplicationEngineEntry:
    msg = p4runtime_pb2.PacketReplicationEngineEntry()
    msg.multicast_group_entry.multicast_group_id = group.multicast_group_id
    for r in group.replicas:
        msg.multicast_group_entry.replicas.add(egress_port=r.egress_port, instance=r.instance)
    return msg


def multicast_group_from_proto(msg: p4runtime_pb2.MulticastGroupEntry) -> MulticastGroup:
    return MulticastGroup(msg.multicast_group_id,
                          tuple(Replica(r.egress_port, r.instance) for r in msg.replicas))


def clone_session_to_proto(session: CloneSession) -> p4runtime_pb2.PacketReplicationEngineEntry:
    msg = p4runtime_pb2.PacketReplicationEngineEntry()
    s = msg.clone_session_entry
    s.session_id = session.clone_session_id
    s.class_of_service = session.class_of_service
    s.packet_length_bytes = session.packet_length_bytes
    for r in session.replicas:
        s.replicas.add(egress_port=r.egress_port, instance=r.instance)
    return msg


def clone_session_from_proto(msg: p4runtime_pb2.CloneSessionEntry) -> CloneSession:
    return CloneSession(msg.session_id, tuple(Replica(r.egress_port, r.instance) for r in msg.replicas),
                        msg.class_of_service, msg.packet_length_bytes)


def lookup(ctx: Context, kind: P4Type, name: str) -> Any:
    """The P4Info object of that kind by (a unique suffix of) its name."""
    obj = ctx.get_obj(kind, name)
    if obj is None:
        known = ", ".join(sorted(n for n, _ in ctx.get_objs(kind))) or "none"
        raise ControllerError(f"the program has no {kind.pretty_name} {name!r} (it has: {known})")
    return obj


def _field_match(mf: Any, value: Any) -> p4runtime_pb2.FieldMatch:
    kinds = p4info_pb2.MatchField.MatchType
    m = p4runtime_pb2.FieldMatch(field_id=mf.id)
    kind, width = mf.match_type, mf.bitwidth

    def pair() -> tuple[int, int]:
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise ControllerError(f"key {mf.name} ({kinds.Name(kind).lower()}) takes a pair, got {value!r}")
        return parse_value(value[0], width), parse_value(value[1], width)

    if kind == kinds.EXACT:
        m.exact.value = to_bytes(parse_value(value, width))
    elif kind == kinds.OPTIONAL:
        m.optional.value = to_bytes(parse_value(value, width))
    elif kind == kinds.LPM:
        v, plen = pair()
        m.lpm.value, m.lpm.prefix_len = to_bytes(v), plen
    elif kind == kinds.TERNARY:
        v, mask = pair()
        m.ternary.value, m.ternary.mask = to_bytes(v), to_bytes(mask)
    elif kind == kinds.RANGE:
        lo, hi = pair()
        m.range.low, m.range.high = to_bytes(lo), to_bytes(hi)
    else:
        raise ControllerError(f"key {mf.name}: match kind {kind} is not supported")
    return m


def _replicas_from_json(items: list[dict[str, Any]]) -> tuple[Replica, ...]:
    return tuple(Replica(int(r["egress_port"]), int(r.get("instance", 0))) for r in items)


def _replica_json(r: Replica) -> dict[str, int]:
    return {"egress_port": r.egress_port, "instance": r.instance}
