"""The C backend is the Python backend, packet for packet: every program of p4src/,
tests/p4programs/ and the BMv2 traces runs on both, with the same random entries, groups,
sessions and register contents, on a seeded fuzz of packets built from the program's own
constants (EtherTypes, protocols, ports, header values) and mutated; the output packets,
their ports and order, digests, statistics, and the registers, counters and direct counters
after the run must be equal. The clock is frozen so timestamps agree, and seeds are equal
so random() and random hashes agree.
"""
from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.contrib.mpls import MPLS

from p4sim import Program, Switch, compile_file
from p4sim.backends.c import CSwitch
from p4sim.frontend import ast
from p4sim.frontend.types import BitType
from p4sim.ir import MatchField, ProgramInfo
from p4sim.state import CloneSession, StateError, TableEntry
from tests.p4sim.conftest import PROGRAMS_DIR, REPO_ROOT, reference_dir

PACKETS = 400               # fuzzed packets per program
SEEDS = 45                  # packets built with Scapy, which the others mutate
CPU_PORT = 64
FROZEN_NS = 1_234_567_890_123_456
SEED = 20

TRACES = reference_dir("bmv2-1.15.0")
PROGRAM_FILES = ([REPO_ROOT / "p4src" / "allreduce.p4"] + sorted(PROGRAMS_DIR.glob("*.p4"))
                 + (sorted(TRACES.glob("*/*.p4")) if TRACES else []))


def literals(program: Program) -> list[tuple[int, int]]:
    """The program's integer literals as (width the checker gave them or 0, value), in source
    order (the constants of one header are declared together)."""
    found = []
    stack: list[Any] = [program.checked.program]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.IntLit):
            width = node.type.width if isinstance(node.type, BitType) else 0
            found.append((node.pos.file, node.pos.line, node.pos.column, width, node.value & ((1 << 128) - 1)))
        if isinstance(node, ast.Node):
            for v in vars(node).values():
                stack.extend(v if isinstance(v, list) else [v])
    return [(w, v) for *_, w, v in sorted(found)]


