"""Issue 5, item 2: two jobs AllReduce at once on disjoint hosts and slot ranges while a host
of job A forges, from its own port, contributions with job B's id and with the other workers
of A's ids. Nothing arriving on that port changes B's slot registers, every forgery is a
`spoofed_worker_drops`, and both jobs' sums equal numpy's. Look-alike results sent straight
to B's workers are not taken either: a worker takes results only from the aggregator.
"""
from __future__ import annotations

import logging
import random
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np
from p4sim import Switch
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from hosts.inc import INC_K, INC_PORT, OP_CONTRIB, OP_RESULT, POOL_SIZE, IncHeader, pack
from hosts.inprocess import Host, InProcessFabric
from hosts.transport import UdpTransport
from tests.hosts.conftest import Job, host, install_forwarding, install_job
from tests.reliability.conftest import HANG_GUARD_S, counter_deltas, counters, job_workers, run_workers

log = logging.getLogger(__name__)

JOB_A = Job(job_id=1, hosts=tuple(host(i) for i in range(1, 5)), slot_base=0, num_slots=16, mcast_grp=101)
JOB_B = Job(job_id=2, hosts=tuple(host(i) for i in range(5, 9)), slot_base=16, num_slots=16, mcast_grp=102)
FORGER = 0                 # worker 0 of job A, on port 1
LENGTH, CALLS = 60 * INC_K, 3
SLOT_REGISTERS = ("slot_seen", "slot_count", "slot_seq", "slot_flags", "slot_need")


def slot_state(sw: Switch, job: Job) -> tuple[list[int], ...]:
    """Every register cell of the job's slots, both versions."""
    cells = [v * POOL_SIZE + job.slot_base + s for v in (0, 1) for s in range(job.num_slots)]
    regs = sw.state.registers
    per_slot = tuple([regs[f"MyIngress.{name}"].values[i] for i in cells] for name in SLOT_REGISTERS)
    return (*per_slot, [regs["MyIngress.slot_values"].values[i * INC_K + e] for i in cells for e in range(INC_K)])


@dataclass
class GuardedSwitch:
    """Checks, under the switch's lock, that no packet arriving on `port` changes `job`'s slots."""
    switch: Switch
    port: int
    job: Job
    checked: int = 0
    changed: list[bytes] = field(default_factory=list)

    def process(self, port: int, data: bytes) -> list[tuple[int, bytes]]:
        if port != self.port:
            return self.switch.process(port, data)
        with self.switch.lock:
            before = slot_state(self.switch, self.job)
            out = self.switch.process(port, data)
            if slot_state(self.switch, self.job) != before:
                self.changed.append(data)
            self.checked += 1
        return out


