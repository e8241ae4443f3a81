"""P4Info for a loaded program: ir.ProgramInfo -> p4.config.v1.P4Info, as p4c's
`--p4runtime-files` writes it (ids, aliases, annotations), plus the text-format writer.

The server validates P4Runtime requests against this message; controllers load the text.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from .ir import ActionProfileInfo, ActionRef, CounterInfo, MeterInfo, Param, ProgramInfo, SerializableEnum

P4Info = p4info_pb2.P4Info
Prefix = p4info_pb2.P4Ids

DEFAULT_TABLE_SIZE = 1024      # v1model's, when a table says no size (or size = 0)

# Represented elsewhere in the preamble (name, id, doc), so p4c does not repeat them.
_NOT_COPIED = {"name", "id", "brief", "description"}

_SCOPE_ANNOTATION = {"TABLE_ONLY": "@tableonly", "DEFAULT_ONLY": "@defaultonly"}


def build_p4info(info: ProgramInfo) -> P4Info:
    """The P4Info of a program, ids and aliases assigned as p4c assigns them."""
    ids = _assign_ids(info)
    aliases = _Aliases()
    for name in ids.names():
        aliases.add(name)

    p4info = P4Info()
    p4info.pkg_info.arch = "v1model"
    for t in info.tables.values():
        msg = p4info.tables.add()
        _preamble(msg.preamble, ids.get(Prefix.TABLE, t.name), t.name, aliases, t.annotations)
        for number, mf in enumerate(t.match_fields, start=1):
            m = msg.match_fields.add(id=number, name=mf.name, bitwidth=mf.bitwidth,
                                     match_type=p4info_pb2.MatchField.MatchType.Value(mf.match_kind.upper()))
            m.annotations.extend(_copied_annotations(mf.annotations))
            _add_enum(p4info, mf.enum)
        for ref in t.actions:
            r = msg.action_refs.add(id=ids.get(Prefix.ACTION, ref.name),
                                    scope=p4info_pb2.ActionRef.Scope.Value(ref.scope))
            r.annotations.extend(_action_ref_annotations(ref))
        if t.const_default_action:
            msg.const_default_action_id = ids.get(Prefix.ACTION, t.default_action)
        if t.direct_counter:
            msg.direct_resource_ids.append(ids.get(Prefix.DIRECT_COUNTER, t.direct_counter))
        if t.direct_meter:
            msg.direct_resource_ids.append(ids.get(Prefix.DIRECT_METER, t.direct_meter))
        if t.implementation:
            msg.implementation_id = ids.get(Prefix.ACTION_PROFILE, t.implementation)
        msg.size = t.size or DEFAULT_TABLE_SIZE    # p4c's getTableSize: `size = 0` is the default
        if t.support_timeout:
            msg.idle_timeout_behavior = p4info_pb2.Table.NOTIFY_CONTROL
        msg.is_const_table = t.entries_are_const
    for a in info.actions.values():
        msg = p4info.actions.add()
        _preamble(msg.preamble, ids.get(Prefix.ACTION, a.name), a.name, aliases, a.annotations)
        _params(msg.params, info.control_plane_params(a.name), p4info)
    for ap in _action_profiles(info):
        msg = p4info.action_profiles.add(with_selector=ap.with_selector, size=ap.size,
                                         max_group_size=ap.max_group_size)
        _preamble(msg.preamble, ids.get(Prefix.ACTION_PROFILE, ap.name), ap.name, aliases, ap.annotations)
        msg.table_ids.extend(ids.get(Prefix.TABLE, t) for t in ap.tables)
    for c in _counters(info):
        _resource(c, p4info.counters, p4info.direct_counters, Prefix.COUNTER, Prefix.DIRECT_COUNTER,
                  p4info_pb2.CounterSpec.Unit, ids, aliases)
    for m in _meters(info):
        _resource(m, p4info.meters, p4info.direct_meters, Prefix.METER, Prefix.DIRECT_METER,
                  p4info_pb2.MeterSpec.Unit, ids, aliases)
    for h in info.controller_headers.values():
        msg = p4info.controller_packet_metadata.add()
        # p4c hashes the header type's name, but names the object (and its alias) after
        # the annotation.
        _preamble(msg.preamble, ids.get(Prefix.CONTROLLER_HEADER, h.type_name), h.name, aliases,
                  (f'@controller_header("{h.name}")',), alias=h.name)
        _params(msg.metadata, h.fields, p4info)
    for v in info.value_sets.values():
        msg = p4info.value_sets.add(size=v.size)
        _preamble(msg.preamble, ids.get(Prefix.VALUE_SET, v.name), v.name, aliases, v.annotations)
        for number, mf in enumerate(v.match_fields, start=1):
            msg.match.add(id=number, name=mf.name, bitwidth=mf.bitwidth,
                          match_type=p4info_pb2.MatchField.MatchType.Value(mf.match_kind.upper()))
    for r in info.registers.values():
        msg = p4info.registers.add(size=r.size)
        _preamble(msg.preamble, ids.get(Prefix.REGISTER, r.name), r.name, aliases, r.annotations)
        msg.type_spec.bitstring.bit.bitwidth = r.bitwidth
    for d in info.digests.values():
        msg = p4info.digests.add()
        _preamble(msg.preamble, ids.get(Prefix.DIGEST, d.name), d.name, aliases, ())
        msg.type_spec.struct.name = d.name
        struct = p4info.type_info.structs[d.name]
        for f in d.fields:
            struct.members.add(name=f.name).type_spec.bitstring.bit.bitwidth = f.bitwidth
    # p4c writes `type_info {}` once anything could have needed a type: a table, an action
    # parameter, a register, a controller header, a digest or an extern function called by a control.
    if (info.tables or info.registers or info.controller_headers or info.digests
            or info.control_calls_extern_function
            or any(info.control_plane_params(a) for a in info.actions)):
        p4info.type_info.SetInParent()
    return p4info


def _action_profiles(info: ProgramInfo) -> list[ActionProfileInfo]:
    """p4c lists the action profiles that tables use, as it finds them through the tables."""
    return [ap for ap in info.action_profiles.values() if ap.tables]


def to_text(p4info: P4Info) -> str:
    """Protobuf text format, byte for byte what p4c 1.2.4.0 writes (no header comments)."""
    return text_format.MessageToString(p4info)


def jenkins_hash(name: str) -> int:
    """Bob Jenkins' one-at-a-time hash over the UTF-8 bytes, as p4c computes ids."""
    mask = 0xFFFFFFFF
    h = 0
    for byte in name.encode():
        h = (h + byte) & mask
        h = (h + (h << 10)) & mask
        h ^= h >> 6
    h = (h + (h << 3)) & mask
    h ^= h >> 11
    return (h + (h << 15)) & mask


