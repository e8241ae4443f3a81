"""The v1model pipeline: parser, checksums, ingress, traffic manager, egress, deparser.

PythonSwitch runs a compiled Program on one packet at a time, with BMv2 simple_switch's
packet replication engine (multicast, clone sessions), resubmit and recirculate,
reading and writing runtime state from state.SwitchState.
"""
from __future__ import annotations

import logging
import random
import struct
import threading
import time
from typing import Any, Callable

from ...externs import csum16_bits, hash_functions
from ...program import Program
from ...state import SwitchState
from . import python_code

log = logging.getLogger(__name__)
trace_log = logging.getLogger("p4sim.trace")

DROP_PORT = 511
# standard_metadata.instance_type values, as BMv2's simple_switch numbers them.
NORMAL, INGRESS_CLONE, EGRESS_CLONE, COALESCED, RECIRC, REPLICATION, RESUBMIT = range(7)
I2E, E2E = 0, 1                 # CloneType members, in v1model.p4's order
MAX_PASSES = 8                  # ingress passes per packet (resubmit + recirculate), then drop
MAX_E2E_DEPTH = 4               # egress clones of egress clones


PARSER_INVALID_ARGUMENT = 6     # error.ParserInvalidArgument in BMv2's numbering (checker.CORE_ERRORS)


class Reject(Exception):
    """The parser stops: extract past the end, verify(false), select without a match."""

    def __init__(self, code: int | None) -> None:
        super().__init__(code)
        self.code = code


class Exit(Exception):
    """P4's `exit` statement: leave the current control block."""


class AssertFailed(Exception):
    """A v1model assert()/assume() that did not hold."""


class PacketIn:
    """The packet_in extern: the packet bytes and the parser's byte offset."""
    __slots__ = ("data", "off")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.off = 0

    def advance(self, bits: int) -> None:
        # BMv2 (ParserOpAdvance): a count of bits that is not whole bytes is
        # ParserInvalidArgument, checked before the packet's length.
        if bits & 7:
            raise Reject(PARSER_INVALID_ARGUMENT)
        end = self.off + (bits >> 3)
        if end > len(self.data):
            raise Reject(1)
        self.off = end

    def peek(self, bits: int) -> int:
        nbytes = (bits + 7) >> 3
        if self.off + nbytes > len(self.data):
            raise Reject(1)
        return int.from_bytes(self.data[self.off:self.off + nbytes], "big") >> (nbytes * 8 - bits)


class Stack:
    """A header stack (of headers or of header unions): its elements and nextIndex."""
    __slots__ = ("items", "nxt", "cls")

    def __init__(self, items: list, cls: type) -> None:
        self.items = items
        self.nxt = 0
        self.cls = cls

    def _copy(self) -> Stack:
        s = Stack([h._copy() for h in self.items], self.cls)
        s.nxt = self.nxt
        return s

    def _set(self, other: Stack) -> None:
        for mine, theirs in zip(self.items, other.items):
            mine._set(theirs)
        self.nxt = other.nxt

    def _inv(self) -> None:
        for h in self.items:
            h._inv()
        self.nxt = 0

    def _eq(self, other: Stack) -> bool:
        return all(a._eq(b) for a, b in zip(self.items, other.items))

    def at(self, index: int) -> Any:
        """stack[index]. Out of bounds, as the P4_16 spec says (8.18): a read gives an
        unspecified value (here a fresh invalid element, fields 0) and a write has no
        effect (it lands in that throwaway element). BMv2 1.15.0 crashes instead."""
        if 0 <= index < len(self.items):
            return self.items[index]
        return self.cls()

    def push_front(self, n: int) -> None:
        size = len(self.items)
        self.items = [self.cls() for _ in range(min(n, size))] + self.items[:max(size - n, 0)]
        self.nxt = min(self.nxt + n, size)

    def pop_front(self, n: int) -> None:
        size = len(self.items)
        self.items = self.items[min(n, size):] + [self.cls() for _ in range(min(n, size))]
        self.nxt = max(self.nxt - n, 0)

    def next_elem(self) -> Any:
        if self.nxt >= len(self.items):
            raise Reject(3)
        return self.items[self.nxt]

    def last_elem(self) -> Any:
        if self.nxt == 0:
            raise Reject(3)
        return self.items[self.nxt - 1]


