"""Differential testing of p4sim's backends without BMv2: a seeded generator of small v1model
programs, each run with random packets and table entries on every backend in
p4sim.backends.BACKENDS (and on the Python backend with tracing on, and without its
speed-ups: both generate other code), comparing every packet out, the registers and the error counts.

A generated program is plain P4_16 that p4c accepts: typed expressions of every width 1..64,
bit and int, with casts, slices, concatenation, saturating and wrapping arithmetic, shifts
by constants and by run-time amounts, `?:`, calls of functions with inout parameters (side
effects inside expressions), a header stack filled by a sub-parser, a table with entries,
a register. Any difference between two runs is a bug in one of them; so is a packet that
makes a switch fail (`stats["errors"]`).

    PYTHONPATH=. .venv/bin/python tests/p4sim/p4fuzz.py --seed 7 --minutes 10   (make fuzz-p4sim)
"""
from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from p4sim import Switch, compile_file
from p4sim.backends import BACKENDS
from p4sim.backends.python import PythonSwitch
from p4sim.state import TableEntry

log = logging.getLogger("p4fuzz")

PLAIN = "python-plain"           # the Python backend without its speed-ups
STACK = 3                        # elements of the generated header stack
Type = tuple[int, bool]          # (width, signed)


@dataclass
class Case:
    """One generated program and what to run it with."""
    seed: str
    source: str
    packets: list[bytes]
    entries: list[tuple[int, str, tuple[int, ...]]]      # (key, action, args) of table t
    key_width: int
    action_params: dict[str, list[int]]                  # action -> widths of its parameters


@dataclass
class Outcome:
    outputs: list[list[tuple[int, str]]] = field(default_factory=list)
    registers: list[int] = field(default_factory=list)
    errors: int = 0


def tname(t: Type) -> str:
    return f"{'int' if t[1] else 'bit'}<{t[0]}>"