class Fuzz:
    """Random but reproducible values, entries and packets for one program."""

    def __init__(self, program: Program, seed: int) -> None:
        self.rng = random.Random(seed)
        self.info: ProgramInfo = program.info
        self.ordered = [(w, v) for w, v in literals(program) if w and w % 8 == 0 and w <= 64]
        self.pool: dict[int, list[int]] = {}
        for w, v in literals(program):
            self.pool.setdefault(w, []).append(v)
        self.pool = {w: sorted(set(vs)) for w, vs in self.pool.items()}
        self.any = sorted({v for vs in self.pool.values() for v in vs})
        self.keys: dict[str, list[tuple]] = {}       # lookup keys seen, per table (harvest_keys)

    def value(self, width: int) -> int:
        r = self.rng.random()
        top = (1 << width) - 1
        if r < 0.45 and self.pool.get(width):
            return self.rng.choice(self.pool[width])
        if r < 0.6 and self.any:
            return self.rng.choice(self.any) & top
        if r < 0.7:
            return self.rng.choice([0, 1, 2, top])
        return self.rng.getrandbits(width)

    def match(self, f: MatchField, seen: int | None) -> Any:
        """A match for field f, around a key value the program looked up (seen) if given."""
        w, kind, rng = f.bitwidth, f.match_kind, self.rng
        v = self.value(w) if seen is None else seen
        if kind == "exact":
            return ("exact", v)
        if kind == "optional":
            return None if rng.random() < 0.3 else ("optional", v)
        if kind == "lpm":
            plen = rng.choice([0, w, w, rng.randint(0, w)])
            if plen == 0:
                return None
            mask = ((1 << plen) - 1) << (w - plen)
            return ("lpm", v & mask, plen)
        if kind == "ternary":
            if rng.random() < 0.25:
                return None
            mask = rng.choice([(1 << w) - 1, self.rng.getrandbits(w) | 1, ((1 << w) - 1) ^ 1])
            return ("ternary", v & mask, mask)
        lo, hi = sorted((v - rng.randint(0, 3), v + rng.randint(0, 3)))
        lo, hi = max(lo, 0), min(hi, (1 << w) - 1)
        return None if (lo, hi) == (0, (1 << w) - 1) else ("range", lo, hi)

    def entry_match(self, table: str, fields: tuple[MatchField, ...]) -> tuple:
        seen = self.keys.get(table)
        key = self.rng.choice(seen) if seen and self.rng.random() < 0.8 else (None,) * len(fields)
        return tuple(self.match(f, k) for f, k in zip(fields, key))

    def action(self, table_info, default: bool) -> tuple[str, tuple[int, ...]]:
        scopes = ("TABLE_AND_DEFAULT", "DEFAULT_ONLY") if default else ("TABLE_AND_DEFAULT", "TABLE_ONLY")
        refs = [r for r in table_info.actions if r.scope in scopes]
        name = self.rng.choice(refs).name
        return name, tuple(self.value(p.bitwidth) for p in self.info.actions[name].params)

    def seeds(self, n: int) -> list[bytes]:
        """Packets of common protocols, some with the program's own EtherTypes and ports."""
        rng = self.rng
        w16 = self.pool.get(16, []) or [0x0800]
        w8 = self.pool.get(8, []) or [17]
        mac = lambda: ":".join(f"{rng.choice([0, 2, 8, rng.getrandbits(8)]):02x}" for _ in range(6))
        ip4 = lambda: ".".join(str(rng.choice([10, 0, 1, 2, 254, rng.getrandbits(8)])) for _ in range(4))
        out = []
        for i in range(n):
            eth = Ether(dst=mac(), src=mac())
            payload = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 4, 16, 64, 160])))
            kind = i % 9
            if kind == 0:
                p = eth / IP(src=ip4(), dst=ip4(), ttl=rng.choice([0, 1, 2, 64]), proto=rng.choice(w8 + [6, 17, 1]),
                             tos=rng.getrandbits(8)) / payload
            elif kind == 1:
                p = eth / IP(src=ip4(), dst=ip4()) / UDP(sport=rng.choice(w16), dport=rng.choice(w16 + [4789])) / payload
            elif kind == 2:
                p = eth / IP(src=ip4(), dst=ip4()) / TCP(sport=rng.choice(w16), dport=rng.choice(w16),
                                                         flags=rng.getrandbits(8)) / payload
            elif kind == 3:
                p = eth / IP(src=ip4(), dst=ip4()) / ICMP(type=rng.choice([0, 8])) / payload
            elif kind == 4:
                p = eth / ARP(op=rng.choice([1, 2]), psrc=ip4(), pdst=ip4(), hwsrc=mac()) / payload
            elif kind == 5:
                p = eth / IPv6(src=f"2001:db8::{rng.getrandbits(16):x}", dst=f"2001:db8::{rng.getrandbits(16):x}",
                               hlim=rng.choice([0, 1, 64])) / UDP(dport=rng.choice(w16)) / payload
            elif kind == 6:
                p = eth / Dot1Q(vlan=rng.getrandbits(12)) / IP(src=ip4(), dst=ip4()) / payload
            elif kind == 7:
                p = eth / MPLS(label=rng.getrandbits(20), s=rng.getrandbits(1)) / MPLS(label=rng.getrandbits(20)) / payload
            else:
                p = Ether(dst=mac(), src=mac(), type=rng.choice(w16)) / (self.constant_run() + payload)
            out.append(bytes(p))
        return out

    def constant_run(self) -> bytes:
        """The program's constants, each in its own width: custom headers start like this.
        Half the time a run of them in source order (`'P', '4', 1`: calc.p4's header)."""
        if self.ordered and self.rng.random() < 0.5:
            at = self.rng.randrange(len(self.ordered))
            return b"".join(v.to_bytes(w // 8, "big") for w, v in self.ordered[at:at + self.rng.randint(2, 8)])
        widths = [w for w in self.pool if w and w % 8 == 0 and w <= 64]
        run = b""
        for _ in range(self.rng.randint(1, 12)):
            w = self.rng.choice(widths) if widths else 8
            run += self.value(w).to_bytes(w // 8, "big")
        return run

    def packet(self, seeds: list[bytes]) -> bytes:
        """A seed, mutated: a constant where an EtherType, protocol or port sits, a run of
        constants, a flipped byte, or a cut."""
        rng = self.rng
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            what = rng.randrange(6)
            if what == 0 and len(data) >= 14:
                data[12:14] = self.value(16).to_bytes(2, "big")
            elif what == 1 and len(data) >= 24:
                data[23] = self.value(8)
            elif what == 2 and len(data) >= 38:
                at = rng.choice([34, 36])
                data[at:at + 2] = self.value(16).to_bytes(2, "big")
            elif what == 3:
                at = rng.randrange(len(data) + 1)
                data[at:at] = self.constant_run()
            elif what == 4 and data:
                data[rng.randrange(len(data))] = rng.getrandbits(8)
            else:
                del data[rng.randrange(len(data) + 1):]
        return bytes(data)


def harvest_keys(program: Program, fuzz: Fuzz, packets: list[tuple[int, bytes]]) -> None:
    """Run the packets on a tracing Python switch and keep the keys each table looked up,
    so entries made from them are hit (a random key rarely is). Twice: the second run finds
    the tables the first run's entries lead to."""
    class Keys(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.msg if isinstance(record.msg, str) else ""
            if msg.startswith("table ") and isinstance(record.args, tuple) and len(record.args) > 1:
                fuzz.keys.setdefault(msg[6:msg.index(": %s")], []).append(record.args[1])

    trace = logging.getLogger("p4sim.trace")
    handler, level, propagate = Keys(), trace.level, trace.propagate
    trace.addHandler(handler)
    trace.setLevel(logging.INFO)
    trace.propagate = False
    try:
        for _ in range(2):
            sw = Switch(program, cpu_port=CPU_PORT, seed=SEED, backend="python", trace=True)
            setup_state(sw, Fuzz(program, SEED), fuzz.keys)
            for port, data in packets:
                sw.process(port, data)
    finally:
        trace.removeHandler(handler)
        trace.setLevel(level)
        trace.propagate = propagate


def setup_state(sw: Any, fuzz: Fuzz, keys: dict[str, list[tuple]]) -> None:
    """Entries (many from `keys`, lookups seen), defaults, profiles, value sets, groups,
    sessions, registers and meters, each write made the same way on both switches (a
    refused one is refused on both)."""
    state, info, rng = sw.state, fuzz.info, fuzz.rng
    fuzz.keys = keys
    for name, profile in state.action_profiles.items():
        tinfo = info.tables[profile.info.tables[0]]
        for member in range(1, 6):
            profile.insert_member(member, *fuzz.action(tinfo, default=False))
        if profile.info.with_selector:
            for group in range(1, 4):
                profile.write_group(group, rng.sample(range(1, 6), rng.randint(1, 4)), 0, insert=True)
    for name, table in state.tables.items():
        t = table.info
        if t.entries_are_const:
            continue
        for _ in range(rng.randint(2, 16)):
            entry = TableEntry(fuzz.entry_match(name, t.match_fields), "",
                               priority=rng.randint(1, 50) if t.needs_priority else 0)
            if t.implementation:
                if state.action_profiles[t.implementation].info.with_selector and rng.random() < 0.5:
                    entry.group = rng.randint(1, 3)
                else:
                    entry.member = rng.randint(1, 5)
            else:
                entry.action, entry.args = fuzz.action(t, default=False)
            try:
                table.insert(entry)
            except StateError:
                pass
        if not t.const_default_action and not t.implementation and rng.random() < 0.5:
            table.set_default(*fuzz.action(t, default=True))
    for name, vs in state.value_sets.items():
        vs.set([tuple(fuzz.match(f, None) for f in vs.info.match_fields)
                for _ in range(rng.randint(0, min(4, vs.info.size)))])
    ports = [rng.randint(0, 7) for _ in range(4)] + [CPU_PORT]
    for gid in sorted(set(fuzz.pool.get(16, [])[:8] + [1, 2, 3, 10])):
        state.multicast_groups[gid] = [(rng.choice(ports), rng.getrandbits(16)) for _ in range(rng.randint(0, 3))]
    for sid in sorted(set(fuzz.pool.get(32, [])[:8] + [1, 2, 5, 99, 100])):
        state.clone_sessions[sid] = CloneSession([(rng.choice(ports), rng.getrandbits(16))
                                                  for _ in range(rng.randint(1, 2))],
                                                 packet_length_bytes=rng.choice([0, 0, 30]))
    for reg in state.registers.values():
        for _ in range(min(reg.info.size, 8)):
            reg.write(rng.randrange(reg.info.size), fuzz.value(reg.info.bitwidth))
    for meters in state.meters.values():           # no refill: the colours do not depend on time
        for i in range(meters.info.size):
            meters.set_config(i, 0, rng.randint(0, 3000), 0, rng.randint(0, 3000))


def snapshot(sw: Any) -> dict:
    s = sw.state
    return {
        "registers": {n: list(r.values) for n, r in s.registers.items()},
        "counters": {n: (list(c.packets), list(c.bytes)) for n, c in s.counters.items()},
        # An entry made its creation time its last hit (unfrozen); a hit makes it the frozen clock.
        "direct": {n: sorted((e.handle, e.packets, e.bytes, e.last_hit_ns == FROZEN_NS) for e in t.entries())
                   for n, t in s.tables.items()},
        "stats": sw.stats,
    }


@pytest.mark.parametrize("path", PROGRAM_FILES, ids=lambda p: p.stem)
def test_c_backend_sends_what_the_python_backend_sends(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "monotonic_ns", lambda: FROZEN_NS)
    program = compile_file(str(path))
    digests: dict[str, list] = {"python": [], "c": []}
    switches = {b: Switch(program, cpu_port=CPU_PORT, seed=SEED, backend=b,
                          on_digest=lambda n, v, b=b: digests[b].append((n, v))) for b in digests}
    c = switches["c"]
    assert isinstance(c, CSwitch), f"{path.name} fell back to the Python backend"
    c._core.lib.p4s_core_set_clock(c._core.ptr, FROZEN_NS)
    try:
        fuzz = Fuzz(program, SEED + 1)
        seeds = fuzz.seeds(SEEDS)
        packets = [(fuzz.rng.choice([0, 1, 2, 3, 5, 7, CPU_PORT]), fuzz.packet(seeds)) for _ in range(PACKETS)]
        harvest_keys(program, fuzz, packets)
        for sw in switches.values():
            setup_state(sw, Fuzz(program, SEED), fuzz.keys)
        for i, (port, data) in enumerate(packets):
            py, cc = (sw.process(port, data) for sw in switches.values())
            assert cc == py, f"packet {i} on port {port}: {data.hex()}"
        assert digests["c"] == digests["python"]
        assert snapshot(c) == snapshot(switches["python"])
    finally:
        c.close()
