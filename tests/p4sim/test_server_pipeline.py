"""The server over the real pipeline: packet_io.p4 pushed by p4runtime-shell, then
PacketOut, PacketIn and digests through the compiled program, checked against Scapy bytes.
"""
from __future__ import annotations

import json
import queue
from pathlib import Path

import grpc
import pytest
from p4.v1 import p4runtime_pb2
from scapy.layers.l2 import Ether

from p4sim import Program, Switch, compile_file
from p4sim.p4info import build_p4info, to_text
from p4sim.runtime.p4runtime import P4RuntimeService, serve

PROGRAM = Path(__file__).resolve().parents[1] / "p4programs" / "packet_io.p4"
CPU_PORT = 255


@pytest.fixture
def shell(tmp_path, p4runtime_shell):
    """A p4sim switch started with --no-p4, pushed packet_io.p4 by p4runtime-shell."""
    sh = p4runtime_shell
    program = compile_file(str(PROGRAM))
    p4info_path, config_path = tmp_path / "packet_io.p4info.txt", tmp_path / "packet_io.json"
    p4info_path.write_text(to_text(build_p4info(program.info)))
    config_path.write_bytes(program.device_config())

    switch = Switch(None, cpu_port=CPU_PORT)
    sent: queue.Queue = queue.Queue()
    service = P4RuntimeService(switch, Program.from_device_config, device_id=1, cpu_port=CPU_PORT,
                               transmit=lambda port, data: sent.put((port, data)))
    switch.on_digest = service.digest
    server, port = serve(service, "127.0.0.1:0")
    try:
        sh.setup(device_id=1, grpc_addr=f"127.0.0.1:{port}", election_id=(0, 1),
                 config=sh.FwdPipeConfig(str(p4info_path), str(config_path)), verbose=False)
        try:
            yield sh, switch, service, sent
        finally:
            sh.teardown()
    finally:
        server.stop(None)
        service.close()


FRAME = bytes(Ether(dst="00:00:00:00:00:02", src="00:00:00:00:00:01", type=0x88B5) / (b"x" * 20))


def test_pushed_pipeline_is_running(shell):
    sh, switch, service, _ = shell
    assert switch.state is not None
    assert set(switch.state.tables) == {"MyIngress.acl", "MyIngress.smac", "MyIngress.dmac"}


def test_table_entry_forwards_packets_through_the_program(shell):
    sh, switch, service, sent = shell
    te = sh.TableEntry("MyIngress.dmac")(action="MyIngress.set_egress_port")
    te.match["hdr.ethernet.dstAddr"] = "00:00:00:00:00:02"
    te.action["port"] = "3"
    te.insert()
    service.handle_outputs(switch.process(1, FRAME))
    assert sent.get(timeout=10) == (3, FRAME)


def test_packet_out_leaves_on_the_port_its_metadata_names(shell):
    sh, _, _, sent = shell
    p = sh.PacketOut(FRAME)
    p.metadata["egress_port"] = "4"
    p.send()
    assert sent.get(timeout=10) == (4, FRAME)


def test_punted_packet_reaches_the_controller_with_its_ingress_port(shell):
    sh, switch, service, _ = shell
    acl = sh.TableEntry("MyIngress.acl")(action="MyIngress.send_to_cpu")
    acl.match["hdr.ethernet.etherType"] = "0x88b5&&&0xffff"
    acl.priority = 1
    acl.insert()
    service.handle_outputs(switch.process(6, FRAME))
    msg = sh.client.get_stream_packet("packet", timeout=10)
    assert msg.packet.payload == FRAME
    assert [(m.metadata_id, m.value) for m in msg.packet.metadata] == [(1, b"\x06"), (2, b"\x00")]


def test_unknown_source_mac_is_reported_as_digest(shell):
    sh, switch, service, _ = shell
    de = sh.DigestEntry("learn_t")
    de.insert()
    service.handle_outputs(switch.process(2, FRAME))
    msg = sh.client.get_stream_packet("digest", timeout=5)
    (data,) = msg.digest.data
    assert [m.bitstring for m in data.struct.members] == [b"\x01", b"\x02"]


def test_device_config_with_bad_p4_is_invalid_argument_with_its_location(shell):
    sh, switch, _, _ = shell
    tables_before = set(switch.state.tables)
    req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=1, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
    req.election_id.low = 1
    req.config.p4_device_config = json.dumps(
        {"format": "p4sim/1", "source_file": "broken.p4", "source": "control c( {\n"}).encode()
    with pytest.raises(grpc.RpcError) as info:
        sh.client.stub.SetForwardingPipelineConfig(req)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("broken.p4:1:")
    assert set(switch.state.tables) == tables_before
