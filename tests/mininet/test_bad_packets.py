"""Hand-crafted bad INC packets from a real host's raw socket into p4sim running
allreduce.p4: each is dropped and counted under its own reason, nothing comes back to
the sender, and no slot register changes."""
import json
import pickle
import subprocess
import sys

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from hosts.inc import AGG_IP, AGG_MAC, INC_K, INC_PORT, POOL_SIZE, Inc
from topologies.switches import REPO_ROOT

pytestmark = pytest.mark.mininet

SLOT_REGISTERS = ("slot_seen", "slot_count", "slot_seq", "slot_flags", "slot_need", "slot_values")
SENDER = "h1"          # worker 0 of job 1, on switch port 1


def contribution(star, **inc_fields) -> Ether:
    host = star.fabric.topo.hosts[SENDER]
    fields = dict(job_id=star.job.job_id, worker_id=0, slot=0, seq=0, elements=list(range(INC_K)))
    fields.update(inc_fields)
    return (Ether(dst=AGG_MAC, src=host.mac) / IP(src=host.address, dst=AGG_IP)
            / UDP(sport=INC_PORT, dport=INC_PORT) / Inc(**fields))


def bad_packets(star) -> list[tuple[str, str, bytes]]:
    full = bytes(contribution(star))
    truncated = full[:14 + 20 + 8 + 10]        # Ethernet, IPv4, UDP, then 10 of the INC header's 16 bytes
    return [
        ("unknown job", "unknown_job_drops", bytes(contribution(star, job_id=999))),
        ("worker id on another worker's port", "spoofed_worker_drops", bytes(contribution(star, worker_id=1))),
        ("slot index out of range", "slot_range_drops", bytes(contribution(star, slot=POOL_SIZE + 7))),
        ("truncated INC header", "malformed_drops", truncated),
        ("element count above K", "malformed_drops", bytes(contribution(star, count=INC_K + 1))),
    ]


def slot_registers(star) -> dict[str, list[int]]:
    values = {}
    for name in SLOT_REGISTERS:
        out = subprocess.run([sys.executable, "-m", "controller", "registers", f"MyIngress.{name}",
                              "--topo", str(star.fabric.options.topology_path)],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        values[name] = json.loads(out.stdout)
    return values


def inject(star, tmp_path, frame: bytes) -> None:
    frames = tmp_path / "frame.pickle"
    frames.write_bytes(pickle.dumps([frame]))
    proc = star.fabric.popen(SENDER, [sys.executable, "-m", "tests.reliability.inject", str(frames),
                                      "--interface", star.fabric.topo.hosts[SENDER].intf],
                             cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and json.loads(out) == {"sent": 1, "refused": 0}, err


@pytest.mark.parametrize("inc_star", [4], indirect=True, ids=lambda n: f"N{n}")
def test_each_bad_packet_is_dropped_counted_and_changes_no_register(inc_star, tmp_path):
    registers = slot_registers(inc_star)
    for what, counter, frame in bad_packets(inc_star):
        before = inc_star.counters()
        inject(inc_star, tmp_path, frame)
        after = inc_star.counters()
        grew = {name: after[name] - before[name] for name in after if after[name] != before[name]}
        assert grew == {f"MyIngress.{counter}": 1}, what
    assert slot_registers(inc_star) == registers
