"""The control-plane view of a loaded P4 program: tables, actions, externs.

The front end builds a ProgramInfo from the checked AST; p4info.py turns it into
P4Info, state.py keeps the runtime state it describes, and the P4Runtime server
validates requests against it. Names are fully qualified as p4c writes them in
P4Info (``MyIngress.ipv4_lpm``, ``MyIngress.ipv4_forward``, ``hdr.ipv4.dstAddr``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

MATCH_KINDS = ("exact", "lpm", "ternary", "range", "optional")
BMV2_PRIORITY_TOP = 2**31 - 1      # PI's inversion for BMv2: bmv2 = INT32_MAX - p4runtime


def priority_from_bmv2(priority: int) -> int:
    """An entry priority as p4sim ranks them (P4Runtime's order: larger wins) from BMv2's
    own numbers (simple_switch_CLI, `@priority(N)` on const entries: smaller wins), with
    the inversion PI uses, so the Thrift runtime reads N back."""
    return BMV2_PRIORITY_TOP - priority


@dataclass(frozen=True)
class SerializableEnum:
    """`enum bit<W> E { A = 1, ... }`, as P4Info's type_info describes it."""
    name: str
    bitwidth: int
    members: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Param:
    """An action parameter, a match key, or a controller-header field."""
    name: str
    bitwidth: int
    annotations: tuple[str, ...] = ()
    enum: SerializableEnum | None = None     # the field's type, when it is a serializable enum


@dataclass(frozen=True)
class MatchField:
    name: str            # the key expression as p4c names it: "hdr.ipv4.dstAddr"
    bitwidth: int
    match_kind: str      # one of MATCH_KINDS
    annotations: tuple[str, ...] = ()
    enum: SerializableEnum | None = None


@dataclass(frozen=True)
class ActionInfo:
    name: str
    params: tuple[Param, ...] = ()
    annotations: tuple[str, ...] = ()


@dataclass(frozen=True)
class ActionRef:
    """An action as listed in a table: @tableonly / @defaultonly set its scope."""
    name: str
    scope: str = "TABLE_AND_DEFAULT"   # or "TABLE_ONLY", "DEFAULT_ONLY"
    annotations: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConstEntry:
    """An entry of a table's `const entries` (or `entries`), values already evaluated.

    Each element of `match` is one of ("exact", value), ("lpm", value, prefix_len),
    ("ternary", value, mask), ("range", low, high), ("optional", value) or None for
    a don't-care (`_` / `default`).
    """
    match: tuple[tuple | None, ...]
    action: str
    args: tuple[int, ...]
    priority: int = 0            # larger wins (see priority_from_bmv2); 0: by position


@dataclass(frozen=True)
class TableInfo:
    name: str
    match_fields: tuple[MatchField, ...]
    actions: tuple[ActionRef, ...]
    size: int = 1024
    default_action: str = "NoAction"
    default_args: tuple[int, ...] = ()
    const_default_action: bool = False
    const_entries: tuple[ConstEntry, ...] = ()
    entries_are_const: bool = False     # `const entries`: the control plane cannot change them
    direct_counter: str | None = None   # name of a direct_counter bound with `counters = ...`
    direct_meter: str | None = None     # name of a direct_meter bound with `meters = ...`
    support_timeout: bool = False
    annotations: tuple[str, ...] = ()
    implementation: str | None = None   # an action_profile / action_selector bound with `implementation = ...`
    selector_fields: tuple[MatchField, ...] = ()   # `selector` keys: hashed, not matched (not in P4Info)

    @property
    def needs_priority(self) -> bool:
        """P4Runtime requires a priority when any key is ternary, range or optional."""
        return any(f.match_kind in ("ternary", "range", "optional") for f in self.match_fields)


@dataclass(frozen=True)
class ActionProfileInfo:
    """An action_profile, or an action_selector (with_selector, hashing with `algorithm`)."""
    name: str
    size: int
    tables: tuple[str, ...] = ()
    with_selector: bool = False
    algorithm: str = ""              # a HashAlgorithm member, for a selector
    max_group_size: int = 0          # from @max_group_size; 0: not given
    annotations: tuple[str, ...] = ()


@dataclass(frozen=True)
class RegisterInfo:
    name: str
    bitwidth: int
    size: int
    annotations: tuple[str, ...] = ()


@dataclass(frozen=True)
class CounterInfo:
    name: str
    unit: str                        # "PACKETS", "BYTES" or "BOTH" (packets_and_bytes)
    size: int = 0                    # 0 for a direct counter
    direct_table: str | None = None  # set for direct_counter
    annotations: tuple[str, ...] = ()


@dataclass(frozen=True)
class MeterInfo:
    name: str
    unit: str                        # "PACKETS" or "BYTES"
    size: int = 0
    direct_table: str | None = None
    annotations: tuple[str, ...] = ()


@dataclass(frozen=True)
class ValueSetInfo:
    """A parser value_set: members are matched like table keys, one per field of T."""
    name: str
    match_fields: tuple[MatchField, ...]
    size: int
    annotations: tuple[str, ...] = ()


@dataclass(frozen=True)
class ControllerHeader:
    """A header annotated @controller_header("packet_in"|"packet_out")."""
    name: str                        # "packet_in" or "packet_out"
    type_name: str                   # the P4 header type, e.g. "packet_in_header_t"
    fields: tuple[Param, ...] = ()


@dataclass(frozen=True)
class DigestInfo:
    name: str                        # the struct type name passed to digest()
    fields: tuple[Param, ...] = ()


@dataclass
class ProgramInfo:
    """Everything a controller can name in one program."""
    source_file: str
    tables: dict[str, TableInfo] = field(default_factory=dict)
    actions: dict[str, ActionInfo] = field(default_factory=dict)
    registers: dict[str, RegisterInfo] = field(default_factory=dict)
    counters: dict[str, CounterInfo] = field(default_factory=dict)        # indirect and direct
    meters: dict[str, MeterInfo] = field(default_factory=dict)            # indirect and direct
    controller_headers: dict[str, ControllerHeader] = field(default_factory=dict)
    digests: dict[str, DigestInfo] = field(default_factory=dict)
    value_sets: dict[str, ValueSetInfo] = field(default_factory=dict)
    action_profiles: dict[str, ActionProfileInfo] = field(default_factory=dict)
    # A control calls an extern function (mark_to_drop, hash, ...): p4c then writes type_info.
    control_calls_extern_function: bool = False

    def control_plane_params(self, action: str) -> tuple[Param, ...]:
        """An action's parameters as P4Info lists them: p4c binds the arguments of an action
        that only control code calls at compile time, so such an action has none."""
        if any(ref.name == action for t in self.tables.values() for ref in t.actions):
            return self.actions[action].params
        return ()