def annotation_name(annotation: str) -> str:
    """`@name("x")` (or `name("x")`) -> `name`."""
    return annotation.lstrip("@").split("(", 1)[0].strip()


# --- helpers -----------------------------------------------------------------

@dataclass
class _Ids:
    """Ids per (resource type, name); p4c's symbol table."""
    by_symbol: dict[tuple[int, str], int] = field(default_factory=dict)

    def get(self, prefix: int, name: str) -> int:
        return self.by_symbol[(prefix, name)]

    def names(self) -> list[str]:
        return [name for _, name in self.by_symbol]


def _assign_ids(info: ProgramInfo) -> _Ids:
    """@id annotations first, then hashed names in sorted order with linear probing."""
    symbols: dict[tuple[int, str], tuple[str, ...]] = {}
    for t in info.tables.values():
        symbols[(Prefix.TABLE, t.name)] = t.annotations
    for a in info.actions.values():
        symbols[(Prefix.ACTION, a.name)] = a.annotations
    for c in _counters(info):
        kind = Prefix.COUNTER if c.direct_table is None else Prefix.DIRECT_COUNTER
        symbols[(kind, c.name)] = c.annotations
    for m in _meters(info):
        kind = Prefix.METER if m.direct_table is None else Prefix.DIRECT_METER
        symbols[(kind, m.name)] = m.annotations
    for ap in _action_profiles(info):
        symbols[(Prefix.ACTION_PROFILE, ap.name)] = ap.annotations
    for r in info.registers.values():
        symbols[(Prefix.REGISTER, r.name)] = r.annotations
    for v in info.value_sets.values():
        symbols[(Prefix.VALUE_SET, v.name)] = v.annotations
    for h in info.controller_headers.values():
        symbols[(Prefix.CONTROLLER_HEADER, h.type_name)] = ()
    for d in info.digests.values():
        symbols[(Prefix.DIGEST, d.name)] = ()

    ids = _Ids()
    taken: set[int] = set()
    for (prefix, name), notes in symbols.items():
        explicit = _explicit_id(prefix, name, notes)
        if explicit is not None:
            if explicit in taken:
                raise ValueError(f"@id {explicit:#x} is assigned to multiple declarations")
            taken.add(explicit)
            ids.by_symbol[(prefix, name)] = explicit
    for prefix in sorted({p for p, _ in symbols}):
        for name in sorted((n for p, n in symbols if p == prefix and (p, n) not in ids.by_symbol),
                           key=str.encode):
            value = jenkins_hash(name)
            candidate = (prefix << 24) | (value & 0xFFFFFF)
            while candidate in taken:
                value = (value + 1) & 0xFFFFFFFF
                candidate = (prefix << 24) | (value & 0xFFFFFF)
            taken.add(candidate)
            ids.by_symbol[(prefix, name)] = candidate
    return ids


