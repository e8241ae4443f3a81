"""The raw-socket data plane, both packet loops (the Python one and the C one, with the
pipeline in Python): `-i` parsing, and a frame sent through packet_io.p4 between two veth pairs
whose far ends live in a network namespace (root), with BMv2-named pcaps, both in process and
through `python -m p4sim -i ...` programmed by p4runtime-shell; and the slow target's rate,
queue drops and latency, measured on a burst through the same veths.
"""
from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import grpc
import pytest
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from p4sim import Switch, compile_file
from p4sim.dataplane import CDataplane, Dataplane, SlowMode, SlowStats, parse_interface
from p4sim.dataplane.traffic import TrafficSocket, blast, veth_lab
from p4sim.p4info import build_p4info, to_text
from p4sim.state import TableEntry
from tests.conftest import process_tag

PROGRAM = Path(__file__).resolve().parents[1] / "p4programs" / "packet_io.p4"
FRAME = bytes(Ether(dst="00:00:00:00:00:02", src="00:00:00:00:00:01", type=0x88B5) / b"p4sim-dataplane-test")


def test_parse_interface_takes_port_at_iface():
    assert parse_interface("3@veth-s1-3") == (3, "veth-s1-3")


@pytest.mark.parametrize("spec", ["eth0", "@eth0", "x@eth0", "1@"])
def test_parse_interface_rejects_other_forms(spec):
    with pytest.raises(ValueError, match="PORT@IFACE"):
        parse_interface(spec)


@pytest.fixture
def veths():
    """Switch-side interfaces (a, b) in this namespace, still down (the data plane must bring
    them up); their peers in namespace `ns`."""
    with veth_lab(process_tag()) as lab:       # the leak check looks for names with the tag
        yield lab


# Both packet loops take the same arguments and run the same on_packet.
LOOPS = {"python": Dataplane, "c": CDataplane}


@pytest.fixture(params=list(LOOPS))
def loop(request):
    return LOOPS[request.param]


# Runs inside the namespace: send FRAME into port 1's peer, print what port 2's peer receives.
PEER = """
import socket, sys
tx, rx, frame = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
r = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); r.bind((rx, 0)); r.settimeout(20)
t = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); t.bind((tx, 0))
t.send(frame)
while True:
    data, addr = r.recvfrom(65535)
    if addr[2] != socket.PACKET_OUTGOING and b"p4sim-dataplane-test" in data:
        print(data.hex()); break
"""


@pytest.mark.mininet
def test_frame_crosses_the_switch_between_veths_and_is_captured(veths, loop, tmp_path):
    ns, (a, b) = veths.netns, veths.switch
    switch = Switch(compile_file(str(PROGRAM)))
    switch.state.tables["MyIngress.dmac"].insert(
        TableEntry((("exact", 0x000000000002),), "MyIngress.set_egress_port", (2,)))
    dataplane = loop({1: a, 2: b}, str(tmp_path / "pcap"))
    received: list[tuple[int, bytes]] = []
    stop = threading.Event()

    def on_packet(port: int, data: bytes) -> None:
        received.append((port, data))
        for out_port, out in switch.process(port, data):
            dataplane.transmit(out_port, out)

    loop = threading.Thread(target=dataplane.run, args=(on_packet, stop))
    loop.start()
    try:
        veths.wait_until_links_pass()
        peer = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", PEER,
                               f"{a}p", f"{b}p", FRAME.hex()], capture_output=True, text=True, timeout=60)
    finally:
        stop.set()
        loop.join()
        dataplane.close()
    assert peer.returncode == 0, peer.stderr
    assert bytes.fromhex(peer.stdout.strip()) == FRAME
    # The switch saw the frame once, on port 1, and not its own transmission on port 2.
    assert [p for p, d in received if d == FRAME] == [1]
    assert [bytes(p) for p in rdpcap(str(tmp_path / "pcap" / f"{a}_in.pcap"))] == [FRAME]
    assert [bytes(p) for p in rdpcap(str(tmp_path / "pcap" / f"{b}_out.pcap"))] == [FRAME]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def forwarding_switch(shell, veths, tmp_path: Path, backend: str) -> Iterator[subprocess.Popen]:
    """`python -m p4sim --backend BACKEND --no-p4` on the veths, pushed packet_io.p4 by
    p4runtime-shell, with an entry that sends dstAddr 00:00:00:00:00:02 out of port 2; pcaps
    in tmp_path/pcap. Killed on exit if the test did not stop it."""
    a, b = veths.switch
    program = compile_file(str(PROGRAM))
    p4info_path, config_path = tmp_path / "packet_io.p4info.txt", tmp_path / "packet_io.json"
    p4info_path.write_text(to_text(build_p4info(program.info)))
    config_path.write_bytes(program.device_config())
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "p4sim", "--backend", backend, "-i", f"1@{a}", "-i", f"2@{b}",
                             "--no-p4", "--pcap", str(tmp_path / "pcap"), "--grpc-server-addr", f"127.0.0.1:{port}",
                             "--cpu-port", "255"], stderr=subprocess.PIPE, text=True)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=60)
        shell.setup(device_id=0, grpc_addr=f"127.0.0.1:{port}", election_id=(0, 1),
                    config=shell.FwdPipeConfig(str(p4info_path), str(config_path)), verbose=False)
        try:
            te = shell.TableEntry("MyIngress.dmac")(action="MyIngress.set_egress_port")
            te.match["hdr.ethernet.dstAddr"] = "00:00:00:00:00:02"
            te.action["port"] = "2"
            te.insert()
        finally:
            shell.teardown()
        veths.wait_until_links_pass()
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


