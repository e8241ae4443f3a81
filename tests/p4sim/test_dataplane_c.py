"""The C packet loop with a compiled pipeline (root: veth pairs whose far ends live in a network
namespace). A stub pipeline (traffic.c: forwards by a port map, sends one EtherType to the CPU
port) stands for a program; a batched generator and sink on the far ends check every frame
byte for byte. Forwarding, bursts, jumbo and runt frames, PacketIn/PacketOut, pcap files,
drops to ports without an interface, pipeline swaps under traffic, and a stop mid-traffic that
leaves no fds or threads behind.
"""
from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest
from scapy.utils import RawPcapWriter, rdpcap

from p4sim.dataplane import CDataplane
from p4sim.dataplane.traffic import (LAB_NETNS, StubPipeline, TrafficSocket, VethLab, blast, lab_tag, remove_stale_labs,
                                     veth_lab)
from tests.conftest import process_tag

pytestmark = pytest.mark.mininet

CPU_PORT = 255
TO_CPU = 0x88B6          # the stub sends frames of this EtherType to the CPU port


def frame(size: int = 64, ethertype: int = 0x88B5) -> bytes:
    """A frame of `size` bytes; the traffic tools number copies in its last 8 bytes."""
    head = bytes.fromhex("000000000002" "000000000001") + ethertype.to_bytes(2, "big") + b"p4sim-c-dataplane"
    return head + bytes(i % 251 for i in range(size - len(head)))


@pytest.fixture
def lab() -> Iterator[VethLab]:
    with veth_lab(process_tag(), pairs=2) as lab:
        yield lab


@pytest.fixture
def jumbo_lab() -> Iterator[VethLab]:
    with veth_lab(process_tag(), pairs=2, mtu=9500) as lab:
        yield lab


@contextlib.contextmanager
def running(dataplane: CDataplane, on_packet: Callable[[int, bytes], None] = lambda port, data: None,
            packet_in: Callable[[bytes], None] | None = None) -> Iterator[CDataplane]:
    """The data plane's loop in a thread, stopped and closed on exit."""
    stop = threading.Event()
    loop = threading.Thread(target=dataplane.run, args=(on_packet, stop, packet_in), name="test-dataplane")
    loop.start()
    try:
        yield dataplane
    finally:
        stop.set()
        loop.join()
        dataplane.close()


@contextlib.contextmanager
def peers(lab: VethLab, tx: int, rx: int) -> Iterator[tuple[TrafficSocket, TrafficSocket]]:
    """Sockets on the far ends of switch ports tx and rx (1-based), once the links pass frames."""
    lab.wait_until_links_pass()
    with TrafficSocket(lab.peer[tx - 1], lab.netns, receive=False) as t, TrafficSocket(lab.peer[rx - 1], lab.netns) as r:
        yield t, r


def switch_between(lab: VethLab, **kwargs) -> CDataplane:
    return CDataplane({1: lab.switch[0], 2: lab.switch[1]}, **kwargs)


def test_frames_cross_a_compiled_pipeline_both_ways_byte_for_byte_in_order(lab):
    stub = StubPipeline({1: 2, 2: 1})
    dataplane = switch_between(lab)
    dataplane.set_pipeline(stub.pipeline)
    with running(dataplane):
        with peers(lab, 1, 2) as (tx, rx):
            there = blast(tx, rx, frame(), 3000)
        with peers(lab, 2, 1) as (tx, rx):
            back = blast(tx, rx, frame(200), 3000)
        counters = dataplane.counters
    for result in (there, back):
        assert (result.sent, result.received, result.mismatched, result.reordered) == (3000, 3000, 0, 0)
    assert counters["rx"] == counters["tx"] == stub.processed == 6000
    assert counters["no_port"] == counters["send_errors"] == counters["oversized"] == 0


