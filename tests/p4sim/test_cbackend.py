"""What the C backend adds to a switch: falling back to Python with one line (a construct it
cannot do, a failing compiler, no compiler), the pipeline the C dataplane drives (its process
function and context, new ones after every load, digests delivered from its thread), random
numbers as CPython's, state read and written in C memory, and no leaks.
"""
from __future__ import annotations

import logging
import os
import random
import threading
import time
from pathlib import Path

import pytest
from scapy.layers.l2 import Ether

from p4sim import Switch, compile_file
from p4sim.backends import default_backend
from p4sim.backends.c import CSwitch
from p4sim.backends.python import PythonSwitch
from p4sim.state import TableEntry
from tests.p4sim.oracles import H1_MAC, H2_MAC, PAYLOAD, mac

WIDE = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<200> wide; }
struct H { h_t h; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control V(inout H hdr, inout M m) { apply { } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    apply { hdr.h.wide = hdr.h.wide + 1; sm.egress_spec = 2; }
}
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control C(inout H hdr, inout M m) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


@pytest.fixture
def wide_program(tmp_path: Path):
    src = tmp_path / "wide.p4"
    src.write_text(WIDE)
    return compile_file(str(src))


def fallback_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "using the Python backend" in r.getMessage()]


def test_a_construct_c_cannot_do_runs_on_python_with_one_located_line(wide_program, caplog):
    with caplog.at_level(logging.WARNING):
        sw = Switch(wide_program, backend="c")
    assert isinstance(sw, PythonSwitch)
    [line] = fallback_lines(caplog)
    assert "wide.p4:4:" in line and "bit<200>" in line and "does not support" in line
    assert "Traceback" not in caplog.text
    out = sw.process(0, bytes(24) + b"\x00")
    assert out == [(2, bytes(24) + b"\x01")]


def test_a_c_switch_loading_such_a_program_runs_it_on_python(wide_program, caplog):
    sw = Switch(None, backend="c")
    told = []
    sw.add_pipeline_listener(told.append)
    try:
        with caplog.at_level(logging.WARNING):
            sw.load(wide_program)
        assert len(fallback_lines(caplog)) == 1
        assert sw.c_pipeline() is None
        assert sw.process(0, bytes(25)) == [(2, bytes(24) + b"\x01")]
        assert sw.stats["rx"] == 1 and sw.stats["tx"] == 1
        assert sw.state.info is wide_program.info
    finally:
        sw.close()
    assert told == []          # never a C pipeline to tell of


def test_a_failing_compiler_gives_one_line_with_its_first_error(p4program, tmp_path, monkeypatch, caplog):
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\necho 'prog.c:1:1: error: the compiler says no' >&2\necho 'more detail' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    monkeypatch.setenv("P4SIM_CACHE", str(tmp_path / "cache"))
    program = compile_file(str(Path(p4program("ipv4_router").source_file)))   # a fresh Program: no artifacts
    with caplog.at_level(logging.DEBUG, logger="p4sim"):
        sw = Switch(program, backend="c")
    assert isinstance(sw, PythonSwitch)
    [line] = fallback_lines(caplog)
    assert "error: the compiler says no" in line and "more detail" not in line
    assert "more detail" in caplog.text             # the whole output, at debug level
    assert "Traceback" not in caplog.text


def test_without_a_compiler_the_default_is_python_and_c_falls_back(p4program, tmp_path, monkeypatch, caplog):
    program = compile_file(str(Path(p4program("ipv4_router").source_file)))   # cpp runs now
    monkeypatch.delenv("P4SIM_BACKEND", raising=False)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))       # no cc, no gcc
    monkeypatch.setenv("P4SIM_CACHE", str(tmp_path / "cache"))
    assert default_backend() == "python"
    with caplog.at_level(logging.WARNING):
        sw = Switch(program, backend="c")
    assert isinstance(sw, PythonSwitch)
    assert "no C compiler" in fallback_lines(caplog)[0]


def test_the_default_backend_is_c_where_a_compiler_is_and_the_environment_chooses(monkeypatch):
    monkeypatch.delenv("P4SIM_BACKEND", raising=False)
    assert default_backend() == "c"
    monkeypatch.setenv("P4SIM_BACKEND", "python")
    assert isinstance(Switch(None), PythonSwitch)
    monkeypatch.setenv("P4SIM_BACKEND", "rust")
    with pytest.raises(ValueError, match="P4SIM_BACKEND"):
        default_backend()


def test_tracing_runs_on_python(p4program, caplog):
    with caplog.at_level(logging.INFO, logger="p4sim.backends"):
        sw = Switch(p4program("ipv4_router"), trace=True, backend="c")
    assert isinstance(sw, PythonSwitch) and "Python backend" in caplog.text


