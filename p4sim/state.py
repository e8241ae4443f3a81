"""Runtime state of one p4sim switch: table entries and their lookup, registers,
counters, meters, and the packet replication engine's groups and clone sessions.

The pipeline reads it per packet; the P4Runtime server writes it. Values are plain
ints already checked against the P4Info widths; errors are StateError with the gRPC
status name the server reports. A compiled data plane (backends/c) keeps its own copy,
told of every change through a Mirror, and lends the storage it updates per packet
(registers, counters, meters, entries' direct counters and last hits) to these objects.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Any, Callable, MutableSequence

from .ir import (ActionProfileInfo, ConstEntry, CounterInfo, MeterInfo, ProgramInfo, RegisterInfo, TableInfo,
                 ValueSetInfo, priority_from_bmv2)

Match = tuple | None
"""One key element: ("exact", v), ("lpm", v, plen), ("ternary", v, mask),
("range", lo, hi), ("optional", v), or None for don't-care."""

GREEN, YELLOW, RED = 0, 1, 2   # meter colours as v1model's meter extern writes them
SLOT_MASK = 0xFFFFFF           # an entry handle is BMv2's: an 8-bit version above a 24-bit slot


class StateError(Exception):
    """A request the state cannot carry out; `code` is a gRPC status name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Meter:
    """A two-rate three-colour meter (RFC 2698), as BMv2 implements v1model meters.

    Unconfigured meters mark everything GREEN. Rates are units per second, bursts
    in units (packets or bytes, by the meter's type).
    """

    def __init__(self) -> None:
        self.config: tuple[float, int, float, int] | None = None   # cir, cburst, pir, pburst
        self._tc = self._tp = 0.0
        self._last = 0.0

    def set_config(self, cir: float, cburst: int, pir: float, pburst: int) -> None:
        if pir < cir:
            raise StateError("INVALID_ARGUMENT", "meter PIR must not be below CIR")
        self.config = (cir, cburst, pir, pburst)
        self._tc, self._tp = float(cburst), float(pburst)
        self._last = time.monotonic()

    def reset(self) -> None:
        self.config = None

    def execute(self, units: int) -> int:
        if self.config is None:
            return GREEN
        cir, cburst, pir, pburst = self.config
        now = time.monotonic()
        elapsed, self._last = now - self._last, now
        self._tc = min(float(cburst), self._tc + elapsed * cir)
        self._tp = min(float(pburst), self._tp + elapsed * pir)
        if self._tp < units:
            return RED
        self._tp -= units
        if self._tc < units:
            return YELLOW
        self._tc -= units
        return GREEN


class Mirror:
    """What a compiled data plane is told of every change, and the storage it lends. This
    one keeps no copy: the Python backend reads these objects themselves."""

    def register_cells(self, info: RegisterInfo) -> MutableSequence[int]:
        return [0] * info.size

    def counter_cells(self, info: CounterInfo) -> tuple[MutableSequence[int], MutableSequence[int]]:
        return [0] * info.size, [0] * info.size

    def meter_cells(self, info: MeterInfo) -> list[Meter]:
        return [Meter() for _ in range(info.size)]

    def entry_added(self, table: TableState, entry: TableEntry) -> None:
        """A new entry (its handle set); raise StateError to refuse it."""

    def entry_modified(self, table: TableState, entry: TableEntry) -> None:
        pass

    def entry_deleted(self, table: TableState, entry: TableEntry) -> None:
        pass

    def default_changed(self, table: TableState) -> None:
        pass

    def value_set_changed(self, value_set: ValueSetState) -> None:
        pass

    def member_changed(self, profile: ActionProfileState, member_id: int) -> None:
        """A member inserted, modified or (absent from profile.members) deleted."""

    def group_changed(self, profile: ActionProfileState, group_id: int) -> None:
        """A group written or (absent from profile.groups) deleted."""

    def multicast_group_changed(self, group_id: int, replicas: list[tuple[int, int]] | None) -> None:
        pass

    def clone_session_changed(self, session_id: int, session: CloneSession | None) -> None:
        pass


NO_MIRROR = Mirror()


class WatchedDict(dict):
    """A dict that tells `changed(key, value)` of every change (value None: removed)."""

    def __init__(self, changed: Callable[[Any, Any], None]) -> None:
        super().__init__()
        self._changed = changed

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self._changed(key, value)

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._changed(key, None)

    def pop(self, key: Any, *default: Any) -> Any:
        if key not in self:
            return super().pop(key, *default)
        value = super().pop(key)
        self._changed(key, None)
        return value

    def popitem(self) -> tuple[Any, Any]:
        key, value = super().popitem()
        self._changed(key, None)
        return key, value

    def clear(self) -> None:
        keys = list(self)
        super().clear()
        for key in keys:
            self._changed(key, None)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __ior__(self, other: Any) -> WatchedDict:
        self.update(other)
        return self


@dataclass(eq=False)
class TableEntry:
    """One entry; (match, priority) identifies it, as in P4Runtime."""
    match: tuple[Match, ...]
    action: str
    args: tuple[int, ...] = ()
    priority: int = 0
    idle_timeout_ns: int = 0
    metadata: bytes = b""
    packets: int = 0                       # direct counter
    bytes: int = 0
    meter: Meter = field(default_factory=Meter)   # direct meter (GREEN until configured)
    last_hit_ns: int = field(default_factory=time.monotonic_ns)
    handle: int = -1                       # set by the table, as BMv2 numbers its entries
    member: int | None = None              # in a table with an action profile: the member
    group: int | None = None               # ... or the selector's group it runs


def _lpm_mask(plen: int, width: int) -> int:
    return ((1 << plen) - 1) << (width - plen)


def _canonical(match: tuple[Match, ...], info: TableInfo) -> tuple[Match, ...]:
    """Check the match against the table's keys and clear bits outside masks."""
    fields = info.match_fields
    if len(match) != len(fields):
        raise StateError("INVALID_ARGUMENT",
                         f"table {info.name} has {len(fields)} match fields, got {len(match)}")
    out: list[Match] = []
    for m, f in zip(match, fields):
        top = (1 << f.bitwidth) - 1
        if m is None:
            if f.match_kind == "exact":
                raise StateError("INVALID_ARGUMENT", f"missing exact match field {f.name}")
            out.append(None)
            continue
        kind = m[0]
        if kind != f.match_kind:
            raise StateError("INVALID_ARGUMENT",
                             f"match field {f.name} is {f.match_kind}, got {kind}")
        values = m[1:] if kind in ("ternary", "range") else m[1:2]   # lpm's m[2] is a length
        if any(not 0 <= v <= top for v in values):
            raise StateError("OUT_OF_RANGE", f"value does not fit bit<{f.bitwidth}> field {f.name}")
        if kind == "lpm":
            plen = m[2]
            if not 0 <= plen <= f.bitwidth:
                raise StateError("INVALID_ARGUMENT", f"prefix length {plen} too long for {f.name}")
            if plen == 0:          # P4Runtime: a zero-length prefix is a don't-care
                out.append(None)
                continue
            mask = _lpm_mask(plen, f.bitwidth)
            if m[1] & ~mask:
                raise StateError("INVALID_ARGUMENT", f"lpm value of {f.name} has bits beyond its prefix")
            out.append(("lpm", m[1], plen))
        elif kind == "ternary":
            if m[1] & ~m[2]:
                raise StateError("INVALID_ARGUMENT", f"ternary value of {f.name} has bits outside its mask")
            out.append(None if m[2] == 0 else ("ternary", m[1], m[2]))
        elif kind == "range":
            if m[1] > m[2]:
                raise StateError("INVALID_ARGUMENT", f"range of {f.name} has low above high")
            out.append(None if (m[1], m[2]) == (0, top) else ("range", m[1], m[2]))
        else:
            out.append((kind, m[1]))
    return tuple(out)


def _matcher(match: tuple[Match, ...], info: TableInfo) -> Callable[[tuple[int, ...]], bool]:
    """A predicate over the lookup key, built once per entry."""
    checks: list[Callable[[tuple[int, ...]], bool]] = []
    for i, (m, f) in enumerate(zip(match, info.match_fields)):
        if m is None:
            continue
        kind = m[0]
        if kind in ("exact", "optional"):
            checks.append(lambda k, i=i, v=m[1]: k[i] == v)
        elif kind == "lpm":
            checks.append(lambda k, i=i, v=m[1], mk=_lpm_mask(m[2], f.bitwidth): k[i] & mk == v)
        elif kind == "ternary":
            checks.append(lambda k, i=i, v=m[1], mk=m[2]: k[i] & mk == v)
        else:
            checks.append(lambda k, i=i, lo=m[1], hi=m[2]: lo <= k[i] <= hi)
    return lambda k: all(c(k) for c in checks)


class TableState:
    """Entries of one table and the lookup the pipeline runs per packet.

    Exact-only tables use one dict; tables of exact keys and one lpm key use a dict
    per prefix length, longest first; the rest scan entries by falling priority.
    """

    def __init__(self, info: TableInfo, mirror: Mirror = NO_MIRROR) -> None:
        self.info = info
        self._mirror = mirror
        self._entries: dict[tuple, TableEntry] = {}
        # Handles as BMv2's: the lowest free slot, with a version bumped each time a slot is freed.
        self._slots: dict[int, TableEntry] = {}
        self._free: list[int] = []          # heap of freed slots
        self._versions: dict[int, int] = {}
        kinds = [f.match_kind for f in info.match_fields]
        self._lpm_index = kinds.index("lpm") if kinds.count("lpm") == 1 else None
        if all(k == "exact" for k in kinds):
            self._mode = "exact"
            self._exact: dict[tuple[int, ...], TableEntry] = {}
        elif self._lpm_index is not None and all(k in ("exact", "lpm") for k in kinds):
            self._mode = "lpm"
            self._by_plen: dict[int, dict[tuple[int, ...], TableEntry]] = {}
            self._plens: list[int] = []
        else:
            self._mode = "scan"
            self._scan: list[tuple[Callable, TableEntry]] = []
        self.reset_default()
        for number, const in enumerate(info.const_entries):
            self._insert_const(const, number)

    # --- control plane -------------------------------------------------------
    def insert(self, entry: TableEntry) -> None:
        self._check_mutable()
        self._check_indirect(entry)
        self._add(entry)

    def modify(self, entry: TableEntry) -> None:
        self._check_mutable()
        self._check_indirect(entry)
        old = self.get(entry.match, entry.priority)
        old.action, old.args, old.member, old.group = entry.action, entry.args, entry.member, entry.group
        old.idle_timeout_ns, old.metadata = entry.idle_timeout_ns, entry.metadata
        self._mirror.entry_modified(self, old)

    def delete(self, match: tuple[Match, ...], priority: int = 0) -> None:
        self._check_mutable()
        entry = self.get(match, priority)
        self._mirror.entry_deleted(self, entry)
        self._remove(entry)

    def _remove(self, entry: TableEntry) -> None:
        match = entry.match
        del self._entries[(match, entry.priority)]
        slot = entry.handle & SLOT_MASK
        del self._slots[slot]
        self._versions[slot] = (self._versions.get(slot, 0) + 1) & 0xFF
        heapq.heappush(self._free, slot)
        if self._mode == "exact":
            del self._exact[self._exact_key(match)]
        elif self._mode == "lpm":
            plen = self._plen(match)
            bucket = self._by_plen[plen]
            del bucket[self._exact_key(match)]
            if not bucket:
                del self._by_plen[plen]
                self._plens.remove(plen)
        else:
            self._scan = [(m, e) for m, e in self._scan if e is not entry]

    def get(self, match: tuple[Match, ...], priority: int = 0) -> TableEntry:
        key = (_canonical(match, self.info), self._priority(priority))
        try:
            return self._entries[key]
        except KeyError:
            raise StateError("NOT_FOUND", f"no such entry in table {self.info.name}") from None

    def entries(self) -> list[TableEntry]:
        return list(self._entries.values())

    def by_handle(self, handle: int) -> TableEntry | None:
        """The entry in the handle's slot (its version may differ: compare entry.handle)."""
        return self._slots.get(handle & SLOT_MASK)

    def clear(self) -> None:
        """Delete every entry (not the default action)."""
        self._check_mutable()
        for entry in self.entries():
            self.delete(entry.match, entry.priority)

    def set_default(self, action: str, args: tuple[int, ...] = ()) -> None:
        # BMv2 (MatchTable::set_default_action) keeps a const default entry's
        # arguments too: p4c marks both the action and its data const.
        if self.info.const_default_action and (action, tuple(args)) != (
                self.info.default_action, tuple(self.info.default_args)):
            raise StateError("PERMISSION_DENIED",
                             f"table {self.info.name} has a const default action")
        self.default_action, self.default_args = action, tuple(args)
        self._mirror.default_changed(self)

    def reset_default(self) -> None:
        self.default_action = self.info.default_action
        self.default_args = tuple(self.info.default_args)
        self._mirror.default_changed(self)

    # --- data plane ----------------------------------------------------------
    def lookup(self, keys: tuple[int, ...]) -> TableEntry | None:
        """The entry the key hits, or None for a miss (the default action runs)."""
        if self._mode == "exact":
            return self._exact.get(keys)
        if self._mode == "lpm":
            i = self._lpm_index
            width = self.info.match_fields[i].bitwidth
            for plen in self._plens:
                masked = keys[i] & _lpm_mask(plen, width)
                hit = self._by_plen[plen].get(keys[:i] + (masked,) + keys[i + 1:])
                if hit is not None:
                    return hit
            return None
        for matches, entry in self._scan:
            if matches(keys):
                return entry
        return None

    # --- helpers -------------------------------------------------------------
    def _check_mutable(self) -> None:
        if self.info.entries_are_const:
            raise StateError("PERMISSION_DENIED", f"table {self.info.name} has const entries")

    def _check_indirect(self, entry: TableEntry) -> None:
        """A table with an action profile runs members only (BMv2: WRONG_TABLE_TYPE)."""
        if (self.info.implementation is not None) != (entry.member is not None or entry.group is not None):
            raise StateError("INVALID_ARGUMENT", f"table {self.info.name} takes " + (
                "a member or group of its action profile, not an action" if self.info.implementation
                else "an action: it has no action profile"))

    def _priority(self, priority: int) -> int:
        if self.info.needs_priority:
            if priority <= 0:
                raise StateError("INVALID_ARGUMENT",
                                 f"table {self.info.name} needs a priority above 0")
            return priority
        if priority:
            raise StateError("INVALID_ARGUMENT",
                             f"table {self.info.name} takes no priority (no ternary, range or optional key)")
        return 0

    def _insert_const(self, const: ConstEntry, number: int) -> None:
        # Without a priority, the earlier entry wins (p4c numbers them 1, 2, ... for BMv2).
        priority = const.priority or priority_from_bmv2(number + 1) if self.info.needs_priority else 0
        self._add(TableEntry(const.match, const.action, tuple(const.args), priority))

    def _add(self, entry: TableEntry) -> None:
        entry.match = _canonical(entry.match, self.info)
        entry.priority = self._priority(entry.priority)
        key = (entry.match, entry.priority)
        if key in self._entries:
            raise StateError("ALREADY_EXISTS", f"entry already in table {self.info.name}")
        if len(self._entries) >= self.info.size:
            raise StateError("RESOURCE_EXHAUSTED", f"table {self.info.name} is full ({self.info.size})")
        self._entries[key] = entry
        slot = heapq.heappop(self._free) if self._free else len(self._slots)
        entry.handle = self._versions.get(slot, 0) << 24 | slot
        self._slots[slot] = entry
        if self._mode == "exact":
            self._exact[self._exact_key(entry.match)] = entry
        elif self._mode == "lpm":
            plen = self._plen(entry.match)
            if plen not in self._by_plen:
                self._by_plen[plen] = {}
                self._plens = sorted(self._by_plen, reverse=True)
            self._by_plen[plen][self._exact_key(entry.match)] = entry
        else:
            self._scan.append((_matcher(entry.match, self.info), entry))
            # Highest priority first; among equals the earlier entry stays first.
            self._scan.sort(key=lambda pair: -pair[1].priority)
        try:
            self._mirror.entry_added(self, entry)
        except StateError:
            self._remove(entry)
            raise

    def _plen(self, match: tuple[Match, ...]) -> int:
        m = match[self._lpm_index]
        return 0 if m is None else m[2]

    @staticmethod
    def _exact_key(match: tuple[Match, ...]) -> tuple[int, ...]:
        return tuple(0 if m is None else m[1] for m in match)


class RegisterArray:
    def __init__(self, info: RegisterInfo, mirror: Mirror = NO_MIRROR) -> None:
        self.info = info
        self.values = mirror.register_cells(info)

    def read(self, index: int) -> int:
        self._check(index)
        return self.values[index]

    def write(self, index: int, value: int) -> None:
        self._check(index)
        self.values[index] = value & ((1 << self.info.bitwidth) - 1)

    def _check(self, index: int) -> None:
        if not 0 <= index < self.info.size:
            raise StateError("OUT_OF_RANGE",
                             f"index {index} outside register {self.info.name}[{self.info.size}]")


class CounterArray:
    def __init__(self, info: CounterInfo, mirror: Mirror = NO_MIRROR) -> None:
        self.info = info
        self.packets, self.bytes = mirror.counter_cells(info)

    def count(self, index: int, nbytes: int) -> None:
        if 0 <= index < self.info.size:     # out of range counts nothing, as in BMv2
            self.packets[index] += 1
            self.bytes[index] += nbytes


class MeterArray:
    def __init__(self, info: MeterInfo, mirror: Mirror = NO_MIRROR) -> None:
        self.info = info
        self.meters = mirror.meter_cells(info)

    def set_config(self, index: int, cir: float, cburst: int, pir: float, pburst: int) -> None:
        self._at(index).set_config(cir, cburst, pir, pburst)

    def execute(self, index: int, nbytes: int) -> int:
        if not 0 <= index < self.info.size:
            return GREEN
        return self.meters[index].execute(1 if self.info.unit == "PACKETS" else nbytes)

    def _at(self, index: int) -> Meter:
        if not 0 <= index < self.info.size:
            raise StateError("OUT_OF_RANGE", f"index {index} outside meter {self.info.name}")
        return self.meters[index]


class ValueSetState:
    """The members of a parser value_set; a select case matches if any member does."""

    def __init__(self, info: ValueSetInfo, mirror: Mirror = NO_MIRROR) -> None:
        self.info = info
        self._mirror = mirror
        self.members: list[tuple[Match, ...]] = []
        self._checks: list[Callable[[tuple[int, ...]], bool]] = []

    def set(self, members: list[tuple[Match, ...]]) -> None:
        """Replace all members (P4Runtime writes a value set whole)."""
        if len(members) > self.info.size:
            raise StateError("RESOURCE_EXHAUSTED",
                             f"value_set {self.info.name} holds {self.info.size} members, got {len(members)}")
        as_table = TableInfo(self.info.name, self.info.match_fields, ())
        canonical = [_canonical(m, as_table) for m in members]
        self.members = canonical
        self._checks = [_matcher(m, as_table) for m in canonical]
        self._mirror.value_set_changed(self)

    def matches(self, keys: tuple[int, ...]) -> bool:
        return any(check(keys) for check in self._checks)


@dataclass
class CloneSession:
    replicas: list[tuple[int, int]]       # (egress port, rid)
    class_of_service: int = 0
    packet_length_bytes: int = 0          # 0: no truncation


@dataclass
class Member:
    action: str
    args: tuple[int, ...]
    handle: int                           # BMv2's member handle: the lowest free one


@dataclass
class Group:
    members: set[int]                     # member ids
    max_size: int = 0                     # 0: no bound given


class ActionProfileState:
    """Members (an action and its arguments) and, for a selector, groups of members.

    A group runs the member at (hash of the selector keys) % (group size), counting its
    members in BMv2's member-handle order (bm_sim/action_profile.cpp: GroupMgr::get_from_hash
    takes the n-th handle of the group's ordered set); handles are BMv2's, the lowest free.
    """

    def __init__(self, info: ActionProfileInfo, mirror: Mirror = NO_MIRROR) -> None:
        self.info = info
        self._mirror = mirror
        self.members: dict[int, Member] = {}
        self.groups: dict[int, Group] = {}
        self._order: dict[int, list[Member]] = {}   # group id -> its members by handle

    def insert_member(self, member_id: int, action: str, args: tuple[int, ...]) -> None:
        if member_id in self.members:
            raise StateError("ALREADY_EXISTS", f"member {member_id} already in {self.info.name}")
        if len(self.members) >= self.info.size:
            raise StateError("RESOURCE_EXHAUSTED", f"action profile {self.info.name} is full ({self.info.size})")
        used = {m.handle for m in self.members.values()}
        handle = next(h for h in range(len(used) + 1) if h not in used)
        self.members[member_id] = Member(action, tuple(args), handle)
        self._mirror.member_changed(self, member_id)

    def modify_member(self, member_id: int, action: str, args: tuple[int, ...]) -> None:
        m = self.member(member_id)
        m.action, m.args = action, tuple(args)
        self._mirror.member_changed(self, member_id)

    def delete_member(self, member_id: int, tables: list[TableState]) -> None:
        self.member(member_id)
        if any(member_id in g.members for g in self.groups.values()) or \
                any(e.member == member_id for t in tables for e in t.entries()):
            raise StateError("FAILED_PRECONDITION", f"member {member_id} of {self.info.name} is still used")
        del self.members[member_id]
        self._mirror.member_changed(self, member_id)

    def member(self, member_id: int) -> Member:
        try:
            return self.members[member_id]
        except KeyError:
            raise StateError("NOT_FOUND", f"no member {member_id} in {self.info.name}") from None

    def write_group(self, group_id: int, members: list[int], max_size: int, insert: bool) -> None:
        if not self.info.with_selector:
            raise StateError("INVALID_ARGUMENT", f"action profile {self.info.name} has no selector: no groups")
        if insert and group_id in self.groups:
            raise StateError("ALREADY_EXISTS", f"group {group_id} already in {self.info.name}")
        if not insert:
            max_size = max_size or self.group(group_id).max_size
        for m in members:
            self.member(m)
        if len(set(members)) != len(members):
            raise StateError("INVALID_ARGUMENT", f"group {group_id} lists a member twice")
        limit = min(x for x in (max_size, self.info.max_group_size, 1 << 32) if x)
        if self.info.max_group_size and max_size > self.info.max_group_size:
            raise StateError("INVALID_ARGUMENT", f"group {group_id}'s max_size {max_size} is above "
                             f"{self.info.name}'s max_group_size {self.info.max_group_size}")
        if len(members) > limit:
            raise StateError("RESOURCE_EXHAUSTED", f"group {group_id} holds at most {limit} members")
        self.groups[group_id] = Group(set(members), max_size)
        self._order[group_id] = sorted((self.members[m] for m in members), key=lambda m: m.handle)
        self._mirror.group_changed(self, group_id)

    def delete_group(self, group_id: int, tables: list[TableState]) -> None:
        self.group(group_id)
        if any(e.group == group_id for t in tables for e in t.entries()):
            raise StateError("FAILED_PRECONDITION", f"group {group_id} of {self.info.name} is still used")
        del self.groups[group_id], self._order[group_id]
        self._mirror.group_changed(self, group_id)

    def group(self, group_id: int) -> Group:
        try:
            return self.groups[group_id]
        except KeyError:
            raise StateError("NOT_FOUND", f"no group {group_id} in {self.info.name}") from None

    def check_entry(self, entry: TableEntry) -> None:
        """A table entry must name an existing member, or a non-empty group (BMv2's
        MatchTableIndirectWS::add_entry_ws refuses an empty group: EMPTY_GRP). PI's
        DeviceMgr answers INVALID_ARGUMENT for an unknown member or group id."""
        if entry.group is not None:
            if entry.group not in self.groups:
                raise StateError("INVALID_ARGUMENT", f"no group {entry.group} in {self.info.name}")
            if not self.groups[entry.group].members:
                raise StateError("INVALID_ARGUMENT", f"group {entry.group} of {self.info.name} is empty")
        elif entry.member is not None:
            if entry.member not in self.members:
                raise StateError("INVALID_ARGUMENT", f"no member {entry.member} in {self.info.name}")
        else:
            raise StateError("INVALID_ARGUMENT", f"an entry of a table with action profile {self.info.name} "
                             "needs a member or group id, not an action")

    def group_order(self, group_id: int) -> list[int]:
        """A group's member ids in the order a selector counts them (BMv2's member handles)."""
        return sorted(self.groups[group_id].members, key=lambda m: self.members[m].handle)

    def choose(self, entry: TableEntry, hash_value: int) -> Member | None:
        """The member an entry runs; None (the default action) for a group left empty."""
        if entry.member is not None:
            return self.members[entry.member]
        members = self._order[entry.group]
        return members[hash_value % len(members)] if members else None

    def reset(self) -> None:
        groups, members = list(self.groups), list(self.members)
        self.members.clear()
        self.groups.clear()
        self._order.clear()
        for group_id in groups:
            self._mirror.group_changed(self, group_id)
        for member_id in members:
            self._mirror.member_changed(self, member_id)


class SwitchState:
    """All state of one pipeline; a new pipeline gets a fresh SwitchState."""

    def __init__(self, info: ProgramInfo, mirror: Mirror = NO_MIRROR) -> None:
        self.info = info
        self.mirror = mirror
        self.tables = {name: TableState(t, mirror) for name, t in info.tables.items()}
        self.registers = {name: RegisterArray(r, mirror) for name, r in info.registers.items()}
        self.counters = {name: CounterArray(c, mirror) for name, c in info.counters.items()
                         if c.direct_table is None}
        self.meters = {name: MeterArray(m, mirror) for name, m in info.meters.items()
                       if m.direct_table is None}
        self.value_sets = {name: ValueSetState(v, mirror) for name, v in info.value_sets.items()}
        self.action_profiles = {name: ActionProfileState(ap, mirror) for name, ap in info.action_profiles.items()}
        self.multicast_groups: dict[int, list[tuple[int, int]]] = WatchedDict(mirror.multicast_group_changed)
        self.clone_sessions: dict[int, CloneSession] = WatchedDict(mirror.clone_session_changed)

    def reset(self) -> None:
        """Back to the program's initial state in place (the pipeline holds these objects):
        no entries but const ones, default actions, zeroed registers and counters,
        unconfigured meters, no multicast groups or clone sessions."""
        for table in self.tables.values():
            if not table.info.entries_are_const:
                table.clear()
            table.reset_default()
        for register in self.registers.values():
            register.values[:] = [0] * len(register.values)
        for counter in self.counters.values():
            counter.packets[:] = [0] * len(counter.packets)
            counter.bytes[:] = [0] * len(counter.bytes)
        for array in self.meters.values():
            for meter in array.meters:
                meter.reset()
        for profile in self.action_profiles.values():
            profile.reset()
        self.multicast_groups.clear()
        self.clone_sessions.clear()
