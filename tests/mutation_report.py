"""`python -m tests.mutation_report`: the score of the last `mutmut run` (make mutation) per module,
and every mutant no test killed with its diff and, where it is an equivalent change, why: Markdown
for docs/results/mutation.md. Reads mutmut's state in mutants/.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code

from hosts.args import output_file

REPO = Path(__file__).resolve().parents[1]
KILLED = {"killed", "timeout", "segfault", "caught by type check"}
# Mutants that change no behaviour any caller can see, by name (mutmut numbers them per function).
E = "p4sim.backends.python.expressions.xǁExprGenǁ"     # how mutmut names a method's mutants
FLOAT64_DEFAULT = "Equivalent: astype(None) is astype(float64), numpy's default dtype."
EQUIVALENT: dict[str, str] = {
    **dict.fromkeys(("hosts.numerics.x_from_words__mutmut_4", "hosts.numerics.x_from_words__mutmut_6"),
                    "Equivalent: the dtype argument of ascontiguousarray only converts, and the words every "
                    "caller passes are int32 already (as_words' output, or the wire's)."),
    **dict.fromkeys(("hosts.numerics.x_to_ordered__mutmut_5", "hosts.numerics.x_to_ordered__mutmut_7"),
                    "Equivalent: past the int32 return only float32 arrays arrive (reduce_op refuses min and "
                    "max on other dtypes), and ascontiguousarray of float32 to float32 converts nothing."),
    "hosts.numerics.x_from_sums__mutmut_11": FLOAT64_DEFAULT,
    "hosts.numerics.x_from_sums__mutmut_12": "Equivalent: axis +1 is axis -1 for the 2-D rows (chunk x element) "
                                             "the one caller (hosts/agent.py) passes.",
    **dict.fromkeys(("hosts.numerics.x_result_errors__mutmut_64", "hosts.numerics.x_result_errors__mutmut_66"),
                    "Equivalent: exact is float64 (int64 for int32), so numpy widens the result exactly "
                    "before subtracting whether or not it was converted first."),
    "hosts.quantize.x_quantize__mutmut_2": FLOAT64_DEFAULT,
    "hosts.quantize.x_dequantize__mutmut_5": FLOAT64_DEFAULT,
    **dict.fromkeys(("hosts.quantize.x_chunk_exponents__mutmut_5", "hosts.quantize.x_chunk_exponents__mutmut_7"),
                    "Equivalent: frexp gives the same exponent in the chunks' own format (checked for every "
                    "float16 and bfloat16 bit pattern, every float32 subnormal and 10^6 random float32s)."),
    # p4sim's Python code generator: generated code that computes the same value.
    **dict.fromkeys([f"{E}x_Slice__mutmut_12", f"{E}cut_fields__mutmut_19"],
                    "Equivalent: `(v >> 0) & m` is `v & m`."),
    f"{E}x_ListExpr__mutmut_7": "Equivalent: also copies a fresh struct value, which nothing else refers to.",
    f"{E}x_Cast__mutmut_7": "Equivalent: a bool compared `!= 0` is itself.",
    **dict.fromkeys([f"{E}x_Cast__mutmut_{n}" for n in (9, 10, 12, 23, 27, 28)],
                    "Equivalent: masks (or sign-flips after masking) a value already in range: every bit<W> and "
                    "enum value p4sim holds is in [0, 2^W), so widening or same-width casts need no mask."),
    **dict.fromkeys([f"{E}x_Binary__mutmut_{n}" for n in (120, 123, 126)],
                    "Equivalent: a constant shift by W or more gives 0 through wrap() or the run-time shl() too."),
    **dict.fromkeys([f"{E}x_Binary__mutmut_{n}" for n in (57, 58, 59, 60, 61, 62, 67, 68, 69)],
                    "Equivalent: drops one operator from the `x op 0` shortcut; the full wrapped computation "
                    "gives the same value."),
    **dict.fromkeys([f"{E}x_Binary__mutmut_{n}" for n in (26, 27, 28, 29)],
                    "Equivalent: a comparison that misses this branch reaches the bool-typed one, which writes "
                    "the same `(a op b)`."),
    **dict.fromkeys([f"{E}x_Binary__mutmut_{n}" for n in (35, 37, 38, 40)],
                    "Equivalent: `a ++ b` is already in range: the mask of an unsigned b and the wrap of the "
                    "concatenation (signed a shifted, OR a non-negative b) change no value."),
    **dict.fromkeys([f"{E}member_ref__mutmut_{n}" for n in (7, 8, 9)],
                    "Equivalent: the local alias is a speed-up only; without it the same object is read through "
                    "the parameter (frame is set only on control-level variables, never on parameters)."),
    **dict.fromkeys([f"{E}x_Member__mutmut_{n}" for n in (26, 27, 28, 29)],
                    "Equivalent: stack.size is a compile-time constant, which expr() returns folded before "
                    "x_Member runs; no other member name reaches this line."),
    f"{E}x_Call__mutmut_50": "Equivalent: a packet_in is always a parameter name, and x_NameRef does not use ctx.",
}


def results(mutants: Path) -> dict[str, dict[str, str]]:
    """module -> {mutant name: status}, from mutmut's .meta files."""
    found: dict[str, dict[str, str]] = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        module = str(meta.relative_to(mutants)).removesuffix(".meta")
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        found[module] = {name: status_by_exit_code[code] for name, code in sorted(codes.items())}
    return found