class PacketContext:
    """Per-packet side effects of externs (clone, resubmit, digest ...), read by the traffic manager."""
    __slots__ = ("sm", "length", "payload", "entry", "digests", "clone", "resubmit", "resubmit_flag",
                 "recirculate", "recirculate_flag", "truncate", "dirty")

    def __init__(self) -> None:
        self.dirty = True
        self.digests: list = []
        self.reset(None, 0)

    def reset(self, sm: Any, length: int) -> None:
        self.sm, self.length, self.entry = sm, length, None
        if self.dirty:                # the externs that set these also set dirty
            self.clone = self.resubmit = self.recirculate = self.truncate = None
            self.resubmit_flag = self.recirculate_flag = self.dirty = False


def to_bytes(value: int, nbits: int) -> bytes:
    """A packed field list as bytes, zero-padded at the end to a whole byte."""
    pad = -nbits % 8
    return (value << pad).to_bytes((nbits + pad) >> 3, "big")


def shl(a: int, b: int, width: int, signed: int) -> int:
    if b >= width:
        return 0
    v = (a << b) & ((1 << width) - 1)
    if signed and v >> (width - 1):
        v -= 1 << width
    return v


def _log_msg(fmt: str, values: tuple) -> None:
    """v1model's log_msg: `{}` placeholders filled in order, to the trace logger."""
    if not trace_log.isEnabledFor(logging.INFO):
        return
    parts = fmt.split("{}")
    text = parts[0] + "".join(str(v) + p for v, p in zip(values, parts[1:]))
    trace_log.info("log_msg: %s", text)