BACKENDS = ["python", "c"]


@pytest.mark.mininet
@pytest.mark.parametrize("backend", BACKENDS)
def test_switch_process_forwards_between_veths_once_the_controller_installs_an_entry(veths, tmp_path, backend,
                                                                                    p4runtime_shell):
    ns, (a, b) = veths.netns, veths.switch
    with forwarding_switch(p4runtime_shell, veths, tmp_path, backend) as proc:
        peer = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", PEER,
                               f"{a}p", f"{b}p", FRAME.hex()], capture_output=True, text=True, timeout=60)
        assert peer.returncode == 0, peer.stderr
        assert bytes.fromhex(peer.stdout.strip()) == FRAME
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert [bytes(p) for p in rdpcap(str(tmp_path / "pcap" / f"{b}_out.pcap"))] == [FRAME]


@pytest.mark.mininet
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_switch_process_stopped_mid_traffic_exits_cleanly(veths, tmp_path, backend, p4runtime_shell):
    results = []
    with forwarding_switch(p4runtime_shell, veths, tmp_path, backend) as proc:
        with TrafficSocket(veths.peer[0], veths.netns, receive=False) as tx, \
                TrafficSocket(veths.peer[1], veths.netns) as rx:
            # Far more frames than it forwards before the stop; the generator ends once the
            # switch has been quiet for a second.
            traffic = threading.Thread(target=lambda: results.append(blast(tx, rx, FRAME + bytes(8), 10**8)))
            traffic.start()
            try:
                time.sleep(2.0)
                proc.send_signal(signal.SIGTERM)
                _, err = proc.communicate(timeout=60)
            finally:
                traffic.join()
    assert proc.returncode == 0, err
    assert "p4sim stopped" in err and "Traceback" not in err
    assert 0 < results[0].received < results[0].sent and results[0].mismatched == 0


# Runs inside the namespace: send BURST numbered frames into port 1's peer back to back, then
# print, as JSON, when the first left and when each frame came out of port 2's peer. Arrival
# times are the kernel's (SO_TIMESTAMPNS, CLOCK_REALTIME), not when this process got to read
# them: on a busy machine it may read several frames at once.
BURST_PEER = """
import json, socket, struct, sys, time
SO_TIMESTAMPNS = 35
tx, rx, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
head = bytes.fromhex("000000000002" "000000000001" "88b5") + b"p4sim-slow-test"
r = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); r.bind((rx, 0)); r.settimeout(3)   # quiet: done
r.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
t = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); t.bind((tx, 0))
sent = time.time()
for i in range(count):
    t.send(head + i.to_bytes(4, "big"))
got = []
try:
    while True:
        data, ancillary, _, addr = r.recvmsg(65535, 64)
        if addr[2] != socket.PACKET_OUTGOING and data.startswith(head):
            (sec, nsec), = [struct.unpack("qq", d[:16]) for level, kind, d in ancillary
                            if (level, kind) == (socket.SOL_SOCKET, SO_TIMESTAMPNS)]
            got.append((int.from_bytes(data[len(head):len(head) + 4], "big"), sec + nsec * 1e-9))
except socket.timeout:
    pass
print(json.dumps({"sent": sent, "got": got}))
"""


