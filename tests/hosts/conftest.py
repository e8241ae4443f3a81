"""Fixtures for the host tests: allreduce.p4 compiled once by p4sim, a fresh switch per test,
and the table entries and multicast groups a controller would install for a job, written
straight into the switch's state (p4sim/README.md) so no controller or gRPC is involved.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from p4sim import Program, Switch, compile_file
from p4sim.state import TableEntry

from hosts.inprocess import Host

P4_PROGRAM = Path(__file__).resolve().parents[2] / "p4src" / "allreduce.p4"
FLOOD_GROUP = 1


def host(i: int) -> Host:
    """Host hi as the star topology cables it: port i, 08:00:00:00:00:0i, 10.0.0.i."""
    return Host(port=i, mac=f"08:00:00:00:00:{i:02x}", ip=f"10.0.0.{i}")


@dataclass(frozen=True)
class Job:
    job_id: int
    hosts: tuple[Host, ...]      # worker w is hosts[w]
    slot_base: int = 0
    num_slots: int = 64
    mcast_grp: int = 100


def mac_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def ip_int(ip: str) -> int:
    return int.from_bytes(bytes(int(b) for b in ip.split(".")), "big")


def install_forwarding(sw: Switch, hosts: list[Host]) -> None:
    """L2 entries for every host and a broadcast flood group."""
    l2 = sw.state.tables["MyIngress.l2_forward"]
    for h in hosts:
        l2.insert(TableEntry((("exact", mac_int(h.mac)),), "MyIngress.l2_forward_to", (h.port,)))
    l2.insert(TableEntry((("exact", 0xFFFFFFFFFFFF),), "MyIngress.l2_flood", (FLOOD_GROUP,)))
    sw.state.multicast_groups[FLOOD_GROUP] = [(h.port, 0) for h in hosts]


def install_job(sw: Switch, job: Job) -> None:
    """What protocol.md's control-plane section asks for one job."""
    sw.state.tables["MyIngress.inc_job"].insert(TableEntry(
        (("exact", job.job_id),), "MyIngress.set_job",
        (len(job.hosts), job.mcast_grp, job.slot_base, job.num_slots)))
    for w, h in enumerate(job.hosts):
        sw.state.tables["MyIngress.inc_worker"].insert(TableEntry(
            (("exact", job.job_id), ("exact", w), ("exact", h.port)), "MyIngress.admit_worker", ()))
        sw.state.tables["MyEgress.inc_worker_addr"].insert(TableEntry(
            (("exact", job.job_id), ("exact", w)), "MyEgress.set_worker_addr",
            (mac_int(h.mac), ip_int(h.ip), h.udp_port)))
    sw.state.multicast_groups[job.mcast_grp] = [(h.port, w) for w, h in enumerate(job.hosts)]


def registers(sw: Switch) -> dict[str, list[int]]:
    """A snapshot of every register, to show that a packet changed nothing."""
    return {name: list(r.values) for name, r in sw.state.registers.items()}


def counter(sw: Switch, name: str) -> int:
    return sw.state.counters[name].packets[0]


@pytest.fixture(scope="session")
def program() -> Program:
    return compile_file(str(P4_PROGRAM))


@pytest.fixture
def switch(program: Program) -> Switch:
    return Switch(program)


