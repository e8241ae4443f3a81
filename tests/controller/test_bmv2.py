"""The same controller against BMv2 (p4c + simple_switch_grpc), where it is installed:
the pipeline, the job's entries, and registers through the Thrift runtime."""
from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from controller.allreduce import jobs_on_switch
from controller.control import read_table_entries
from controller.fabric import setup_switch
from controller.switch import Pipeline, Switch
from topologies.spec import star

pytestmark = pytest.mark.bmv2
PROGRAM = Path(__file__).resolve().parents[2] / "p4src" / "allreduce.p4"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def bmv2(tmp_path: Path) -> Iterator[tuple[int, int, Pipeline]]:
    subprocess.run(["p4c", "--target", "bmv2", "--arch", "v1model", "--p4runtime-files",
                    str(tmp_path / "allreduce.p4info.txt"), "-o", str(tmp_path), str(PROGRAM)],
                   check=True, timeout=600)
    grpc_port, thrift_port = _free_port(), _free_port()
    log = (tmp_path / "bmv2.log").open("wb")
    proc = subprocess.Popen(["simple_switch_grpc", "--device-id", "0", "--thrift-port", str(thrift_port),
                             "--no-p4", "--", "--grpc-server-addr", f"127.0.0.1:{grpc_port}",
                             "--cpu-port", "510"], stdout=log, stderr=subprocess.STDOUT)
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        channel.close()
        yield grpc_port, thrift_port, Pipeline.from_build(tmp_path, "allreduce")
    finally:
        proc.kill()
        proc.wait(timeout=30)
        log.close()


def test_setup_on_bmv2_admits_the_job_and_clears_slots_over_thrift(bmv2):
    grpc_port, thrift_port, pipeline = bmv2
    topo = star(4, grpc_port=grpc_port, thrift_port=thrift_port)
    with Switch("s1", f"127.0.0.1:{grpc_port}", target="bmv2", thrift_port=thrift_port) as sw:
        result = setup_switch(sw, topo, pipeline)
        assert result.pipeline_pushed and result.jobs_admitted == (1,)
        (job,), _ = jobs_on_switch(topo, "s1", 512)
        assert [e.match["hdr.inc.job_id"] for e in read_table_entries(sw, "MyIngress.inc_job")] == [1]
        sw.registers.write("MyIngress.slot_count", {job.register_indices[0]: 3})
        assert sw.registers.read("MyIngress.slot_count")[job.register_indices[0]] == 3
        sw.registers.reset("MyIngress.slot_count")
        assert not any(sw.registers.read("MyIngress.slot_count"))
