"""Run the system C preprocessor over a P4 file, as p4c does, and map positions back.

Our own core.p4/v1model.p4 (p4sim/include) answer `#include <core.p4>`; cpp's
`# line "file"` markers are kept so errors name the original file and line.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import P4Error
from .ast import Pos

INCLUDE_DIR = Path(__file__).resolve().parent.parent / "include"
_MARKER = re.compile(r'#\s*(?:line\s+)?(\d+)\s+"((?:\\.|[^"\\])*)"')


def preprocess(path: str, include_dirs: tuple[str, ...] = (), defines: tuple[str, ...] = ()) -> str:
    """The preprocessed text of `path`, with # line markers; P4Error if cpp fails."""
    source = Path(path)
    if not source.is_file():
        raise P4Error("no such file", str(path), 0, 0)
    cpp = shutil.which("cpp")
    if cpp is None:
        raise P4Error("the C preprocessor `cpp` is not installed (apt-get install cpp)", str(path))
    cmd = [cpp, "-E", "-x", "c", "-undef", "-nostdinc", "-w", "-I", str(INCLUDE_DIR)]
    for d in include_dirs:
        cmd += ["-I", d]
    for d in defines:
        cmd += ["-D", d]
    cmd.append(str(source))
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        # cpp reports "file:line:col: error: msg"; surface its first error line as ours.
        first = next((ln for ln in result.stderr.splitlines() if "error" in ln), result.stderr.strip())
        m = re.match(r"(.*?):(\d+):(\d+): (?:fatal )?error: (.*)", first)
        if m:
            raise P4Error(m.group(4), m.group(1), int(m.group(2)), int(m.group(3)))
        raise P4Error(f"preprocessor failed: {first}", str(path))
    return result.stdout


@dataclass
class SourceMap:
    """Maps a line of preprocessed text to (file, line) in the original sources."""
    files: list[str]
    lines: list[int]

    @classmethod
    def of(cls, text: str, default_file: str) -> SourceMap:
        files, lines = [default_file], [0]        # index 0 unused: lark lines are 1-based
        cur_file, cur_line = default_file, 1
        for raw in text.split("\n"):
            m = _MARKER.match(raw) if raw.startswith("#") else None
            files.append(cur_file)
            lines.append(cur_line)
            if m:
                cur_line, cur_file = int(m.group(1)), m.group(2)
            else:
                cur_line += 1
        return cls(files, lines)

    def pos(self, line: int, column: int) -> Pos:
        if 0 < line < len(self.lines):
            return Pos(self.files[line], self.lines[line], column)
        return Pos(self.files[-1], self.lines[-1], column)
