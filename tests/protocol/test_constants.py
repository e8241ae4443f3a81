"""protocol/ and p4src/allreduce.p4 state the same protocol: the program's constants, read by
p4sim's frontend, equal the module's, and so do the sizes the program's registers and headers
imply (contributor bitmap, header size, default K).
"""
from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

import protocol
from p4sim import compile_file
from p4sim.frontend.checker import Checker
from p4sim.frontend.parser import parse_text
from p4sim.frontend.preprocess import preprocess

PROGRAM = Path(__file__).resolve().parents[2] / "p4src" / "allreduce.p4"

# Every number both sides must know; each must be a constant of the program.
SHARED = ("INC_PORT", "AGG_IP", "AGG_MAC", "INC_VERSION", "POOL_SIZE", "JOB_LEAF",
          "OP_CONTRIB", "OP_RESULT", "OP_JOIN", "OP_ACK", "OP_WINDOW_ACK",
          "COLL_ALLREDUCE", "COLL_REDUCE", "COLL_BROADCAST", "COLL_BARRIER",
          "REDUCE_SUM", "REDUCE_MIN", "REDUCE_MAX",
          "FLAG_OVERFLOW", "FLAG_RESENT", "FLAG_PARTIAL", "FLAG_RETRANSMIT", "FLAG_EAGER",
          "FLAG_WINDOW_ACKS")


def program_constants(path: Path = PROGRAM) -> dict[str, int]:
    """The program's top-level `const` declarations and their values."""
    checker = Checker(parse_text(preprocess(str(path)), str(path)))
    checker.check()
    return {name: sym.value for name, sym in checker.top.names.items() if sym.kind == "const"}


def protocol_value(name: str) -> int:
    """The module's value as the program writes it: addresses as integers."""
    value = getattr(protocol, name)
    if name == "AGG_IP":
        return int(ipaddress.IPv4Address(value))
    if name == "AGG_MAC":
        return int(value.replace(":", ""), 16)
    return value


@pytest.fixture(scope="module")
def p4_constants() -> dict[str, int]:
    return program_constants()


@pytest.mark.parametrize("name", SHARED)
def test_program_constant_equals_protocol(p4_constants: dict[str, int], name: str):
    assert name in p4_constants, f"allreduce.p4 declares no const {name}"
    assert p4_constants[name] == protocol_value(name)


def test_every_program_constant_named_in_protocol_agrees(p4_constants: dict[str, int]):
    """A constant the program adds later under a protocol name cannot drift either."""
    both = sorted(set(p4_constants) & set(vars(protocol)))
    assert set(SHARED) <= set(both)
    assert {n: p4_constants[n] for n in both} == {n: protocol_value(n) for n in both}


def test_program_sizes_match_protocol():
    """The contributor bitmap holds MAX_WORKERS bits, the INC header has HEADER_SIZE bytes and,
    built without INC_K, the program carries DEFAULT_ELEMENTS_PER_PACKET elements."""
    program = compile_file(str(PROGRAM))
    registers = {name.rpartition(".")[2]: r for name, r in program.info.registers.items()}
    assert registers["slot_seen"].bitwidth == protocol.MAX_WORKERS
    assert registers["slot_values"].size == registers["slot_seen"].size * protocol.DEFAULT_ELEMENTS_PER_PACKET
    assert registers["slot_seen"].size == 2 * protocol.POOL_SIZE
    inc_header = next(t for t in program.checked.structs if t.name == "inc_t")
    assert inc_header.width == 8 * protocol.HEADER_SIZE


def test_the_recommended_k_per_target_fits_a_standard_frame_and_gives_way_to_the_one_asked():
    for target, k in protocol.RECOMMENDED_ELEMENTS_PER_PACKET.items():
        assert protocol.elements_per_packet_for(target, 1500) == k
        assert protocol.elements_per_packet_problem(k, 1500) is None
    assert protocol.elements_per_packet_for("p4sim", 9000, asked=1024) == 1024
    # A small MTU holds fewer: the recommendation shrinks to what fits (a 600-byte frame: 128).
    assert protocol.elements_per_packet_for("p4sim", 600) == 128
    assert protocol.elements_per_packet_problem(128, 600) is None
