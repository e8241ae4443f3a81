"""The state mirror: state.SwitchState stays the control plane's one model (validation, handles,
errors); every change is copied into the C pipeline here, and what the data plane updates per
packet (registers, counters, meters, entries' direct counters and last hits) lives in C memory
that these views read and write in place.

Views do not lock: the runtime servers hold `switch.lock` (which holds the C core's lock)
around what they read and write; a mirror call locks the core itself.
"""
from __future__ import annotations

from collections.abc import MutableSequence
from typing import Any, Iterable, Iterator

from ...state import (CloneSession, Meter, Mirror, StateError, TableEntry, TableState, ValueSetState,
                      ActionProfileState)
from ...ir import CounterInfo, MeterInfo, RegisterInfo
from .codegen import CProgram, TableLayout

M64 = (1 << 64) - 1


def _mask(w: int) -> int:
    return (1 << w) - 1


def split_words(value: int, width: int) -> list[int]:
    """A value as 64-bit words, low first (two for a field wider than 64 bits)."""
    value &= _mask(width)
    return [value & M64, value >> 64] if width > 64 else [value]


def match_words(match: tuple, layout: TableLayout) -> list[int]:
    """An entry's match as the C API takes it: every field's value words, then every field's
    mask words (a range's high words); a don't-care matches everything."""
    vals: list[int] = []
    masks: list[int] = []
    for m, w, kind in zip(match, layout.widths, layout.kinds):
        full = _mask(w)
        if m is None:
            v, mk = 0, (full if kind == "range" else 0)
        elif m[0] in ("exact", "optional"):
            v, mk = m[1], full
        elif m[0] == "lpm":
            v, mk = m[1], (_mask(m[2]) << (w - m[2])) if m[2] else 0
        else:                                  # ternary (value, mask), range (low, high)
            v, mk = m[1], m[2]
        vals += split_words(v, w)
        masks += split_words(mk, w)
    return vals + masks


class CCells(MutableSequence):
    """A fixed-size array of unsigned cells in C memory (a register, a counter's column),
    read and written as a list of ints; stores are cut to the cells' width."""

    def __init__(self, owner: Any, ffi: Any, ptr: Any, size: int, width: int) -> None:
        self._owner = owner                      # keeps the C memory alive
        self._size = size
        self._width = width
        self._mask = _mask(width)
        self._wide = width > 64
        bits = 8 if width <= 8 else 16 if width <= 16 else 32 if width <= 32 else 64
        self._p = ffi.cast("uint64_t *" if self._wide else f"uint{bits}_t *", ptr)
        self._ffi = ffi

    def __len__(self) -> int:
        return self._size

    def _index(self, i: int) -> int:
        if i < 0:
            i += self._size
        if not 0 <= i < self._size:
            raise IndexError("index out of range")
        return i

    def _get(self, i: int) -> int:
        if self._wide:
            return self._p[2 * i] | (self._p[2 * i + 1] << 64)
        return self._p[i]

    def _set(self, i: int, value: int) -> None:
        value = int(value) & self._mask
        if self._wide:
            self._p[2 * i], self._p[2 * i + 1] = value & M64, value >> 64
        else:
            self._p[i] = value

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            if i == slice(None):
                return list(self)
            return [self._get(j) for j in range(*i.indices(self._size))]
        return self._get(self._index(i))

    def __setitem__(self, i: int | slice, value: Any) -> None:
        if isinstance(i, slice):
            indexes = range(*i.indices(self._size))
            values = list(value)
            if len(values) != len(indexes):
                raise ValueError(f"cannot resize a fixed array of {self._size} cells")
            for j, v in zip(indexes, values):
                self._set(j, v)
            return
        self._set(self._index(i), value)

    def __delitem__(self, i: int | slice) -> None:
        raise TypeError("a register or counter has a fixed size")

    def insert(self, i: int, value: int) -> None:
        raise TypeError("a register or counter has a fixed size")

    def __iter__(self) -> Iterator[int]:
        if self._wide:
            words = self._ffi.unpack(self._p, 2 * self._size)
            return iter([words[2 * i] | (words[2 * i + 1] << 64) for i in range(self._size)])
        return iter(self._ffi.unpack(self._p, self._size))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, CCells)):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return repr(list(self))


