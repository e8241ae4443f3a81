"""`python -m p4sim`: help, argument and P4 errors (exit codes, messages, no traceback),
`compile` output, and a switch process started with BMv2-style flags and stopped by SIGTERM.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from p4sim import Program, compile_file
from p4sim.p4info import build_p4info

PROGRAMS = Path(__file__).resolve().parents[1] / "p4programs"


def p4sim(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "p4sim", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_help_explains_the_simple_switch_flags():
    r = p4sim("--help")
    assert r.returncode == 0
    for flag in ("--interface", "--device-id", "--grpc-server-addr", "--cpu-port", "--pcap",
                 "--log-console", "--no-p4", "--thrift-port", "compile", "--slow {bmv2,bmv2-tenth}",
                 "--slow-pps", "--slow-queue", "--slow-latency-us", "--backend {c,python}"):
        assert flag in r.stdout


def test_compile_help():
    r = p4sim("compile", "--help")
    assert r.returncode == 0 and "p4info.txt" in r.stdout


@pytest.mark.parametrize("args", [["--bogus", "--no-p4"], [], ["--no-p4", "-i", "eth0"],
                                  ["--no-p4", "--device-id", "one"], ["compile", "x.p4"],
                                  ["--no-p4", "--slow", "tofino"], ["--no-p4", "--slow-queue", "8"],
                                  ["--no-p4", "--slow", "bmv2", "--slow-pps", "-1"], ["--no-p4", "--backend", "java"]])
def test_bad_arguments_print_usage_and_exit_2(args):
    r = p4sim(*args)
    assert r.returncode == 2
    assert "usage:" in r.stderr and "Traceback" not in r.stderr


def test_bad_p4_prints_located_error_and_exits_1(tmp_path):
    bad = tmp_path / "bad.p4"
    bad.write_text("#include <core.p4>\ncontrol c( {\n")
    for args in ([str(bad)], ["compile", str(bad), "-o", str(tmp_path / "out")]):
        r = p4sim(*args)
        assert r.returncode == 1
        assert r.stderr.startswith(f"{bad}:2:"), r.stderr
        assert "error" in r.stderr and "Traceback" not in r.stderr


def test_missing_program_file_exits_1_without_traceback(tmp_path):
    r = p4sim(str(tmp_path / "nope.p4"))
    assert r.returncode == 1 and "nope.p4" in r.stderr and "Traceback" not in r.stderr


def test_compile_writes_p4info_text_and_device_config(tmp_path):
    source = PROGRAMS / "packet_io.p4"
    r = p4sim("compile", str(source), "-o", str(tmp_path / "build"))
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "build" / "packet_io.p4info.txt").read_text()
    assert text_format.Parse(text, p4info_pb2.P4Info()) == build_p4info(compile_file(str(source)).info)
    config = (tmp_path / "build" / "packet_io.json").read_bytes()
    assert json.loads(config)["format"]
    assert set(Program.from_device_config(config).info.tables) == {
        "MyIngress.acl", "MyIngress.smac", "MyIngress.dmac"}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: without it p4sim stops at raw sockets, before the interface")
def test_missing_interface_exits_1_naming_it_without_traceback():
    r = p4sim("--no-p4", "-i", "1@p4sim-no-such0")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "p4sim: cannot use interface 'p4sim-no-such0' for port 1: No such device"), r.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run p4sim as an unprivileged user")
def test_without_root_p4sim_says_raw_sockets_need_it():
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m", "p4sim",
                        "--no-p4", "-i", "1@lo", "--grpc-server-addr", "127.0.0.1:0"], capture_output=True,
                       text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == "p4sim: raw sockets need root (or CAP_NET_RAW)"
    assert "Traceback" not in r.stderr


def test_grpc_address_in_use_exits_1_without_traceback():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = p4sim("--no-p4", "--grpc-server-addr", f"127.0.0.1:{busy.getsockname()[1]}")
    assert r.returncode == 1 and "cannot listen" in r.stderr and "Traceback" not in r.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_switch_serves_p4runtime_and_stops_cleanly_on_sigterm():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "p4sim", "--device-id", "3", "--thrift-port", "9090",
         str(PROGRAMS / "packet_io.p4"), "--", "--grpc-server-addr", f"127.0.0.1:{port}",
         "--cpu-port", "255"],
        stderr=subprocess.PIPE, text=True)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=60)
            stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
            assert stub.Capabilities(p4runtime_pb2.CapabilitiesRequest()).p4runtime_api_version == "1.4.1"
            # started with a program, it serves that program's P4Info before any push
            config = stub.GetForwardingPipelineConfig(
                p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=3)).config
            assert {t.preamble.name for t in config.p4info.tables} == {
                "MyIngress.acl", "MyIngress.smac", "MyIngress.dmac"}
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0
        assert "p4sim ready" in err and "thrift" in err.lower() and "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
