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

from tests.p4sim.conftest import pushed_switch

PROGRAM = Path(__file__).resolve().parents[1] / "p4programs" / "packet_io.p4"
CPU_PORT = 255


@pytest.fixture
def shell(tmp_path, p4runtime_shell):
    """A p4sim switch started with --no-p4, pushed packet_io.p4 by p4runtime-shell."""
    sent: queue.Queue = queue.Queue()
    with pushed_switch(p4runtime_shell, PROGRAM, tmp_path, CPU_PORT,
                       lambda port, data: sent.put((port, data))) as (switch, service):
        yield p4runtime_shell, switch, service, sent


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