class CMeter(Meter):
    """A meter whose buckets live in C (the data plane runs it); its config is mirrored."""

    def __init__(self, mirror: CMirror, ptr: Any) -> None:
        super().__init__()
        self._mirror, self._ptr = mirror, ptr

    def set_config(self, cir: float, cburst: int, pir: float, pburst: int) -> None:
        super().set_config(cir, cburst, pir, pburst)
        self._mirror.lib.p4s_meter_config(self._mirror.pl, self._ptr, 1, cir, cburst, pir, pburst)

    def reset(self) -> None:
        super().reset()
        self._mirror.lib.p4s_meter_config(self._mirror.pl, self._ptr, 0, 0.0, 0.0, 0.0, 0.0)


class CEntry(TableEntry):
    """A table entry bound to its C copy: its direct counter and last hit are the C ones."""

    packets = property(lambda self: self.__dict__["_c"].packets,
                       lambda self, v: setattr(self.__dict__["_c"], "packets", int(v) & M64))
    bytes = property(lambda self: self.__dict__["_c"].bytes,
                     lambda self, v: setattr(self.__dict__["_c"], "bytes", int(v) & M64))
    last_hit_ns = property(lambda self: self.__dict__["_c"].last_hit_ns,
                           lambda self, v: setattr(self.__dict__["_c"], "last_hit_ns", int(v) & M64))


