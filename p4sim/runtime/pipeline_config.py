"""A forwarding pipeline as P4Runtime sees it: the program, its P4Info indexed by id and
checked against the program, and P4Runtime's byte-string values and status-coded errors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc
from p4.config.v1 import p4info_pb2

from ..ir import ProgramInfo
from ..state import StateError

Code = grpc.StatusCode


class RequestError(Exception):
    """A request P4Runtime rejects; `code` is the gRPC status it is reported with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def from_state(cls, err: StateError) -> RequestError:
        return cls(Code[err.code], err.message)


def decode_value(data: bytes, bitwidth: int, what: str) -> int:
    """A P4Runtime byte string as an int; shorter (canonical) and zero-padded forms are
    both accepted, as the spec asks, and a value wider than the field is OUT_OF_RANGE."""
    if not data:
        raise RequestError(Code.INVALID_ARGUMENT, f"empty byte string for {what}")
    value = int.from_bytes(data, "big")
    if value >> bitwidth:
        raise RequestError(Code.OUT_OF_RANGE, f"value {data.hex()} of {what} does not fit in {bitwidth} bits")
    return value


def encode_value(value: int) -> bytes:
    """The canonical P4Runtime byte string: no leading zero bytes, at least one byte."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


@dataclass
class Pipeline:
    """A committed (or saved) forwarding pipeline and the P4Info lookups requests need."""
    program: Any                       # p4sim.Program: .info, .device_config()
    p4info: p4info_pb2.P4Info
    device_config: bytes
    cookie: int = 0
    tables: dict[int, p4info_pb2.Table] = field(default_factory=dict)
    actions: dict[int, p4info_pb2.Action] = field(default_factory=dict)
    counters: dict[int, p4info_pb2.Counter] = field(default_factory=dict)
    direct_counters: dict[int, p4info_pb2.DirectCounter] = field(default_factory=dict)
    meters: dict[int, p4info_pb2.Meter] = field(default_factory=dict)
    direct_meters: dict[int, p4info_pb2.DirectMeter] = field(default_factory=dict)
    registers: dict[int, p4info_pb2.Register] = field(default_factory=dict)
    digests: dict[int, p4info_pb2.Digest] = field(default_factory=dict)
    action_profiles: dict[int, p4info_pb2.ActionProfile] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)          # "table:NAME" -> id
    packet_in: p4info_pb2.ControllerPacketMetadata | None = None
    packet_out: p4info_pb2.ControllerPacketMetadata | None = None

    @classmethod
    def create(cls, program: Any, p4info: p4info_pb2.P4Info, device_config: bytes,
               cookie: int = 0) -> Pipeline:
        """Index the P4Info and check it names what the program has (INVALID_ARGUMENT if not)."""
        pipe = cls(program, p4info, device_config, cookie)
        info: ProgramInfo = program.info
        groups = [("table", p4info.tables, pipe.tables, info.tables),
                  ("action", p4info.actions, pipe.actions, info.actions),
                  ("counter", p4info.counters, pipe.counters, info.counters),
                  ("direct_counter", p4info.direct_counters, pipe.direct_counters, info.counters),
                  ("meter", p4info.meters, pipe.meters, info.meters),
                  ("direct_meter", p4info.direct_meters, pipe.direct_meters, info.meters),
                  ("register", p4info.registers, pipe.registers, info.registers),
                  ("digest", p4info.digests, pipe.digests, info.digests),
                  ("action_profile", p4info.action_profiles, pipe.action_profiles, info.action_profiles)]
        for kind, messages, by_id, known in groups:
            for msg in messages:
                name = msg.preamble.name
                if name not in known:
                    raise RequestError(Code.INVALID_ARGUMENT,
                                       f"P4Info {kind} {name!r} is not in the device config's program")
                by_id[msg.preamble.id] = msg
                pipe.ids[f"{kind}:{name}"] = msg.preamble.id
        action_names = {a.preamble.id: a.preamble.name for a in p4info.actions}
        for t in p4info.tables:
            table = info.tables[t.preamble.name]
            if [(m.name, m.bitwidth) for m in t.match_fields] != [(f.name, f.bitwidth) for f in table.match_fields]:
                raise RequestError(Code.INVALID_ARGUMENT,
                                   f"P4Info match fields of table {t.preamble.name!r} differ from the program's")
            if not {action_names.get(r.id) for r in t.action_refs} <= {r.name for r in table.actions}:
                raise RequestError(Code.INVALID_ARGUMENT,
                                   f"P4Info actions of table {t.preamble.name!r} differ from the program's")
        for a in p4info.actions:
            params = info.control_plane_params(a.preamble.name)
            if [p.bitwidth for p in a.params] != [p.bitwidth for p in params]:
                raise RequestError(Code.INVALID_ARGUMENT,
                                   f"P4Info params of action {a.preamble.name!r} differ from the program's")
        for cpm in p4info.controller_packet_metadata:
            if cpm.preamble.name == "packet_in":
                pipe.packet_in = cpm
            elif cpm.preamble.name == "packet_out":
                pipe.packet_out = cpm
        return pipe

    def table(self, table_id: int) -> p4info_pb2.Table:
        return self._get(self.tables, table_id)

    def action(self, action_id: int) -> p4info_pb2.Action:
        return self._get(self.actions, action_id)

    def action_profile(self, profile_id: int) -> p4info_pb2.ActionProfile:
        return self._get(self.action_profiles, profile_id)

    @staticmethod
    def _get(by_id: dict, id_: int):
        try:
            return by_id[id_]
        except KeyError:
            raise RequestError(Code.INVALID_ARGUMENT, f"Invalid P4 id {id_}") from None