def test_a_burst_as_big_as_the_receive_ring_is_forwarded_without_loss(lab):
    # The generator sends 2000 frames back to back before reading anything: batches of 64 in
    # the switch, none lost below its 2048-slot ring.
    stub = StubPipeline({1: 2})
    dataplane = switch_between(lab)
    dataplane.set_pipeline(stub.pipeline)
    with running(dataplane), peers(lab, 1, 2) as (tx, rx):
        result = blast(tx, rx, frame(), 2000, window=2000)
    assert (result.received, result.mismatched, result.reordered) == (2000, 0, 0)
    assert dataplane.counters["ring_drops"] == 0


RING_SLOTS = 2048           # dataplane.c's receive ring per port


def test_a_burst_beyond_the_receive_ring_loses_only_the_excess_and_counts_it(lab):
    # The loop starts only once the burst has filled port 1's ring: it holds the first
    # RING_SLOTS frames, the kernel drops (and counts) the rest.
    stub = StubPipeline({1: 2})
    dataplane = switch_between(lab)
    dataplane.set_pipeline(stub.pipeline)
    results = []
    lab.wait_until_links_pass()       # the data plane brought its sides up when it opened them
    with TrafficSocket(lab.peer[0], lab.netns, receive=False) as tx, TrafficSocket(lab.peer[1], lab.netns) as rx:
        burst = threading.Thread(target=lambda: results.append(blast(tx, rx, frame(), 3000, window=3000,
                                                                     quiet_s=5)))
        burst.start()
        try:
            wait_for(lambda: dataplane.counters["ring_drops"] == 3000 - RING_SLOTS)
            with running(dataplane):
                burst.join()
        finally:
            burst.join()
    assert (results[0].received, results[0].mismatched, results[0].reordered) == (RING_SLOTS, 0, 0)
    assert dataplane.counters["rx"] == RING_SLOTS and dataplane.counters["ring_drops"] == 3000 - RING_SLOTS


def test_jumbo_frames_pass_whole_and_runt_frames_reach_the_pipeline(jumbo_lab):
    stub = StubPipeline({1: 2})
    dataplane = switch_between(jumbo_lab)
    dataplane.set_pipeline(stub.pipeline)
    with running(dataplane), peers(jumbo_lab, 1, 2) as (tx, rx):
        jumbo = blast(tx, rx, frame(9514), 200)       # MTU 9500 plus the Ethernet header
        mid = blast(tx, rx, frame(3000), 200)         # bigger than a ring slot, smaller than jumbo
        runt = blast(tx, rx, frame(14 + 8), 200)      # a header and the sequence number, no payload
    for result in (jumbo, mid, runt):
        assert (result.received, result.mismatched, result.reordered) == (200, 0, 0)
    assert dataplane.counters["oversized"] == 0


def test_frames_for_the_cpu_port_become_packet_ins_and_packet_outs_leave_by_their_port(lab, tmp_path):
    stub = StubPipeline({1: 2}, cpu_port=CPU_PORT, cpu_ethertype=TO_CPU)
    packet_ins: list[bytes] = []
    dataplane = switch_between(lab, cpu_port=CPU_PORT, pcap_dir=str(tmp_path))
    dataplane.set_pipeline(stub.pipeline)
    to_cpu, out = frame(100, TO_CPU), frame(80)
    with running(dataplane, packet_in=packet_ins.append), peers(lab, 1, 2) as (tx, rx):
        # Frames to the CPU port never reach the sink: blast sees none of them come back.
        lost = blast(tx, rx, to_cpu, 5, quiet_s=0.5)
        for _ in range(5):
            dataplane.transmit(2, out)        # a PacketOut's output, as P4RuntimeService sends it
        received = [rx.receive() for _ in range(5)]
        wait_for(lambda: len(packet_ins) == 5)
    assert lost.received == 0
    assert received == [out] * 5
    assert packet_ins == [numbered(to_cpu, i) for i in range(5)]
    assert dataplane.counters["packet_ins"] == 5
    assert [bytes(p) for p in rdpcap(str(tmp_path / f"{lab.switch[1]}_out.pcap"))] == [out] * 5


