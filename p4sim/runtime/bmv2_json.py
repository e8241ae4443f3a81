"""The BMv2 JSON that BMv2's Thrift runtime hands out (bm_get_config), written from a
program's `ir.ProgramInfo`: what simple_switch_CLI reads to learn the program (tables with
their keys and actions, action parameters, counter, meter and register arrays).

It describes the control-plane objects only, not the pipeline: p4sim runs P4 source, so
nothing ever executes this JSON. The keys follow runtime_CLI.py's load_json_str.
"""
from __future__ import annotations

import json
from typing import Any

from ..ir import MatchField, ProgramInfo, TableInfo

# The CLI knows exact, lpm, ternary, valid and range; an optional key is a ternary one
# whose mask is all ones or zero (thrift.py checks that), as BMv2 stores it.
KEY_MATCH_TYPES = {"exact": "exact", "lpm": "lpm", "ternary": "ternary", "optional": "ternary",
                   "range": "range"}
METADATA_HEADER = "scalars"          # BMv2's name for the header of local and metadata fields


def bmv2_json(info: ProgramInfo | None) -> str:
    """The JSON text for `info` (None: the empty config of a switch started with --no-p4)."""
    if info is None:
        return json.dumps({"program": "", "header_types": [], "headers": [], "actions": [],
                           "pipelines": [], "counter_arrays": [], "meter_arrays": [],
                           "register_arrays": []})
    headers: dict[str, dict[str, int]] = {}
    pipelines: dict[str, list[dict[str, Any]]] = {}
    for tid, table in enumerate(info.tables.values()):
        control = table.name.rsplit(".", 1)[0] if "." in table.name else "ingress"
        pipelines.setdefault(control, []).append(_table(tid, table, info, headers))
    doc = {
        "program": info.source_file,
        "__meta__": {"version": [2, 23], "compiler": "p4sim"},
        "header_types": [{"name": f"{h}_t", "id": i, "fields": [[f, w, False] for f, w in fields.items()]}
                         for i, (h, fields) in enumerate(headers.items())],
        "headers": [{"name": h, "id": i, "header_type": f"{h}_t", "metadata": h == METADATA_HEADER}
                    for i, h in enumerate(headers)],
        "actions": [{"name": a.name, "id": i,
                     "runtime_data": [{"name": p.name, "bitwidth": p.bitwidth} for p in a.params]}
                    for i, a in enumerate(info.actions.values())],
        "pipelines": [{"name": name, "id": i, "tables": tables, "action_profiles": []}
                      for i, (name, tables) in enumerate(pipelines.items())],
        "counter_arrays": [_resource(i, c, info, is_meter=False) for i, c in enumerate(info.counters.values())],
        "meter_arrays": [_resource(i, m, info, is_meter=True) for i, m in enumerate(info.meters.values())],
        "register_arrays": [{"name": r.name, "id": i, "size": r.size, "bitwidth": r.bitwidth}
                            for i, r in enumerate(info.registers.values())],
        "calculations": [],
        "parse_vsets": [],
    }
    return json.dumps(doc, indent=2)


def table_match_type(table: TableInfo) -> str:
    """BMv2's match type of a whole table: range over ternary over lpm over exact. The CLI
    asks for a priority exactly when it is ternary or range."""
    kinds = {KEY_MATCH_TYPES[f.match_kind] for f in table.match_fields}
    return next((k for k in ("range", "ternary", "lpm") if k in kinds), "exact")


def key_target(field: MatchField) -> list[str]:
    """[header, field] as BMv2 names a key; isValid() keys end in "$valid$", as p4c's do."""
    if "." not in field.name:
        return [METADATA_HEADER, field.name]
    return field.name.rsplit(".", 1)


def _table(tid: int, table: TableInfo, info: ProgramInfo, headers: dict[str, dict[str, int]]) -> dict[str, Any]:
    keys = []
    for f in table.match_fields:
        header, name = key_target(f)
        if name != "$valid$":
            headers.setdefault(header, {})[name] = f.bitwidth
        keys.append({"match_type": KEY_MATCH_TYPES[f.match_kind], "name": f.name,
                     "target": [header, name], "mask": None})
    default_id = list(info.actions).index(table.default_action) if table.default_action in info.actions else None
    return {
        "name": table.name, "id": tid, "key": keys, "match_type": table_match_type(table),
        "type": "simple", "max_size": table.size, "with_counters": table.direct_counter is not None,
        "support_timeout": table.support_timeout, "direct_meters": table.direct_meter,
        "actions": [a.name for a in table.actions],
        "default_entry": {"action_id": default_id, "action_const": table.const_default_action,
                          "action_data": [hex(v) for v in table.default_args],
                          "action_entry_const": table.const_default_action},
    }


def _resource(rid: int, res: Any, info: ProgramInfo, is_meter: bool) -> dict[str, Any]:
    """A counter or meter array; a direct one is bound to its table and sized like it."""
    out: dict[str, Any] = {"name": res.name, "id": rid, "is_direct": res.direct_table is not None}
    if res.direct_table is not None:
        out["binding"] = res.direct_table
        out["size"] = info.tables[res.direct_table].size
    else:
        out["size"] = res.size
    if is_meter:
        out["type"] = "packets" if res.unit == "PACKETS" else "bytes"
        out["rate_count"] = 2
    return out