def _explicit_id(prefix: int, name: str, annotations: tuple[str, ...]) -> int | None:
    for a in annotations:
        if annotation_name(a) != "id":
            continue
        text = a.split("(", 1)[1].rsplit(")", 1)[0].strip()
        try:
            value = int(text, 0)
        except ValueError:
            raise ValueError(f"{name}: @id should be an unsigned integer, got {text!r}") from None
        top = value >> 24
        if top not in (0, prefix):
            raise ValueError(f"{name}: @id {value:#x} has the wrong 8-bit prefix")
        return value | (prefix << 24)
    return None


class _Aliases:
    """Shortest unique dot-separated suffix of each name, as p4c computes aliases."""

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._count: dict[tuple[str, ...], int] = {}

    def add(self, name: str) -> None:
        if name in self._names:
            return
        self._names.add(name)
        parts = name.split(".")
        for n in range(1, len(parts) + 1):
            suffix = tuple(parts[-n:])
            self._count[suffix] = self._count.get(suffix, 0) + 1

    def of(self, name: str) -> str:
        parts = name.split(".")
        for n in range(1, len(parts) + 1):
            if self._count[tuple(parts[-n:])] < 2:
                return ".".join(parts[-n:])
        return name


def _preamble(preamble: p4info_pb2.Preamble, id_: int, name: str, aliases: _Aliases,
              annotations: tuple[str, ...], alias: str | None = None) -> None:
    preamble.id = id_
    preamble.name = name
    preamble.alias = alias or aliases.of(name)
    preamble.annotations.extend(_copied_annotations(annotations))
    docs = [a for a in annotations if annotation_name(a) in ("brief", "description")]
    for a in docs:
        text = a.split("(", 1)[1].rsplit(")", 1)[0].strip().strip('"')
        setattr(preamble.doc, annotation_name(a), text)


def _counters(info: ProgramInfo) -> list[CounterInfo]:
    return _in_p4info_order(info.counters, [t.direct_counter for t in info.tables.values()])


def _meters(info: ProgramInfo) -> list[MeterInfo]:
    return _in_p4info_order(info.meters, [t.direct_meter for t in info.tables.values()])


def _in_p4info_order(resources: dict, owned: list[str | None]) -> list:
    """Indirect counters or meters in declaration order, then the direct ones in the order of
    the tables that own them: p4c adds those with their table, and leaves out one no table owns."""
    return [r for r in resources.values() if r.direct_table is None] + [resources[n] for n in owned if n]


def _resource(r: CounterInfo | MeterInfo, indirect, direct, prefix: int, direct_prefix: int, units,
              ids: _Ids, aliases: _Aliases) -> None:
    """A counter or meter: an indexed array of its own, or bound to a table entry by entry."""
    if r.direct_table is None:
        msg = indirect.add(size=r.size)
        id_ = ids.get(prefix, r.name)
    else:
        msg = direct.add(direct_table_id=ids.get(Prefix.TABLE, r.direct_table))
        id_ = ids.get(direct_prefix, r.name)
    _preamble(msg.preamble, id_, r.name, aliases, r.annotations)
    msg.spec.unit = units.Value(r.unit)


def _copied_annotations(annotations: tuple[str, ...]) -> list[str]:
    return ["@" + a.lstrip("@") for a in annotations if annotation_name(a) not in _NOT_COPIED]


def _action_ref_annotations(ref: ActionRef) -> list[str]:
    out = _copied_annotations(ref.annotations)
    scope = _SCOPE_ANNOTATION.get(ref.scope)
    if scope and scope not in out:
        out.insert(0, scope)
    return out


def _params(container, params: tuple[Param, ...], p4info: P4Info) -> None:
    for number, p in enumerate(params, start=1):
        msg = container.add(id=number, name=p.name, bitwidth=p.bitwidth)
        msg.annotations.extend(_copied_annotations(p.annotations))
        _add_enum(p4info, p.enum)


def _add_enum(p4info: P4Info, enum: SerializableEnum | None) -> None:
    """type_info.serializable_enums gets each enum a listed field has, as p4c writes it:
    member values big-endian in the whole bytes of the underlying width."""
    if enum is None or enum.name in p4info.type_info.serializable_enums:
        return
    spec = p4info.type_info.serializable_enums[enum.name]
    spec.underlying_type.bitwidth = enum.bitwidth
    for name, value in enum.members:
        spec.members.add(name=name, value=value.to_bytes((enum.bitwidth + 7) // 8, "big"))