class Generator:
    """Random typed P4 expressions and statements over a fixed set of variables."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        widths = [rng.choice([1, 2, 3, 5, 7, 8, 9, 12, 16, 17, 31, 32, 33, 48, 63, 64]) for _ in range(5)]
        self.fields: list[tuple[str, Type]] = [(f"f{i}", (w, rng.random() < 0.4)) for i, w in enumerate(widths)]
        self.pad = -sum(widths) % 8
        self.locals: list[tuple[str, Type]] = [(f"l{i}", (rng.choice([1, 4, 8, 13, 16, 32, 40, 64]), rng.random() < 0.4))
                                               for i in range(3)]
        self.functions: dict[Type, str] = {}
        self.depth_budget = 0

    # ---- expressions ------------------------------------------------------------------
    def variables(self) -> list[tuple[str, Type]]:
        return [(f"hdr.i.{n}", t) for n, t in self.fields] + self.locals + [("hdr.s[1].v", (8, False)),
                                                                              ("meta.m", (16, False))]

    def lvalues(self, t: Type | None = None) -> list[tuple[str, Type]]:
        return [(n, vt) for n, vt in self.variables() if t is None or vt == t]

    def literal(self, t: Type) -> str:
        w, signed = t
        v = self.rng.choice([0, 1, (1 << w) - 1, 1 << (w - 1), self.rng.getrandbits(w)])
        return f"((int<{w}>){w}w{v})" if signed else f"{w}w{v}"

    def convert(self, e: str, src: Type, dst: Type) -> str:
        """e of type src as a dst, through casts p4c accepts (int<->bit only at one width)."""
        if src == dst:
            return e
        (sw, ss), (dw, ds) = src, dst
        if ss and not ds:
            e, src = f"((bit<{sw}>){e})", (sw, False)
        elif not ss and ds:
            e = f"((int<{dw}>)(int<{sw}>){e})" if sw != dw else f"((int<{dw}>){e})"
            return e
        return f"(({tname(dst)}){e})" if src != dst else e

    def expr(self, t: Type, depth: int = 3) -> str:
        w, signed = t
        r = self.rng.random()
        if depth <= 0 or r < 0.2:
            if self.rng.random() < 0.3:
                return self.literal(t)
            name, vt = self.rng.choice(self.variables())
            return self.convert(name, vt, t)
        d = depth - 1
        if r < 0.45:
            op = self.rng.choice(["+", "-", "*", "&", "|", "^", "|+|", "|-|"])
            return f"({self.expr(t, d)} {op} {self.expr(t, d)})"
        if r < 0.52:
            return f"({self.rng.choice(['~', '-'])}{self.expr(t, d)})"
        if r < 0.6:
            if self.rng.random() < 0.5:
                return f"({self.expr(t, d)} {self.rng.choice(['<<', '>>'])} {self.rng.randrange(0, w + 2)})"
            return f"({self.expr(t, d)} {self.rng.choice(['<<', '>>'])} {self.expr((8, False), d)})"
        if r < 0.68 and w >= 2:
            w1 = self.rng.randrange(1, w)
            return self.convert(f"({self.expr((w1, False), d)} ++ {self.expr((w - w1, False), d)})", (w, False), t)
        if r < 0.76:
            wider = self.rng.randrange(w, 65)
            lo = self.rng.randrange(0, wider - w + 1)
            inner = f"({self.expr((wider, False), d)})[{lo + w - 1}:{lo}]"
            return self.convert(inner, (w, False), t)
        if r < 0.84:
            return f"({self.cond(d)} ? {self.expr(t, d)} : {self.expr(t, d)})"
        if r < 0.94:
            targets = self.lvalues(t)
            if targets:
                return f"{self.function(t)}({self.rng.choice(targets)[0]}, {self.expr(t, d)})"
        src = (self.rng.randrange(1, 65), self.rng.random() < 0.5)
        return self.convert(self.expr(src, d), src, t)

    def cond(self, depth: int = 2) -> str:
        r = self.rng.random()
        if depth <= 0 or r < 0.6:
            t = self.rng.choice([vt for _, vt in self.variables()])
            op = self.rng.choice(["==", "!=", "<", "<=", ">", ">="])
            return f"({self.expr(t, depth)} {op} {self.expr(t, depth)})"
        if r < 0.9:
            return f"({self.cond(depth - 1)} {self.rng.choice(['&&', '||'])} {self.cond(depth - 1)})"
        return f"(!{self.cond(depth - 1)})"

    def function(self, t: Type) -> str:
        """A function with a side effect on its inout parameter, one per type."""
        if t not in self.functions:
            self.functions[t] = f"fn{len(self.functions)}"
        return self.functions[t]

    def function_decls(self) -> str:
        out = []
        for t, name in self.functions.items():
            op1, op2 = self.rng.choice(["+", "^", "|-|", "*"]), self.rng.choice(["-", "&", "|+|", "|"])
            out.append(f"{tname(t)} {name}(inout {tname(t)} x, in {tname(t)} y) "
                       f"{{ x = x {op1} y; return x {op2} y; }}")
        return "\n".join(out)

    # ---- statements ---------------------------------------------------------------------
    def statement(self, depth: int = 2) -> str:
        r = self.rng.random()
        if depth > 0 and r < 0.15:
            body = " ".join(self.statement(depth - 1) for _ in range(self.rng.randrange(1, 3)))
            other = " ".join(self.statement(depth - 1) for _ in range(self.rng.randrange(0, 2)))
            return f"if {self.cond()} {{ {body} }} else {{ {other} }}"
        if r < 0.22:
            i = self.rng.randrange(STACK)
            return self.rng.choice([f"hdr.s[{i}].setValid();", f"hdr.s[{i}].setInvalid();",
                                    "hdr.s.push_front(1);", "hdr.s.pop_front(1);"])
        if r < 0.27:
            return f"r.write((bit<32>){self.expr((2, False), 1)}, {self.expr((32, False), 2)});"
        if r < 0.3:
            return f"r.read(meta.m32, (bit<32>){self.expr((2, False), 1)}); meta.m = meta.m32[15:0];"
        if r < 0.36:
            # A read-modify-write of one cell; what the index reads may change in between.
            name, t = self.rng.choice([(n, vt) for n, vt in self.lvalues() if vt[0] >= 2])
            index = f"(bit<32>){self.convert(name, t, (t[0], False))}[1:0]"
            middle = self.statement(0) if self.rng.random() < 0.5 else f"{name} = {self.expr(t, 1)};"
            return f"r.read(meta.m32, {index}); {middle} r.write({index}, meta.m32 + {self.expr((32, False), 1)});"
        if r < 0.42:
            # A temporary used once, with a statement between that may write what it reads.
            name, t = self.rng.choice(self.lvalues())
            return f"{{ {tname(t)} tmp = {self.expr(t, 1)}; {self.statement(0)} {name} = tmp; }}"
        name, t = self.rng.choice(self.lvalues())
        if self.rng.random() < 0.2 and t[0] >= 2:
            hi = self.rng.randrange(1, t[0])
            lo = self.rng.randrange(0, hi + 1)
            return f"{name}[{hi}:{lo}] = {self.expr((hi - lo + 1, False))};"
        return f"{name} = {self.expr(t)};"


def generate(seed: str, packets: int = 12) -> Case:
    rng = random.Random(seed)
    g = Generator(rng)
    key_name, key_t = rng.choice(g.fields)
    actions = {"MyIngress.set_a": [key_t[0]], "MyIngress.set_b": [8, 16]}
    set_a = f"action set_a(bit<{key_t[0]}> p) {{ {g.statement(1)} hdr.i.{key_name} = " \
            f"{g.convert('p', (key_t[0], False), key_t)}; }}"
    set_b = f"action set_b(bit<8> p, bit<16> q) {{ meta.m = q; hdr.s[0].v = p; {g.statement(1)} }}"
    body = "\n        ".join(g.statement() for _ in range(rng.randrange(4, 10)))
    after = "\n        ".join(g.statement() for _ in range(rng.randrange(1, 4)))
    fields = " ".join(f"{tname(t)} {n};" for n, t in g.fields) + (f" bit<{g.pad}> pad;" if g.pad else "")
    local_decls = "\n    ".join(f"{tname(t)} {n} = {g.literal(t)};" for n, t in g.locals)
    source = f"""#include <core.p4>