class CMirror(Mirror):
    """Keeps one C pipeline in step with its SwitchState."""

    def __init__(self, pipeline: Any, cprog: CProgram, info: Any) -> None:
        self.pipeline = pipeline                 # keeps the C pipeline alive while views exist
        self.ffi, self.lib, self.pl = pipeline.ffi, pipeline.lib, pipeline.ptr
        self.cprog = cprog
        self.info = info

    # ---- storage the data plane updates --------------------------------------------------
    def register_cells(self, info: RegisterInfo) -> CCells:
        rid = self.cprog.registers[info.name]
        return CCells(self.pipeline, self.ffi, self.lib.p4s_register_cells(self.pl, rid), info.size, info.bitwidth)

    def counter_cells(self, info: CounterInfo) -> tuple[CCells, CCells]:
        cid = self.cprog.counters[info.name]
        return tuple(CCells(self.pipeline, self.ffi, self.lib.p4s_counter_cells(self.pl, cid, which), info.size, 64)
                     for which in (0, 1))

    def meter_cells(self, info: MeterInfo) -> list[Meter]:
        mid = self.cprog.meters[info.name]
        return [CMeter(self, self.lib.p4s_meter_cell(self.pl, mid, i)) for i in range(info.size)]

    # ---- tables ------------------------------------------------------------------------
    def _action(self, action: str, args: Iterable[int]) -> tuple[int, list[int]]:
        """An action's C index and its data as words."""
        params = self.info.actions[action].params if action in self.info.actions else ()
        words: list[int] = []
        for p, v in zip(params, args):
            words += split_words(int(v), p.bitwidth)
        return self.cprog.actions.get(action, -1), words

    def _words(self, values: list[int]) -> Any:
        return self.ffi.new("uint64_t[]", values or [0])

    def entry_added(self, table: TableState, entry: TableEntry) -> None:
        layout = self.cprog.tables[table.info.name]
        slot = entry.handle & 0xFFFFFF
        action, args = self._action(entry.action, entry.args) if entry.action else (-1, [])
        member = -1 if entry.member is None else entry.member
        group = -1 if entry.group is None else entry.group
        rc = self.lib.p4s_table_add(self.pl, layout.id, slot, self._words(match_words(entry.match, layout)),
                                    entry.priority, action, self._words(args), len(args), member, group)
        if rc != 0:
            raise StateError("RESOURCE_EXHAUSTED", f"table {table.info.name}: the C data plane is out of memory")
        c = self.lib.p4s_table_direct(self.pl, layout.id, slot)
        c.packets, c.bytes, c.last_hit_ns = entry.packets & M64, entry.bytes & M64, entry.last_hit_ns & M64
        meter = CMeter(self, self.ffi.addressof(c, "meter"))
        if entry.meter.config is not None:
            meter.set_config(*entry.meter.config)
        entry.__dict__["_c"] = c
        entry.meter = meter
        entry.__class__ = CEntry

    def entry_modified(self, table: TableState, entry: TableEntry) -> None:
        layout = self.cprog.tables[table.info.name]
        action, args = self._action(entry.action, entry.args) if entry.action else (-1, [])
        self.lib.p4s_table_modify(self.pl, layout.id, entry.handle & 0xFFFFFF, action, self._words(args), len(args),
                                  -1 if entry.member is None else entry.member,
                                  -1 if entry.group is None else entry.group)

    def entry_deleted(self, table: TableState, entry: TableEntry) -> None:
        """The entry lives on in Python (a server may still hold it): its C values come home."""
        if isinstance(entry, CEntry):
            packets, nbytes, last = entry.packets, entry.bytes, entry.last_hit_ns
            config = entry.meter.config
            entry.__class__ = TableEntry
            del entry.__dict__["_c"]
            entry.packets, entry.bytes, entry.last_hit_ns = packets, nbytes, last
            entry.meter = Meter()
            if config is not None:
                entry.meter.set_config(*config)
        self.lib.p4s_table_delete(self.pl, self.cprog.tables[table.info.name].id, entry.handle & 0xFFFFFF)

    def default_changed(self, table: TableState) -> None:
        action, args = self._action(table.default_action, table.default_args)
        self.lib.p4s_table_set_default(self.pl, self.cprog.tables[table.info.name].id, action, self._words(args),
                                       len(args))

    # ---- value sets, action profiles, the replication engine ------------------------------
    def value_set_changed(self, value_set: ValueSetState) -> None:
        layout = self.cprog.value_sets[value_set.info.name]
        words = [w for m in value_set.members for w in match_words(m, layout)]
        if self.lib.p4s_vset_set(self.pl, layout.id, self._words(words), len(value_set.members)) != 0:
            raise StateError("RESOURCE_EXHAUSTED", f"value_set {value_set.info.name}: out of memory")

    def member_changed(self, profile: ActionProfileState, member_id: int) -> None:
        pid = self.cprog.profiles[profile.info.name]
        m = profile.members.get(member_id)
        action, args = self._action(m.action, m.args) if m is not None else (-1, [])
        if self.lib.p4s_profile_member(self.pl, pid, member_id, int(m is not None), action, self._words(args),
                                       len(args)) != 0:
            raise StateError("RESOURCE_EXHAUSTED", f"action profile {profile.info.name}: out of memory")

    def group_changed(self, profile: ActionProfileState, group_id: int) -> None:
        pid = self.cprog.profiles[profile.info.name]
        present = group_id in profile.groups
        ids = profile.group_order(group_id) if present else []
        if self.lib.p4s_profile_group(self.pl, pid, group_id, int(present), self._words(ids), len(ids)) != 0:
            raise StateError("RESOURCE_EXHAUSTED", f"action profile {profile.info.name}: out of memory")

    def _replicas(self, kind: int, key: int, replicas: list[tuple[int, int]] | None, cut: int = 0) -> None:
        reps = replicas or []
        ports = self.ffi.new("uint32_t[]", [p & 0xFFFFFFFF for p, _ in reps] or [0])
        rids = self.ffi.new("uint32_t[]", [r & 0xFFFFFFFF for _, r in reps] or [0])
        if self.lib.p4s_replicas_set(self.pl, kind, key, int(replicas is not None), ports, rids, len(reps), cut) != 0:
            raise StateError("RESOURCE_EXHAUSTED", "the C data plane is out of memory")

    def multicast_group_changed(self, group_id: int, replicas: list[tuple[int, int]] | None) -> None:
        self._replicas(0, group_id, None if replicas is None else list(replicas))

    def clone_session_changed(self, session_id: int, session: CloneSession | None) -> None:
        if session is None:
            self._replicas(1, session_id, None)
        else:
            self._replicas(1, session_id, list(session.replicas), session.packet_length_bytes & 0xFFFFFFFF)
