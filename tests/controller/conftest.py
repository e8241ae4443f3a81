"""Fixtures for controller tests against a real P4Runtime server: allreduce.p4 compiled
by `python -m p4sim compile`, and a `python -m p4sim --no-p4` switch on a free loopback
port that every test stops (and may restart on the same port) in its teardown.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from controller.switch import Pipeline, Switch
from topologies.spec import Topology, star

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "p4src" / "allreduce.p4"
READY_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class P4simServer:
    """One `python -m p4sim` process serving P4Runtime on `addr` (and BMv2's Thrift runtime on
    `thrift_port`, if given, as simple_switch_grpc does); restartable in place."""
    port: int
    log_path: Path
    thrift_port: int | None = None
    proc: subprocess.Popen | None = field(default=None, init=False)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "p4sim", "--no-p4", "--device-id", "0",
                 "--grpc-server-addr", self.addr, "--cpu-port", "510",
                 *(["--thrift-port", str(self.thrift_port)] if self.thrift_port else [])],
                cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        channel = grpc.insecure_channel(self.addr)
        try:
            grpc.channel_ready_future(channel).result(timeout=READY_TIMEOUT_S)
        except grpc.FutureTimeoutError:
            self.stop()
            pytest.fail(f"p4sim did not serve {self.addr}: {self.log_path.read_text()[-2000:]}")
        finally:
            channel.close()
        # p4sim opens the Thrift port after the gRPC one: ready when both accept connections.
        deadline = time.monotonic() + READY_TIMEOUT_S
        while self.thrift_port and not _accepts(self.thrift_port):
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"p4sim did not serve Thrift on {self.thrift_port}: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait(timeout=30)
        self.proc = None


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """allreduce.p4 compiled once: DIR/allreduce.p4info.txt and DIR/allreduce.json."""
    out = tmp_path_factory.mktemp("build")
    proc = subprocess.run([sys.executable, "-m", "p4sim", "compile", str(PROGRAM), "-o", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="session")
def pipeline(build_dir: Path) -> Pipeline:
    return Pipeline.from_build(build_dir, "allreduce")


@pytest.fixture
def server(tmp_path: Path, pipeline: Pipeline) -> Iterator[P4simServer]:
    srv = P4simServer(free_port(), tmp_path / "p4sim.log")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def bmv2_like_server(tmp_path: Path, pipeline: Pipeline) -> Iterator[P4simServer]:
    """p4sim serving P4Runtime and BMv2's Thrift runtime, as simple_switch_grpc does."""
    srv = P4simServer(free_port(), tmp_path / "p4sim.log", thrift_port=free_port())
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def topo(server: P4simServer, tmp_path: Path) -> Topology:
    """A 4-host star whose switch is the test's p4sim; also written to topology.json."""
    t = star(4, grpc_port=server.port)
    t.dump(tmp_path / "topology.json")
    return t


@pytest.fixture
def switch(server: P4simServer) -> Iterator[Switch]:
    sw = Switch("s1", server.addr, 0)
    sw.connect()
    try:
        yield sw
    finally:
        sw.close()