#include <v1model.p4>
header in_t {{ {fields} }}
header e_t {{ bit<7> v_more_pad; bit<1> more; bit<8> v; }}
struct H {{ in_t i; e_t[{STACK}] s; }}
struct M {{ bit<16> m; bit<32> m32; bit<8> n; }}
{g.function_decls()}
parser Sub(packet_in pkt, inout e_t[{STACK}] s, inout bit<8> n) {{
    state start {{ pkt.extract(s.next); n = n + 1; transition select(s.last.more) {{ 1: start; default: accept; }} }}
}}
parser MyParser(packet_in pkt, out H hdr, inout M meta, inout standard_metadata_t sm) {{
    Sub() sub;
    state start {{ pkt.extract(hdr.i); transition select(hdr.i.f0[0:0]) {{ 1: stack; default: accept; }} }}
    state stack {{ sub.apply(pkt, hdr.s, meta.n); transition accept; }}
}}
control MyVerify(inout H hdr, inout M meta) {{ apply {{ }} }}
control MyIngress(inout H hdr, inout M meta, inout standard_metadata_t sm) {{
    {local_decls}
    register<bit<32>>(4) r;
    {set_a}
    {set_b}
    table t {{ key = {{ hdr.i.{key_name} : exact; }} actions = {{ set_a; set_b; NoAction; }} default_action = NoAction(); }}
    apply {{
        sm.egress_spec = 1;
        {body}
        if (t.apply().hit) {{ meta.n = meta.n + 1; }}
        {after}
        hdr.s[2].v = meta.n ^ meta.m[7:0];
    }}
}}
control MyEgress(inout H hdr, inout M meta, inout standard_metadata_t sm) {{ apply {{ }} }}
control MyCompute(inout H hdr, inout M meta) {{ apply {{ }} }}
control MyDeparser(packet_out pkt, in H hdr) {{ apply {{ pkt.emit(hdr.i); pkt.emit(hdr.s); }} }}
V1Switch(MyParser(), MyVerify(), MyIngress(), MyEgress(), MyCompute(), MyDeparser()) main;
"""
    in_bits = sum(t[0] for _, t in g.fields) + g.pad
    key_at = in_bits - sum(t[0] for n, t in g.fields[:g.fields.index((key_name, key_t)) + 1])
    pkts = []
    for _ in range(packets):
        head = bytes(rng.getrandbits(8) for _ in range(in_bits // 8))
        elements = bytes(b for _ in range(rng.randrange(0, STACK + 2))
                         for b in (rng.choice([0, 1, 0x81]), rng.getrandbits(8)))
        pkts.append(head + elements + bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 4))))
    # Entries keyed by what some packets carry, so that lookups hit and miss.
    keys = [(int.from_bytes(p[:in_bits // 8], "big") >> key_at) & ((1 << key_t[0]) - 1)
            for p in rng.sample(pkts, 3)]
    entries = [(k, "MyIngress.set_a", (rng.getrandbits(key_t[0]),)) if rng.random() < 0.5 else
               (k, "MyIngress.set_b", (rng.getrandbits(8), rng.getrandbits(16))) for k in dict.fromkeys(keys)]
    return Case(seed, source, pkts, entries, key_t[0], actions)


def run(case: Case, path: Path, backend: str, trace: bool) -> Outcome:
    if backend == PLAIN:
        sw = PythonSwitch(compile_file(str(path)), trace=trace, seed=1, optimize=False)
    else:
        sw = Switch(compile_file(str(path)), backend=backend, trace=trace, seed=1)
    table = sw.state.tables["MyIngress.t"]
    for key, action, args in case.entries:
        table.insert(TableEntry((("exact", key),), action, args))
    out = Outcome()
    for data in case.packets:
        out.outputs.append([(port, bytes(d).hex()) for port, d in sw.process(0, data)])
    out.registers = list(sw.state.registers["MyIngress.r"].values)
    out.errors = sw.stats["errors"]
    return out


def variants() -> list[tuple[str, bool]]:
    """Every backend, the Python backend with tracing on (its generated code differs) and
    its plain twin (no speed-ups: single-use temporaries, aliases, register index reuse)."""
    return [(b, False) for b in BACKENDS] + [("python", True), (PLAIN, False)]


def check(case: Case, folder: Path) -> str | None:
    """None if every variant agrees and none failed on a packet, else what differed."""
    path = folder / f"fuzz_{case.seed.replace(':', '_')}.p4"
    path.write_text(case.source)
    results = {}
    tracer = logging.getLogger("p4sim.trace")
    level, tracer.level = tracer.level, logging.CRITICAL      # the trace code runs, its lines go nowhere
    try:
        for backend, trace in variants():
            results[(backend, trace)] = run(case, path, backend, trace)
    finally:
        tracer.setLevel(level)
    (ref_name, ref), *others = results.items()
    if ref.errors:
        return f"{path}: {ref_name} failed on {ref.errors} packets"
    for name, got in others:
        for what in ("outputs", "registers", "errors"):
            if getattr(got, what) != getattr(ref, what):
                return f"{path}: {what} differ between {ref_name} and {name}"
    path.unlink()
    return None


def fuzz(seed: int, seconds: float, folder: Path, at_least: int = 1) -> tuple[int, list[str]]:
    """Programs seed:0, seed:1, ... until the time is up (and at least `at_least`)."""
    start, n, failures = time.monotonic(), 0, []
    while n < at_least or time.monotonic() - start < seconds:
        problem = check(generate(f"{seed}:{n}"), folder)
        if problem:
            failures.append(problem)
            log.error("%s", problem)
        n += 1
    return n, failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Differential testing of p4sim's backends on generated programs.")
    ap.add_argument("--seed", type=int, default=1, help="the first program is SEED:0, then SEED:1, ... (default 1)")
    ap.add_argument("--minutes", type=float, default=5.0, help="how long to generate programs (default 5)")
    ap.add_argument("--out", type=Path, default=None,
                    help="where failing programs are kept (default: a new temporary directory)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    folder = args.out or Path(tempfile.mkdtemp(prefix="p4fuzz-"))
    folder.mkdir(parents=True, exist_ok=True)
    n, failures = fuzz(args.seed, args.minutes * 60, folder)
    log.info("%d programs on %s: %d failed (kept in %s)", n,
             ", ".join(f"{b}{'+trace' if t else ''}" for b, t in variants()), len(failures), folder)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