def numbered(data: bytes, seq: int) -> bytes:
    return data[:-8] + seq.to_bytes(8, "big")


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    event = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        event.wait(0.01)
    assert condition()


def test_pcap_files_are_what_scapys_writer_writes_and_readable_while_running(lab, tmp_path):
    stub = StubPipeline({1: 2})
    dataplane = switch_between(lab, pcap_dir=str(tmp_path / "pcap"))
    dataplane.set_pipeline(stub.pipeline)
    sizes = (64, 1514, 300)
    with running(dataplane), peers(lab, 1, 2) as (tx, rx):
        for size in sizes:
            assert blast(tx, rx, frame(size), 3).received == 3
        # Flushed as they are written: a reader sees every frame while the switch runs (once the
        # batch is done: the loop writes a batch's records after sending it, so wait for them).
        expected = [numbered(frame(size), i) for size in sizes for i in range(3)]

        def seen(name: str) -> list[bytes]:
            return [bytes(p) for p in rdpcap(str(tmp_path / "pcap" / name))]
        wait_for(lambda: len(seen(f"{lab.switch[0]}_in.pcap")) == len(seen(f"{lab.switch[1]}_out.pcap"))
                 == len(expected))
        seen_in, seen_out = seen(f"{lab.switch[0]}_in.pcap"), seen(f"{lab.switch[1]}_out.pcap")
    assert seen_in == seen_out == expected
    # Byte for byte what the Python loop's RawPcapWriter writes, timestamps aside.
    reference = tmp_path / "reference.pcap"
    writer = RawPcapWriter(str(reference), linktype=1, sync=True)
    for data in expected:
        writer.write(data)
    writer.close()
    for name in (f"{lab.switch[0]}_in.pcap", f"{lab.switch[1]}_out.pcap"):
        assert without_timestamps((tmp_path / "pcap" / name).read_bytes()) == without_timestamps(reference.read_bytes())
    # A port that saw nothing has a header alone, as RawPcapWriter leaves when closed.
    assert (tmp_path / "pcap" / f"{lab.switch[1]}_in.pcap").read_bytes() == reference.read_bytes()[:24]


def without_timestamps(pcap: bytes) -> bytes:
    """The file with every record's seconds and microseconds zeroed."""
    out, at = bytearray(pcap), 24
    while at < len(out):
        out[at:at + 8] = bytes(8)
        at += 16 + int.from_bytes(out[at + 8:at + 12], "little")
    return bytes(out)


def test_frames_to_ports_without_an_interface_are_dropped_counted_and_logged_at_debug(lab, caplog):
    stub = StubPipeline({1: 7})
    with caplog.at_level(logging.DEBUG, logger="p4sim.dataplane"):
        dataplane = switch_between(lab)
        dataplane.set_pipeline(stub.pipeline)
        with running(dataplane), peers(lab, 1, 2) as (tx, rx):
            assert blast(tx, rx, frame(), 4, quiet_s=0.5).received == 0
            wait_for(lambda: dataplane.counters["no_port"] == 4)
    assert dataplane.counters["tx"] == 0
    assert caplog.messages.count("no interface for port 7: 64-byte frame dropped") == 4


def test_without_a_compiled_pipeline_frames_go_to_python_and_its_outputs_leave_by_transmit(lab):
    dataplane = switch_between(lab)

    def python_pipeline(port: int, data: bytes) -> None:   # as run_switch's on_packet: process, transmit
        dataplane.transmit(2 if port == 1 else 1, data)

    with running(dataplane, on_packet=python_pipeline), peers(lab, 1, 2) as (tx, rx):
        result = blast(tx, rx, frame(), 500)
    assert (result.received, result.mismatched, result.reordered) == (500, 0, 0)


