"""Issue 5, item 1: 22,000 random and mutated packets (Scapy fuzz() of the INC header and of
Ethernet/IPv4/UDP, truncations, wrong lengths, random ports, contributions for other jobs
and slots) injected from a non-worker host into p4sim while 4 workers run a real AllReduce.
The switch never fails or stalls, the sums equal numpy's, and every injected packet is
accounted for by the counter docs/protocol.md names (tests/reliability/expected.py).
"""
from __future__ import annotations

import logging
import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from p4sim import Switch
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Packet, fuzz
from scapy.volatile import RandMAC

from hosts.inc import AGG_IP, AGG_MAC, COLL_REDUCE, INC_K, INC_PORT, OP_WINDOW_ACK, Inc
from hosts.inprocess import InProcessFabric
from tests.hosts.conftest import Job, host, install_forwarding, install_job
from tests.reliability.conftest import (HANG_GUARD_S, TappedSwitch, counter_deltas, counters, job_workers,
                                        run_workers)
from tests.reliability.expected import FORWARDED, IN_SLOT, WINDOW_ACK, Admitted, expected_counter

log = logging.getLogger(__name__)

WORKERS = Job(job_id=1, hosts=tuple(host(i) for i in range(1, 5)), slot_base=0, num_slots=8)
FUZZER = host(5)
# The fuzzing host is itself admitted to a one-worker job, so valid-looking contributions
# from it reach slots (of its own job only).
FUZZ_JOB = Job(job_id=2, hosts=(FUZZER,), slot_base=64, num_slots=16, mcast_grp=101)
ADMITTED = Admitted(
    jobs={j.job_id: (j.slot_base, j.num_slots) for j in (WORKERS, FUZZ_JOB)},
    workers=frozenset((j.job_id, w, h.port) for j in (WORKERS, FUZZ_JOB) for w, h in enumerate(j.hosts)),
    macs=frozenset(bytes.fromhex(h.mac.replace(":", "")) for h in (*WORKERS.hosts, FUZZER))
    | {b"\xff" * 6})
# LENGTH elements per call, CALLS calls: 4 x 125 chunks per worker to interleave the fuzz with.
LENGTH, CALLS = 125 * INC_K, 4


def to_aggregator(inc: Packet, **ip) -> Packet:
    return (Ether(src=FUZZER.mac, dst=AGG_MAC) / IP(src=FUZZER.ip, dst=AGG_IP, **ip)
            / UDP(sport=INC_PORT, dport=INC_PORT) / inc)


def contribution(rng: random.Random) -> Inc:
    """A well-formed contribution for a random job, worker, slot and seq."""
    return Inc(job_id=rng.choice([1, 2, 2, 3, 0xFFFF]), worker_id=rng.randrange(4),
               slot=rng.randrange(2 * FUZZ_JOB.num_slots), pool_version=rng.randrange(2),
               seq=rng.randrange(2**32), elements=[rng.randrange(-2**31, 2**31) for _ in range(INC_K)])


def window_ack(rng: random.Random) -> Inc:
    """A root's window ACK for a random job, worker and root: the fuzzer's own are multicast."""
    worker = rng.randrange(4)
    return Inc(opcode=OP_WINDOW_ACK, collective=COLL_REDUCE, job_id=rng.choice([1, 2, 2, 3]), worker_id=worker,
               root=rng.choice([worker, worker, rng.randrange(32)]), flags=rng.randrange(256),
               seq=rng.randrange(2**32), elements=[rng.randrange(-2**31, 2**31) for _ in range(INC_K)])


def wrong_length(rng: random.Random) -> bytes:
    """A contribution whose IPv4 or UDP length (or both) is off, or that is a fragment;
    checksums stay right."""
    pkt = to_aggregator(contribution(rng))
    choice = rng.randrange(4)
    if choice == 0:
        pkt[IP].len = rng.choice([rng.randrange(20, 172), rng.randrange(173, 2**16)])
    elif choice == 1:
        pkt[UDP].len = rng.choice([rng.randrange(0, 152), rng.randrange(153, 2**16)])
    elif choice == 2:
        pkt = pkt / bytes(rng.randrange(1, 64))        # lengths then count the extra bytes
    else:
        pkt[IP].flags, pkt[IP].frag = rng.choice([("MF", 0), (0, rng.randrange(1, 2**13))])
    return bytes(pkt)


# Category -> (how many, a frame from a seeded rng). Scapy's fuzz() draws from `random`.
CATEGORIES = {
    "fuzz(INC)": (5000, lambda rng: bytes(to_aggregator(fuzz(Inc())))),
    "fuzz(IPv4)+fuzz(UDP)": (3000, lambda rng: bytes(
        Ether(src=FUZZER.mac, dst=AGG_MAC) / fuzz(IP(dst=AGG_IP)) / fuzz(UDP(dport=INC_PORT))
        / contribution(rng))),
    "fuzz(Ethernet)": (2000, lambda rng: bytes(fuzz(Ether()) / IP(src=FUZZER.ip, dst=AGG_IP)
                                               / UDP(dport=INC_PORT) / contribution(rng))),
    "truncated": (3000, lambda rng: bytes(to_aggregator(contribution(rng)))[:rng.randrange(0, 186)]),
    "wrong lengths": (2000, wrong_length),
    "random UDP ports": (2000, lambda rng: bytes(
        Ether(src=FUZZER.mac, dst=AGG_MAC) / IP(src=FUZZER.ip, dst=AGG_IP)
        / UDP(sport=rng.randrange(2**16), dport=(INC_PORT + rng.randrange(1, 2**16)) % 2**16)
        / contribution(rng))),
    "other jobs and slots": (3000, lambda rng: bytes(to_aggregator(contribution(rng)))),
    "window ACKs": (1000, lambda rng: bytes(to_aggregator(window_ack(rng)))),
    "ordinary fuzz(Ether/IPv4/UDP)": (1500, lambda rng: bytes(fuzz(Ether(src=FUZZER.mac, dst=RandMAC())) / fuzz(IP())
                                                              / fuzz(UDP()))),
    "ordinary to hosts and ARP": (500, lambda rng: bytes(rng.choice([
        Ether(src=FUZZER.mac, dst=rng.choice(WORKERS.hosts).mac) / IP(src=FUZZER.ip, dst="10.0.0.1") / UDP(),
        Ether(src=FUZZER.mac, dst="ff:ff:ff:ff:ff:ff") / ARP(psrc=FUZZER.ip, pdst=rng.choice([AGG_IP, "10.0.0.2"])),
    ]))),
}


