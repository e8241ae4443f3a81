"""Random damage to INC packets: every packet to the aggregator is accounted for by exactly
one counter, only accepted contributions touch a register, and p4sim never fails on one."""
from __future__ import annotations

import random

import pytest
from p4sim import Switch

from hosts.inc import INC_K
from tests.hosts.conftest import counter, registers
from tests.hosts.test_switch import HOSTS, JOB, contribution, install_forwarding, install_job

INC_COUNTERS = ("malformed_drops", "bad_version_drops", "unknown_job_drops", "spoofed_worker_drops",
                "slot_range_drops", "stale_drops", "duplicate_drops", "results_resent", "contributions")


def damaged(rng: random.Random) -> tuple[int, bytes]:
    """A contribution with its UDP payload cut short, overwritten in places, or both."""
    port, frame = contribution(rng.randrange(len(JOB.hosts)), [rng.randrange(2**31) for _ in range(INC_K)],
                               slot=rng.randrange(JOB.num_slots), seq=rng.randrange(4))
    data = bytearray(frame)
    for _ in range(rng.randrange(4)):
        data[rng.randrange(42, 42 + 16)] = rng.randrange(256)     # the INC header
    if rng.random() < 0.3:
        del data[rng.randrange(42, len(data)):]
    return port, bytes(data)


@pytest.mark.parametrize("seed", range(3))
def test_damaged_packets_are_each_counted_once_and_only_contributions_change_state(switch: Switch,
                                                                                  seed: int) -> None:
    install_forwarding(switch, HOSTS)
    install_job(switch, JOB)
    rng = random.Random(seed)
    for _ in range(150):
        before_counts = {name: counter(switch, f"MyIngress.{name}") for name in INC_COUNTERS}
        before = registers(switch)
        switch.process(*damaged(rng))
        changed = [n for n in INC_COUNTERS if counter(switch, f"MyIngress.{n}") != before_counts[n]]
        assert len(changed) == 1 and counter(switch, f"MyIngress.{changed[0]}") == before_counts[changed[0]] + 1
        if changed != ["contributions"]:
            assert registers(switch) == before
    assert switch.stats["errors"] == 0