def test_pipeline_swaps_under_traffic_lose_nothing_and_the_old_one_is_free_once_swapped(lab):
    first, second = StubPipeline({1: 2}), StubPipeline({1: 2})
    dataplane = switch_between(lab)
    dataplane.set_pipeline(first.pipeline)
    results = []
    with running(dataplane), peers(lab, 1, 2) as (tx, rx):
        traffic = threading.Thread(target=lambda: results.append(blast(tx, rx, frame(), 100_000)))
        traffic.start()
        try:
            swaps = 0
            while traffic.is_alive():
                old, new = (first, second) if swaps % 2 == 0 else (second, first)
                dataplane.set_pipeline(new.pipeline)
                # Once set_pipeline returned, the loop no longer runs the old pipeline.
                done = old.processed
                threading.Event().wait(0.001)
                assert old.processed == done
                swaps += 1
        finally:
            traffic.join()
    assert swaps > 10
    assert (results[0].received, results[0].mismatched) == (100_000, 0)
    assert first.processed + second.processed == 100_000


def thread_cpu_s(name: str) -> float:
    (thread,) = [t for t in threading.enumerate() if t.name == name]
    return int(Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text().split()[0]) / 1e9


def test_a_port_taken_down_and_up_is_logged_without_spinning_and_forwards_again(lab, caplog):
    stub = StubPipeline({1: 2})
    dataplane = switch_between(lab)
    dataplane.set_pipeline(stub.pipeline)
    with running(dataplane), peers(lab, 1, 2) as (tx, rx):
        assert blast(tx, rx, frame(), 100).received == 100
        subprocess.run(["ip", "link", "set", "dev", lab.switch[0], "down"], check=True)
        wait_for(lambda: "receive on " + lab.switch[0] + " failed: Network is down" in caplog.messages)
        before = thread_cpu_s("p4sim-dataplane")
        threading.Event().wait(0.5)
        idle = thread_cpu_s("p4sim-dataplane") - before
        subprocess.run(["ip", "link", "set", "dev", lab.switch[0], "up"], check=True)
        lab.wait_until_links_pass()
        assert blast(tx, rx, frame(), 100).received == 100
    assert idle < 0.05            # the socket's error was taken, not polled again and again
    assert dataplane.counters["receive_errors"] == 1


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_switch_stopped_mid_traffic_frees_its_sockets_threads_and_files(lab, tmp_path):
    stub = StubPipeline({1: 2})
    fds_before = open_fds()
    dataplane = switch_between(lab, pcap_dir=str(tmp_path))
    dataplane.set_pipeline(stub.pipeline)
    stop = threading.Event()
    loop = threading.Thread(target=dataplane.run, args=(lambda port, data: None, stop))
    loop.start()
    try:
        with peers(lab, 1, 2) as (tx, rx):
            traffic = threading.Thread(target=blast, args=(tx, rx, frame(), 10**7), kwargs={"quiet_s": 0.5})
            traffic.start()
            try:
                wait_for(lambda: stub.processed > 10_000)
                stop.set()                    # mid-traffic
                loop.join()
                dataplane.close()
            finally:
                traffic.join()                # the sink goes quiet once the switch is gone
    finally:
        stop.set()
        loop.join()
        dataplane.close()
    assert open_fds() == fds_before
    assert not [t for t in threading.enumerate() if t.name.startswith("p4sim-dataplane")]


def test_make_stop_removes_the_lab_of_a_killed_process_and_keeps_live_ones(lab: VethLab) -> None:
    """A bench killed before veth_lab's cleanup leaves its namespace and veths: remove_stale_labs
    (which `make stop` runs) deletes a lab whose tag no running process has, not this one's."""
    live = {lab_tag(int(p)) for p in os.listdir("/proc") if p.isdigit()}
    dead = next(str(t) for t in range(99999, 0, -1) if str(t) not in live)
    stale = f"{LAB_NETNS}{dead}"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        assert stale in remove_stale_labs()
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert stale not in listed and lab.netns in listed
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True)
