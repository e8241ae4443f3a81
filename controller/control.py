"""Program-independent intents on one switch: push the pipeline, bring table entries,
multicast groups and clone sessions to a wanted state (reading first, writing only what
differs, so a restarted controller leaves running state alone), read them and counters.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Callable, Iterable

from p4.v1 import p4runtime_pb2
from p4runtime_sh.context import P4Type

from .entries import (CloneSession, MulticastGroup, RuntimeConfig, TableEntry,
                      clone_session_from_proto, clone_session_to_proto, lookup,
                      multicast_group_from_proto, multicast_group_to_proto, normalized,
                      table_entry_from_proto, table_entry_to_proto)
from .switch import Pipeline, Switch

log = logging.getLogger(__name__)

Update = p4runtime_pb2.Update


def push_pipeline(sw: Switch, pipeline: Pipeline, force: bool = False) -> bool:
    """Make the device run `pipeline`; return True if it was pushed (state wiped).

    A device already running it (same cookie, or same P4Info from a target that keeps
    no cookie) is left alone, so a restarted controller does not disturb running jobs.
    """
    running = sw.device_pipeline()
    if not force and running is not None and _same_pipeline(running, pipeline):
        log.info("%s already runs %s: pipeline kept", sw.name, pipeline.name)
        return False
    log.info("%s: pushing pipeline %s (%s)", sw.name, pipeline.name,
             "forced" if force and running else "new" if running is None else "replaces another")
    sw.set_pipeline(pipeline)
    return True


def read_table_entries(sw: Switch, table: str) -> list[TableEntry]:
    """The entries the switch holds in `table` (not its default entry)."""
    info = lookup(sw.context, P4Type.table, table)
    entity = p4runtime_pb2.Entity()
    entity.table_entry.table_id = info.preamble.id
    return [table_entry_from_proto(sw.context, e.table_entry) for e in sw.read([entity])]


def read_default_entry(sw: Switch, table: str) -> TableEntry:
    info = lookup(sw.context, P4Type.table, table)
    entity = p4runtime_pb2.Entity()
    entity.table_entry.table_id = info.preamble.id
    entity.table_entry.is_default_action = True
    found = sw.read([entity])
    return table_entry_from_proto(sw.context, found[0].table_entry)


def install_table_entries(sw: Switch, entries: Iterable[TableEntry]) -> int:
    """Insert the entries the switch lacks and modify those that differ, in one batch;
    return how many updates were sent. Entries the switch has beyond these stay."""
    wanted = [normalized(sw.context, e) for e in entries]
    have: dict[tuple, TableEntry] = {}
    for table in sorted({e.table for e in wanted if not e.default_action}):
        have.update((_key(e), e) for e in read_table_entries(sw, table))
    for table in sorted({e.table for e in wanted if e.default_action}):
        have[("default", table)] = read_default_entry(sw, table)
    updates = []
    for entry in wanted:
        current = have.get(_key(entry))
        if current == entry:
            continue
        kind = Update.MODIFY if current is not None or entry.default_action else Update.INSERT
        updates.append(_table_update(sw, kind, entry))
    sw.write(updates)
    log.debug("%s: %d table entries wanted, %d written", sw.name, len(wanted), len(updates))
    return len(updates)


def delete_table_entries(sw: Switch, entries: Iterable[TableEntry]) -> int:
    """Delete those of the entries the switch holds; return how many were deleted."""
    wanted = [normalized(sw.context, e) for e in entries]
    present: set[tuple] = set()
    for table in sorted({e.table for e in wanted}):
        present.update(_key(e) for e in read_table_entries(sw, table))
    updates = [_table_update(sw, Update.DELETE, e) for e in wanted if _key(e) in present]
    sw.write(updates)
    return len(updates)


def read_multicast_groups(sw: Switch) -> dict[int, MulticastGroup]:
    entity = p4runtime_pb2.Entity()
    entity.packet_replication_engine_entry.multicast_group_entry.multicast_group_id = 0  # all
    groups = (multicast_group_from_proto(e.packet_replication_engine_entry.multicast_group_entry)
              for e in sw.read([entity]))
    return {g.multicast_group_id: g for g in groups}


def install_multicast_groups(sw: Switch, groups: Iterable[MulticastGroup]) -> int:
    """Create missing groups and rewrite those whose replicas differ (order-insensitive)."""
    def same(a: MulticastGroup, b: MulticastGroup) -> bool:
        return sorted(a.replicas, key=_replica_key) == sorted(b.replicas, key=_replica_key)
    return _reconcile_pre(sw, read_multicast_groups(sw), groups, lambda g: g.multicast_group_id,
                          same, multicast_group_to_proto)


def delete_multicast_groups(sw: Switch, group_ids: Iterable[int]) -> int:
    have = read_multicast_groups(sw)
    updates = [Update(type=Update.DELETE, entity=p4runtime_pb2.Entity(
        packet_replication_engine_entry=multicast_group_to_proto(have[gid])))
        for gid in group_ids if gid in have]
    sw.write(updates)
    return len(updates)


def read_clone_sessions(sw: Switch) -> dict[int, CloneSession]:
    entity = p4runtime_pb2.Entity()
    entity.packet_replication_engine_entry.clone_session_entry.session_id = 0  # all
    sessions = (clone_session_from_proto(e.packet_replication_engine_entry.clone_session_entry)
                for e in sw.read([entity]))
    return {s.clone_session_id: s for s in sessions}


def install_clone_sessions(sw: Switch, sessions: Iterable[CloneSession]) -> int:
    """Create missing clone sessions and rewrite those that differ."""
    return _reconcile_pre(sw, read_clone_sessions(sw), sessions, lambda c: c.clone_session_id,
                          lambda a, b: a == b, clone_session_to_proto)


def _reconcile_pre(sw: Switch, have: dict[int, Any], wanted: Iterable[Any], key: Callable[[Any], int],
                   same: Callable[[Any, Any], bool], to_proto: Callable[[Any], Any]) -> int:
    """Insert what the replication engine lacks, modify what differs; return the update count."""
    updates = []
    for item in wanted:
        current = have.get(key(item))
        if current is not None and same(current, item):
            continue
        kind = Update.INSERT if current is None else Update.MODIFY
        updates.append(Update(type=kind, entity=p4runtime_pb2.Entity(
            packet_replication_engine_entry=to_proto(item))))
    sw.write(updates)
    return len(updates)


def install_runtime_config(sw: Switch, config: RuntimeConfig) -> int:
    """Install a tutorials-style runtime JSON: groups and sessions first, then entries."""
    return (install_multicast_groups(sw, config.multicast_group_entries)
            + install_clone_sessions(sw, config.clone_session_entries)
            + install_table_entries(sw, config.table_entries))


def read_counters(sw: Switch) -> dict[str, list[tuple[int, int]]]:
    """Every indirect counter of the program: name -> [(packets, bytes)] by index."""
    result: dict[str, list[tuple[int, int]]] = {}
    for name, info in sw.context.get_counters():
        entity = p4runtime_pb2.Entity()
        entity.counter_entry.counter_id = info.preamble.id
        cells = [(0, 0)] * info.size
        for e in sw.read([entity]):
            c = e.counter_entry
            if c.index.index < len(cells):
                cells[c.index.index] = (c.data.packet_count, c.data.byte_count)
        result[name] = cells
    return result


def dump_state(sw: Switch) -> dict[str, Any]:
    """Everything the switch holds, as a runtime JSON object (for `entries` and debugging)."""
    entries = [e for name, _ in sw.context.get_tables() for e in read_table_entries(sw, name)]
    config = RuntimeConfig(tuple(entries), tuple(read_multicast_groups(sw).values()),
                           tuple(read_clone_sessions(sw).values()))
    return config.to_json()


def _same_pipeline(running: p4runtime_pb2.ForwardingPipelineConfig, pipeline: Pipeline) -> bool:
    if running.cookie.cookie:
        return running.cookie.cookie == pipeline.cookie
    return running.p4info.SerializeToString(deterministic=True) == \
        pipeline.p4info.SerializeToString(deterministic=True)


def _key(entry: TableEntry) -> tuple:
    if entry.default_action:
        return ("default", entry.table)
    return (entry.table, json.dumps(entry.match, sort_keys=True), entry.priority)


def _table_update(sw: Switch, kind: int, entry: TableEntry) -> p4runtime_pb2.Update:
    return Update(type=kind, entity=p4runtime_pb2.Entity(
        table_entry=table_entry_to_proto(sw.context, entry)))


def _replica_key(r: Any) -> tuple[int, int]:
    return (r.egress_port, r.instance)
