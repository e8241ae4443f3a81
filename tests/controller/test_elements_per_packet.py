"""The controller learns the elements per packet (K) from the pipeline it pushes, never from a
constant: it records K in the topology file's jobs (where the runner finds it for the workers)
and in pool grants, and refuses a pipeline whose K does not fit the topology's MTU or differs
from the K a job already records, before it pushes anything.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.errors import ControllerError
from controller.fabric import check_elements_per_packet, setup_switch
from controller.install import ProgramSizes, program_sizes
from controller.pool import JobPool
from controller.switch import Pipeline, Switch
from tests.controller.conftest import PROGRAM, REPO
from topologies.spec import JobSpec, Topology, star

WIDE_K = 64


@pytest.fixture(scope="module")
def wide_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """allreduce.p4 built with -D INC_K=64."""
    out = tmp_path_factory.mktemp("wide")
    proc = subprocess.run([sys.executable, "-m", "p4sim", "compile", str(PROGRAM), "-o", str(out),
                           "-D", f"INC_K={WIDE_K}"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return out


def controller(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_program_sizes_come_from_the_pipelines_registers(pipeline: Pipeline, wide_build: Path):
    assert program_sizes(pipeline.p4info) == ProgramSizes(pool_size=512, elements_per_packet=32)
    assert program_sizes(Pipeline.from_build(wide_build, "allreduce").p4info) == ProgramSizes(512, WIDE_K)


def test_setup_records_the_pipelines_k_in_every_job(server, tmp_path: Path, wide_build: Path):
    topo = star(4, grpc_port=server.port)
    topo = Topology(topo.hosts, topo.switches, topo.links, [JobSpec(1, ("h1", "h2")), JobSpec(2, ("h3", "h4"))])
    path = tmp_path / "topology.json"
    topo.dump(path)
    done = controller("setup", "--topo", str(path), "--build-dir", str(wide_build))
    assert done.returncode == 0, done.stderr
    jobs = json.loads(path.read_text())["jobs"]
    assert [j["elements_per_packet"] for j in jobs] == [WIDE_K, WIDE_K]
    with Switch("s1", server.addr, 0) as sw:
        assert program_sizes(sw.device_pipeline().p4info).elements_per_packet == WIDE_K
    # A second setup with the same program agrees with what it recorded.
    again = controller("setup", "--topo", str(path), "--build-dir", str(wide_build))
    assert again.returncode == 0, again.stderr


def test_setup_refuses_a_pipeline_whose_k_differs_from_a_jobs_and_pushes_nothing(server, tmp_path: Path,
                                                                                 wide_build: Path):
    topo = star(2, grpc_port=server.port)
    topo = Topology(topo.hosts, topo.switches, topo.links, [JobSpec(1, ("h1", "h2"), elements_per_packet=32)])
    path = tmp_path / "topology.json"
    topo.dump(path)
    done = controller("setup", "--topo", str(path), "--build-dir", str(wide_build))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "error: s1: job 1 records 32 elements per packet, but the pipeline carries 64: rebuild the program "
        "with INC_K=32, or give the job K = 64")
    assert json.loads(path.read_text())["jobs"][0]["elements_per_packet"] == 32
    with Switch("s1", server.addr, 0) as sw:
        assert sw.device_pipeline() is None


def test_a_k_that_does_not_fit_the_mtu_is_refused():
    check_elements_per_packet(star(2), 352, "s1")            # 44 + 4 * 352 = 1452 bytes: fits 1500
    with pytest.raises(ControllerError, match=r"^s1: the pipeline's 384 elements per packet make 1580-byte "
                                              r"IPv4 packets, more than an MTU of 1500 carries \(at most K = 352"):
        check_elements_per_packet(star(2), 384, "s1")
    check_elements_per_packet(star(2, mtu=9000), 2208, "s1")


def test_setup_switch_reports_k_and_pool_grants_carry_it(server, wide_build: Path):
    topo = star(4, grpc_port=server.port)
    topo = Topology(topo.hosts, topo.switches, topo.links, [])
    with Switch("s1", server.addr, 0) as sw:
        assert setup_switch(sw, topo, Pipeline.from_build(wide_build, "allreduce")).elements_per_packet == WIDE_K
        pool = JobPool(topo, [sw])
        try:
            grant = pool.request([("10.0.0.1", 48879), ("10.0.0.2", 48879)], 8)
            assert grant.elements_per_packet == WIDE_K
        finally:
            pool.close()