def forgeries(rng: random.Random, count: int) -> list[bytes]:
    """INC payloads a dishonest worker 0 of job A might send: B's job id with each of B's
    worker ids, or A's id with another A worker's id; slots and seqs that B and A really use."""
    out = []
    for _ in range(count):
        if rng.random() < 0.7:
            job, worker, slots = JOB_B.job_id, rng.randrange(len(JOB_B.hosts)), JOB_B.num_slots
        else:
            job, worker, slots = JOB_A.job_id, rng.randrange(1, len(JOB_A.hosts)), JOB_A.num_slots
        seq = rng.randrange(CALLS * LENGTH // INC_K)
        header = IncHeader(opcode=OP_CONTRIB, job_id=job, worker_id=worker, count=INC_K, slot=seq % slots,
                           pool_version=(seq // slots) % 2, seq=seq)
        out.append(pack(header, np.full(INC_K, rng.randrange(-2**20, 2**20), np.int32)))
    return out


def test_forged_job_and_worker_ids_change_nothing_in_the_other_job(switch: Switch) -> None:
    hosts = [*JOB_A.hosts, *JOB_B.hosts]
    install_forwarding(switch, hosts)
    install_job(switch, JOB_A)
    install_job(switch, JOB_B)
    guarded = GuardedSwitch(switch, JOB_A.hosts[FORGER].port, JOB_B)
    rng = np.random.default_rng(2)
    inputs = {j.job_id: [[rng.integers(-2**24, 2**24, LENGTH, dtype=np.int32) for _ in j.hosts]
                         for _ in range(CALLS)] for j in (JOB_A, JOB_B)}
    forged = forgeries(random.Random(2), 3000)
    before = counters(switch)
    with InProcessFabric(guarded, hosts) as fabric:
        workers_a = job_workers(fabric, JOB_A, window=16)
        workers_b = job_workers(fabric, JOB_B, first_host=len(JOB_A.hosts), window=16)
        pending = iter(forged)

        def forge_some() -> None:
            for payload in [p for _, p in zip(range(16), pending)]:
                fabric.send_payload(FORGER, payload)
        workers_a[FORGER][1].after_send = forge_some
        with ThreadPoolExecutor(8) as pool:
            futures = {j.job_id: run_workers([w for w, _ in ws], inputs[j.job_id], pool)
                       for j, ws in ((JOB_A, workers_a), (JOB_B, workers_b))}
            results = {job: [f.result(timeout=HANG_GUARD_S) for f in fs] for job, fs in futures.items()}
        for payload in pending:
            fabric.send_payload(FORGER, payload)
    deltas = counter_deltas(before, counters(switch))
    log.info("%d forgeries from port %d among %d packets on that port; counters: %s", len(forged),
             guarded.port, guarded.checked, deltas)

    assert switch.stats["errors"] == 0
    for job_id, per_worker in results.items():
        for out in per_worker:
            for c, call in enumerate(inputs[job_id]):
                np.testing.assert_array_equal(out[c], np.sum(call, axis=0, dtype=np.int32))
    assert guarded.changed == []
    assert deltas["spoofed_worker_drops"] == len(forged)
    assert guarded.checked >= len(forged)


def forged_result(src: Host, dst: Host, header: IncHeader) -> bytes:
    """A frame from `src`'s host straight to `dst`'s, looking like the switch's result."""
    inc = pack(replace(header, opcode=OP_RESULT), np.full(INC_K, 12345, np.int32))
    return bytes(Ether(src=src.mac, dst=dst.mac) / IP(src=src.ip, dst=dst.ip)
                 / UDP(sport=INC_PORT, dport=dst.udp_port, chksum=0) / Raw(inc))


def test_results_forged_host_to_host_are_not_taken_by_the_other_jobs_workers(switch: Switch) -> None:
    """A host of job A sends B's workers look-alike results for the very chunks they wait for
    (switch-forwarded as ordinary traffic): workers take results only from the aggregator."""
    hosts = [*JOB_A.hosts, *JOB_B.hosts]
    install_forwarding(switch, hosts)
    install_job(switch, JOB_B)
    rng = np.random.default_rng(6)
    inputs = [[rng.integers(-2**20, 2**20, LENGTH, dtype=np.int32) for _ in JOB_B.hosts]]
    forger = JOB_A.hosts[FORGER]
    forged = 0
    with InProcessFabric(switch, hosts) as fabric:
        workers = job_workers(fabric, JOB_B, first_host=len(JOB_A.hosts), window=16)
        sender = workers[0][0]

        def forge_results() -> None:
            nonlocal forged
            seq = sender.next_seq - 1 if sender.next_seq else 0
            header = IncHeader(opcode=OP_RESULT, job_id=JOB_B.job_id, worker_id=0, count=INC_K,
                               slot=seq % 16, pool_version=(seq // 16) % 2, seq=seq)
            for h in JOB_B.hosts:
                fabric.send_frame(forger.port, forged_result(forger, h, header))
                forged += 1
        workers[0][1].after_send = forge_results
        with ThreadPoolExecutor(len(workers)) as pool:
            results = [f.result(timeout=HANG_GUARD_S) for f in run_workers([w for w, _ in workers], inputs, pool)]
    log.info("%d forged results sent host to host to job %d's workers", forged, JOB_B.job_id)
    for out in results:
        np.testing.assert_array_equal(out[0], np.sum(inputs[0], axis=0, dtype=np.int32))


def test_udp_transport_takes_datagrams_only_from_the_aggregator() -> None:
    """The kernel-socket transport the Mininet workers use, on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as aggregator, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as forger:
        aggregator.bind(("127.0.0.1", 0))
        forger.bind(("127.0.0.1", 0))
        transport = UdpTransport(aggregator=aggregator.getsockname(), bind=("127.0.0.1", 0))
        try:
            forger.sendto(b"forged", transport.address)
            aggregator.sendto(b"result", transport.address)
            assert transport.recv(5.0) == b"result"
            forger.sendto(b"forged", transport.address)
            assert transport.recv(0.2) is None
        finally:
            transport.close()