class PythonSwitch:
    """One v1model switch. process() is the data plane; state is the control plane's view."""

    def __init__(self, program: Program | None = None, cpu_port: int | None = None, trace: bool = False,
                 on_digest: Callable[[str, tuple], None] | None = None, seed: int | None = None,
                 optimize: bool = True) -> None:
        self.cpu_port = cpu_port
        self.trace = trace
        self.optimize = optimize        # False: the plain twin of the generated code (codegen's CodeGen)
        self.on_digest = on_digest
        self.lock = threading.RLock()
        self.stats = {"rx": 0, "tx": 0, "dropped": 0, "malformed": 0, "errors": 0}
        self._rng = random.Random(seed)
        self.program: Program | None = None
        self.state: SwitchState | None = None
        if program is not None:
            self.load(program)

    def load(self, program: Program) -> None:
        """Switch to a new pipeline with fresh state."""
        if not isinstance(program, Program):
            raise TypeError(f"Switch runs a p4sim.Program (from compile_file), not {type(program).__name__}")
        with self.lock:
            cc, code = python_code(program, self.trace, self.optimize)
            state = SwitchState(program.info)
            pk = PacketContext()
            ns: dict[str, Any] = {      # the generated module's free names (see codegen.py)
                "Reject": Reject, "Exit": Exit, "AssertFailed": AssertFailed, "Stack": Stack,
                "PK": pk, "HASH": hash_functions(self._rng), "RNG": self._rng, "to_bytes": to_bytes,
                "shl": shl, "Struct": struct.Struct, "CSUM16_BITS": csum16_bits, "monotonic_ns": time.monotonic_ns,
                "LOG": trace_log.info, "LOG_MSG": _log_msg,
                "ERROR_NAMES": {v: k for k, v in program.checked.errors.items()},
            }
            stores = {"table": state.tables, "register": state.registers, "counter": state.counters,
                      "meter": state.meters, "value_set": state.value_sets,
                      "action_profile": state.action_profiles}
            for pyname, (kind, name) in cc.bindings.items():
                ns[pyname] = stores[kind][name]
            exec(code, ns)
            self._cc, self._pk = cc, pk
            self.program, self.state = program, state
            self._entry = tuple(ns[k] for k in ("PARSER", "VERIFY", "INGRESS", "EGRESS", "COMPUTE",
                                                "DEPARSER", "NEW_HDR", "NEW_META", "NEW_SM"))
            # BMv2 reuses one PHV: a new packet clears validity, not field values, so an
            # invalid header reads what an earlier packet left (list_struct_init #9 in the
            # BMv2 traces). Metadata and standard_metadata start at 0 for every packet.
            self._phv = ns["NEW_HDR"]()

    # ---- data plane ----------------------------------------------------------------
    def process(self, port: int, data: bytes) -> list[tuple[int, bytes]]:
        """Run one packet through the switch; every packet it sends, in order."""
        with self.lock:
            self.stats["rx"] += 1
            if self.program is None:
                self.stats["dropped"] += 1
                return []
            out: list[tuple[int, bytes]] = []
            try:
                self._run(port, bytes(data), out)
            except Exception as err:        # a program fault must not take the switch down
                self.stats["errors"] += 1
                # Say it once loudly; a program failing on every packet must not flood the log.
                level = logging.WARNING if self.stats["errors"] == 1 else logging.DEBUG
                log.log(level, "packet on port %d dropped: %s: %s", port, type(err).__name__, err)
                if self.trace:
                    trace_log.info("packet dropped by an error: %s: %s", type(err).__name__, err)
                out = []
            self.stats["tx"] += len(out)
            return out

    def _run(self, port: int, data: bytes, out: list) -> None:
        jobs: list = []                      # resubmitted / recirculated packets, rarely any
        self._ingress(data, port, NORMAL, None, jobs, out)
        passes = 1
        while jobs:
            passes += 1
            if passes > MAX_PASSES:
                self.stats["dropped"] += len(jobs)
                if self.trace:
                    trace_log.info("resubmit/recirculate limit reached: dropped")
                return
            self._ingress(*jobs.pop(0), jobs, out)

    def _ingress(self, data: bytes, port: int, itype: int, keep: dict | None, jobs: list, out: list) -> None:
        parser, verify, ingress, _, _, _, new_hdr, new_meta, new_sm = self._entry
        pk = self._pk
        if self.trace:
            trace_log.info("packet in: port %d, %d bytes, instance_type %d: %s", port, len(data), itype, data.hex())
        hdr, meta, sm = self._phv, new_meta(), new_sm()
        hdr._inv()
        sm.ingress_port, sm.packet_length, sm.instance_type = port, len(data), itype
        sm.ingress_global_timestamp = time.monotonic_ns() // 1000 & 0xFFFFFFFFFFFF
        if keep:
            for name, value in keep.items():
                setattr(meta, name, value)
        pk.reset(sm, len(data))
        pkt = PacketIn(data)
        parser(pkt, hdr, meta, sm)
        if sm.parser_error:
            self.stats["malformed"] += 1
        payload = data[pkt.off:]
        pk.payload = payload
        try:
            if verify is not None:
                verify(hdr, meta)
        except Exit:
            pass
        try:
            if ingress is not None:
                ingress(hdr, meta, sm)
        except Exit:
            pass
        if pk.digests:
            self._digests()
        clone, resubmit, resubmit_flag = pk.clone, pk.resubmit, pk.resubmit_flag
        if clone is not None and clone[0] == I2E:
            self._i2e_clone(data, port, clone, meta, out)
        if resubmit_flag:
            if self.trace:
                trace_log.info("resubmit")
            jobs.append((data, port, RESUBMIT, self._preserved(meta, resubmit)))
            return
        if sm.mcast_grp:
            replicas = self.state.multicast_groups.get(sm.mcast_grp, [])
            if self.trace:
                trace_log.info("multicast group %d: %d replicas", sm.mcast_grp, len(replicas))
            for i, (eport, rid) in enumerate(replicas):
                last = i == len(replicas) - 1
                self._egress(hdr if last else hdr._copy(), meta if last else meta._copy(),
                             sm if last else sm._copy(), payload, eport, rid, REPLICATION, jobs, out, 0)
            if not replicas:
                self.stats["dropped"] += 1
            return
        if sm.egress_spec == DROP_PORT:
            self.stats["dropped"] += 1
            if self.trace:
                trace_log.info("dropped in ingress (egress_spec 511)")
            return
        # As in BMv2, a unicast packet is NORMAL in egress even after resubmit/recirculate.
        # It is the same packet object in BMv2, so an ingress truncate() still holds
        # (Packet::truncate); replicas and clones are new packets and are not cut.
        self._egress(hdr, meta, sm, payload, sm.egress_spec, 0, NORMAL, jobs, out, 0, pk.truncate or 0)

    def _i2e_clone(self, data: bytes, port: int, clone: tuple, meta: Any, out: list) -> None:
        """An ingress clone: the packet as received, parsed again, with preserved metadata."""
        session = self.state.clone_sessions.get(clone[1])
        if session is None:
            if self.trace:
                trace_log.info("clone to unknown session %d ignored", clone[1])
            return
        keep = self._preserved(meta, clone[2])
        parser, _, _, _, _, _, new_hdr, new_meta, new_sm = self._entry
        for eport, rid in session.replicas:
            hdr, cmeta, sm = new_hdr(), new_meta(), new_sm()
            sm.ingress_port, sm.packet_length, sm.instance_type = port, len(data), INGRESS_CLONE
            self._pk.reset(sm, len(data))
            pkt = PacketIn(data)
            parser(pkt, hdr, cmeta, sm)
            for name, value in (keep or {}).items():
                setattr(cmeta, name, value)
            self._egress(hdr, cmeta, sm, data[pkt.off:], eport, rid, INGRESS_CLONE, [], out, 0,
                         session.packet_length_bytes)

    def _egress(self, hdr: Any, meta: Any, sm: Any, payload: bytes, eport: int, rid: int, itype: int,
                jobs: list, out: list, depth: int, trunc: int = 0) -> None:
        _, _, _, egress, compute, deparser, _, new_meta, new_sm = self._entry
        pk = self._pk
        sm.egress_port, sm.egress_rid, sm.instance_type = eport, rid, itype
        sm.egress_spec = 0              # as BMv2: egress sees 511 here only if it drops
        sm.egress_global_timestamp = time.monotonic_ns() // 1000 & 0xFFFFFFFFFFFF
        # No queues here: a packet is dequeued the moment it is enqueued.
        sm.enq_timestamp = sm.ingress_global_timestamp & 0xFFFFFFFF
        pk.reset(sm, sm.packet_length)
        pk.payload = payload
        if self.trace:
            trace_log.info("egress port %d (rid %d, instance_type %d)", eport, rid, itype)
        try:
            if egress is not None:
                egress(hdr, meta, sm)
        except Exit:
            pass
        if pk.digests:
            self._digests()
        clone, recirculate, recirculate_flag = pk.clone, pk.recirculate, pk.recirculate_flag
        truncate = pk.truncate
        if clone is not None and clone[0] == E2E and depth < MAX_E2E_DEPTH:
            session = self.state.clone_sessions.get(clone[1])
            keep = self._preserved(meta, clone[2])
            for cport, crid in (session.replicas if session else []):
                # BMv2 copies the headers and resets all metadata, standard_metadata included.
                cmeta, csm = new_meta(), new_sm()
                csm.packet_length = sm.packet_length
                for name, value in (keep or {}).items():
                    setattr(cmeta, name, value)
                self._egress(hdr._copy(), cmeta, csm, payload, cport, crid, EGRESS_CLONE,
                             jobs, out, depth + 1, session.packet_length_bytes)
        if sm.egress_spec == DROP_PORT:
            self.stats["dropped"] += 1
            if self.trace:
                trace_log.info("dropped in egress")
            return
        pk.sm = sm
        try:
            if compute is not None:
                compute(hdr, meta)
        except Exit:
            pass
        chunks: list[bytes] = []
        if deparser is not None:
            deparser(chunks, hdr)
        chunks.append(payload)
        packet = b"".join(chunks)
        for limit in (truncate, trunc):
            if limit:
                packet = packet[:limit]
        if recirculate_flag:
            if self.trace:
                trace_log.info("recirculate")
            jobs.append((packet, sm.ingress_port, RECIRC, self._preserved(meta, recirculate)))
            return
        if self.trace:
            trace_log.info("packet out: port %d, %d bytes: %s", eport, len(packet), packet.hex())
        out.append((eport, packet))

    def _preserved(self, meta: Any, which: Any) -> dict | None:
        """The metadata fields a clone/resubmit/recirculate keeps: a @field_list index or names."""
        if which is None:
            return None
        names = self._cc.field_lists.get(which, []) if isinstance(which, int) else which
        return {n: _copy_value(getattr(meta, n)) for n in names}

    def _digests(self) -> None:
        digests = self._pk.digests
        if digests and self.on_digest is not None:
            for name, values in digests:
                self.on_digest(name, values)
        self._pk.digests = []


def _copy_value(v: Any) -> Any:
    return v._copy() if hasattr(v, "_copy") else v