def diff(name: str, module: str) -> str:
    """The mutant's change, as `mutmut show` prints it (mutmut reads mutants/ from the working folder)."""
    return get_diff_for_mutant(name, path=module)


def report(found: dict[str, dict[str, str]], command: str) -> str:
    lines = ["# Mutation testing", "",
             f"`{command}` ([mutmut](https://github.com/boxed/mutmut), pinned in requirements-dev.txt): each "
             "mutant changes one operator, constant or call in the module and runs the fast tests that cover "
             "it (pyproject.toml, `[tool.mutmut]`). Killed: some test failed (or timed out). Survived: every "
             "test passed, a gap in the tests unless the change is equivalent (below, with why). No tests: "
             "no selected test runs that code.", "",
             "| module | mutants | killed | survived | no tests | not checked | score |", "|---|---|---|---|---|---|---|"]
    for module, statuses in found.items():
        counts = Counter(statuses.values())
        killed = sum(counts[s] for s in KILLED)
        checked = len(statuses) - counts["not checked"] - counts["skipped"]
        equivalent = sum(1 for name, s in statuses.items() if s != "killed" and name in EQUIVALENT)
        score = f"{100 * (killed + equivalent) / checked:.1f}%" if checked else "-"
        lines.append(f"| {module} | {len(statuses)} | {killed} | {counts['survived']} | {counts['no tests']} | "
                     f"{counts['not checked']} | {score} |")
    lines += ["", "Score: (killed + equivalent) / checked.", ""]
    for module, statuses in found.items():
        left = [name for name, s in statuses.items() if s in ("survived", "no tests")]
        if not left:
            continue
        lines += [f"## Not killed in {module}", ""]
        for name in left:
            why = EQUIVALENT.get(name, "not killed yet: a gap in the tests")
            lines += [f"### {name} ({statuses[name]})", "", why, "", "```diff", diff(name, module), "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.mutation_report", description=__doc__)
    ap.add_argument("-o", "--out", type=output_file, default=REPO / "docs" / "results" / "mutation.md",
                    help="the Markdown report (default docs/results/mutation.md)")
    ap.add_argument("--mutants", type=Path, default=REPO / "mutants", help="mutmut's work folder (default mutants/)")
    ap.add_argument("--command", default="make mutation", help="how the run was made, for the report")
    args = ap.parse_args(argv)
    os.chdir(args.mutants.resolve().parent)
    found = results(args.mutants)
    if not found:
        ap.error(f"no mutmut results in {args.mutants}: run make mutation first")
    args.out.write_text(report(found, args.command) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