@pytest.mark.mininet
def test_slow_target_serves_at_its_rate_after_its_latency_and_drops_beyond_its_queue(veths, loop):
    ns, (a, b) = veths.netns, veths.switch
    # Slow enough that the data plane takes in the whole burst within a service time or two
    # even when it gets a tenth of a core.
    slow = SlowMode(pps=20, queue_depth=20, latency_s=0.05)
    switch = Switch(compile_file(str(PROGRAM)))
    switch.state.tables["MyIngress.dmac"].insert(
        TableEntry((("exact", 0x000000000002),), "MyIngress.set_egress_port", (2,)))
    dataplane = loop({1: a, 2: b}, slow=slow)
    stop = threading.Event()

    def on_packet(port: int, data: bytes) -> None:
        for out_port, out in switch.process(port, data):
            dataplane.transmit(out_port, out)

    loop = threading.Thread(target=dataplane.run, args=(on_packet, stop))
    loop.start()
    try:
        veths.wait_until_links_pass()
        peer = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", BURST_PEER, f"{a}p", f"{b}p", "60"],
                              capture_output=True, text=True, timeout=60)
    finally:
        stop.set()
        loop.join()
        dataplane.close()
    assert peer.returncode == 0, peer.stderr
    report = json.loads(peer.stdout)
    seqs, times = [s for s, _ in report["got"]], [t for _, t in report["got"]]
    stats = dataplane.stats
    # 60 arrive at once: one in service, 20 wait, the rest are dropped and counted.
    assert stats.received == 60 and stats.queue_drops == 60 - stats.served >= 60 - 22
    assert stats.max_queued == slow.queue_depth
    assert seqs == sorted(seqs) and len(seqs) == stats.served and seqs[0] == 0
    # Never faster than the rate: the k-th frame served leaves no sooner than k service times
    # plus the latency after the burst began (a late wake-up is made up, but never ahead of that).
    assert times[0] - report["sent"] >= slow.service_s + slow.latency_s
    assert times[-1] - report["sent"] >= len(times) * slow.service_s + slow.latency_s


def test_slow_mode_rejects_impossible_figures():
    with pytest.raises(ValueError, match="pps > 0, queue >= 1 and latency >= 0, not 0 pps, queue 10"):
        SlowMode(pps=0, queue_depth=10)


@pytest.mark.mininet
def test_slow_target_logs_its_counts_while_they_change_and_when_it_stops(veths, loop, caplog):
    slow = SlowMode(pps=1000, queue_depth=10)
    with caplog.at_level(logging.INFO, logger="p4sim.dataplane"):
        dataplane = loop({1: veths.switch[0], 2: veths.switch[1]}, slow=slow)
        stop = threading.Event()
        thread = threading.Thread(target=dataplane.run, args=(lambda port, data: None, stop))
        thread.start()
        try:
            veths.wait_until_links_pass()
            with TrafficSocket(veths.peer[0], veths.netns, receive=False) as tx, \
                    TrafficSocket(veths.peer[1], veths.netns) as rx:
                blast(tx, rx, FRAME + bytes(8), 30, window=30, quiet_s=0.1)     # nothing comes back
            deadline = time.monotonic() + 30
            while not settled(dataplane.stats, caplog.messages) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            thread.join()
            dataplane.close()
    lines = [m for m in caplog.messages if m.startswith("slow target: ")]
    stats = dataplane.stats
    # Logged while running once the counts changed, and again when it stopped.
    assert lines[-2] == lines[-1] == str(stats)
    assert stats.received >= 30 and stats.queue_drops >= stats.received - slow.queue_depth - 1


def settled(stats: SlowStats, messages: list[str]) -> bool:
    """The burst was taken in, nothing waits any more, and those counts were logged."""
    return stats.received >= 30 and stats.served + stats.queue_drops == stats.received and str(stats) in messages

