"""The Python backend, p4sim's reference: the checked program becomes one generated Python
module (codegen, split by idea: layout, expressions, statements, externs, blocks) that
`PythonSwitch` (switch.py, the v1model pipeline and traffic manager) execs and runs.
It takes every program the frontend accepts, and --log-console traces through it.
"""
from __future__ import annotations

from typing import Any

from ...program import Program, internal_errors
from .codegen import CompiledCode, compile_program

__all__ = ["CompiledCode", "PythonSwitch", "python_code"]


def python_code(program: Program, trace: bool = False, optimize: bool = True) -> tuple[CompiledCode, Any]:
    """The program's generated module and its code object, built once per setting."""
    key = ("python", trace) if optimize else ("python", trace, "plain")
    if key not in program.artifacts:
        with internal_errors("compiling", program.source_file):
            cc = compile_program(program.checked, trace, optimize)
            obj = compile(cc.source, f"<p4sim:{program.source_file}>", "exec")
        program.artifacts[key] = (cc, obj)
    return program.artifacts[key]


from .switch import PythonSwitch  # noqa: E402  (switch.py imports python_code from here)