def fuzz_frames(seed: int) -> list[tuple[str, bytes]]:
    random.seed(seed)        # Scapy's random fields
    rng = random.Random(seed)
    frames = [(name, make(rng)) for name, (count, make) in CATEGORIES.items() for _ in range(count)]
    rng.shuffle(frames)
    return frames


@pytest.fixture
def fuzzed(switch: Switch) -> Switch:
    install_forwarding(switch, [*WORKERS.hosts, FUZZER])
    install_job(switch, WORKERS)
    install_job(switch, FUZZ_JOB)
    return switch


def test_fuzzed_packets_during_an_allreduce_are_all_counted_and_the_sum_is_right(fuzzed: Switch) -> None:
    frames = fuzz_frames(seed=5)
    assert len(frames) >= 20_000
    rng = np.random.default_rng(5)
    calls = [[rng.integers(-2**27, 2**27, LENGTH, dtype=np.int32) for _ in WORKERS.hosts] for _ in range(CALLS)]
    tapped = TappedSwitch(fuzzed, FUZZER.port)
    before = counters(fuzzed)
    injected = 0
    with InProcessFabric(tapped, [*WORKERS.hosts, FUZZER]) as fabric:
        workers = job_workers(fabric, WORKERS, timeout=0.2)
        per_send = -(-len(frames) // (CALLS * LENGTH // INC_K))

        def inject(count: int) -> None:
            """Worker 0's thread: the next `count` fuzz frames, between its contributions."""
            nonlocal injected
            for _, frame in frames[injected:injected + count]:
                fabric.send_frame(FUZZER.port, frame)
            injected = min(len(frames), injected + count)

        workers[0][1].after_send = lambda: inject(per_send)
        with ThreadPoolExecutor(len(workers)) as pool:
            futures = run_workers([w for w, _ in workers], calls, pool)
            results = [f.result(timeout=HANG_GUARD_S) for f in futures]
        during = injected
        inject(len(frames))
        # Still answering: one more call after all the fuzz.
        last = [rng.integers(-1000, 1000, INC_K, dtype=np.int32) for _ in WORKERS.hosts]
        with ThreadPoolExecutor(len(workers)) as pool:
            after = [f.result(timeout=HANG_GUARD_S) for f in run_workers([w for w, _ in workers], [last], pool)]
    deltas = counter_deltas(before, counters(fuzzed))

    assert fuzzed.stats["errors"] == 0
    for per_worker in results:
        for c, call in enumerate(calls):
            np.testing.assert_array_equal(per_worker[c], np.sum(call, axis=0, dtype=np.int32))
    for out in after:
        np.testing.assert_array_equal(out[0], np.sum(last, axis=0, dtype=np.int32))

    expected = Counter(expected_counter(frame, FUZZER.port, ADMITTED) for _, frame in frames)
    worker_sends = sum(t.sends for _, t in workers)
    reached_slots = sum(deltas.get(n, 0) for n in ("contributions", "duplicate_drops", "stale_drops",
                                                   "results_resent")) - worker_sends
    by_counter = {name: deltas.get(name, 0) for name in expected if name not in (FORWARDED, IN_SLOT, WINDOW_ACK)}
    forwarded = [out for (_, frame), out in zip(frames, tapped.outputs)
                 if expected_counter(frame, FUZZER.port, ADMITTED) == FORWARDED]
    log.info("injected %d fuzz frames (%d while the AllReduce ran) in %d categories: %s", len(frames), during,
             len(CATEGORIES), {name: count for name, (count, _) in CATEGORIES.items()})
    log.info("expected outcome per frame: %s", dict(expected))
    log.info("counter increments: %s; workers sent %d contributions (%d retransmissions)", deltas, worker_sends,
             worker_sends - len(WORKERS.hosts) * (CALLS * LENGTH // INC_K + 1))
    assert len(tapped.outputs) == len(frames)
    assert by_counter == {name: expected[name] for name in by_counter}
    assert reached_slots == expected[IN_SLOT]
    assert len(forwarded) == expected[FORWARDED]
    for (_, frame), out in zip(frames, tapped.outputs):
        outcome = expected_counter(frame, FUZZER.port, ADMITTED)
        if outcome == FORWARDED:
            assert out and all(data == frame for _, data in out)
        elif outcome == WINDOW_ACK:      # to the fuzz job's other workers: it has none
            assert out == []
        elif outcome.endswith("_drops"):
            assert out == []
    # Every injected frame is one of: a drop counter, an ARP reply, forwarded, in a slot, or a window ACK.
    assert sum(by_counter.values()) + reached_slots + len(forwarded) + expected[WINDOW_ACK] == len(frames)
