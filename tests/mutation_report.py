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