def call_pipeline(sw: CSwitch, pair: tuple[int, int], port: int, data: bytes) -> list[tuple[int, bytes]]:
    """Run a frame through the pipeline as the C dataplane does: the process function's address."""
    ffi = sw._core.ffi
    fn = ffi.cast("int (*)(void *, uint32_t, const char *, uint32_t, p4sim_outbuf *)", pair[0])
    out = ffi.new("p4sim_outbuf *")
    try:
        assert fn(ffi.cast("void *", pair[1]), port, data, len(data), out) == 0
        blob = ffi.buffer(out.data, out.used)[:] if out.used else b""
        return [(out.frames[i].port, blob[out.frames[i].offset:out.frames[i].offset + out.frames[i].len])
                for i in range(out.count)]
    finally:
        sw._core.lib.p4s_outbuf_release(out)


def router(sw: CSwitch) -> None:
    sw.state.tables["MyIngress.ipv4_lpm"].insert(
        TableEntry((("lpm", 0x0A000200, 24),), "MyIngress.ipv4_forward", (0x080000000002, 2)))


def test_the_dataplane_runs_packets_through_the_pipeline_functions(p4program):
    from tests.p4sim.oracles import routed, udp_packet
    sw = CSwitch(p4program("ipv4_router"))
    try:
        router(sw)
        sent = udp_packet("10.0.1.1", "10.0.2.2")
        pair = sw.c_pipeline()
        assert pair is not None
        expected = [(2, routed(sent, "08:00:00:00:00:02", sent[Ether].dst))]
        assert call_pipeline(sw, pair, 1, bytes(sent)) == sw.process(1, bytes(sent)) == expected
        assert sw.stats == {"rx": 2, "tx": 2, "dropped": 0, "malformed": 0, "errors": 0}
    finally:
        sw.close()


def test_listeners_get_each_new_pipeline_and_the_old_one_works_until_they_return(p4program):
    sw = CSwitch(p4program("ipv4_router"))
    first = sw.c_pipeline()
    told = []

    def listener(pair):
        # The replaced pipeline still runs packets while the listeners hear of the new one.
        told.append((pair, call_pipeline(sw, first, 1, bytes(60)) if pair is not None else None))

    sw.add_pipeline_listener(listener)
    try:
        sw.load(p4program("ipv4_router"))
        [(pair, out)] = told
        assert pair == sw.c_pipeline() != first
        assert out == []                          # the old pipeline ran it (no route: dropped)
    finally:
        sw.close()
    assert told[-1] == (None, None)              # closed: no pipeline any more


def test_digests_of_packets_the_dataplane_runs_reach_on_digest(p4program):
    got = []
    arrived = threading.Event()

    def on_digest(name, values):
        got.append((name, values))
        arrived.set()

    sw = CSwitch(p4program("digest_learning"), on_digest=on_digest)
    try:
        sw.state.multicast_groups[1] = [(1, 0), (2, 0)]
        sent = bytes(Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD)
        pair = sw.c_pipeline()
        assert len(call_pipeline(sw, pair, 3, sent)) == 2
        assert arrived.wait(10)
        assert got == [("mac_learn_digest_t", (mac(H1_MAC), 3))]
        # process() still hands its own digests over before it returns.
        arrived.clear()
        sw.process(4, sent)
        assert got[1:] == [("mac_learn_digest_t", (mac(H1_MAC), 4))]
    finally:
        sw.close()


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3, None])
def test_random_numbers_are_cpythons_for_a_seed(seed):
    sw = CSwitch(None, seed=seed)
    try:
        state = sw._core.ffi.new("uint32_t[625]")
        sw._core.lib.p4s_core_rng_state(sw._core.ptr, state)
        if seed is not None:
            assert list(state) == list(random.Random(seed).getstate()[1])
    finally:
        sw.close()


def test_registers_and_counters_read_and_write_c_memory(p4program):
    sw = CSwitch(p4program("register_rmw"))
    try:
        [reg] = sw.state.registers.values()
        cells = reg.values
        n = len(cells)
        cells[0] = 5
        cells[-1] = (1 << reg.info.bitwidth) + 3        # cut to the width, as a store in the pipeline
        assert cells[0] == 5 and cells[n - 1] == 3 and cells[1:3] == [0, 0]
        cells[:] = list(range(n))
        assert list(cells) == list(range(n)) and cells == list(range(n))
        with pytest.raises(IndexError):
            cells[n]
        with pytest.raises(ValueError):
            cells[:] = [1]
        with pytest.raises(TypeError):
            cells.append(1)
    finally:
        sw.close()


def test_closed_and_reloaded_switches_leave_no_threads_files_or_memory(p4program):
    program = compile_file(str(Path(__file__).parents[2] / "p4src/allreduce.p4"))

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def rss_kb() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGESIZE") // 1024

    def cycle() -> None:
        sw = CSwitch(program)
        sw.load(program)
        sw.c_pipeline()                       # starts the digest thread
        sw.process(1, bytes(100))
        sw.close()

    for _ in range(5):
        cycle()
    threads, files, rss = threading.active_count(), fds(), rss_kb()
    for _ in range(60):
        cycle()
    time.sleep(0.1)
    assert threading.active_count() == threads
    assert fds() == files
    assert rss_kb() - rss < 30_000, "each switch's C memory must be freed"
