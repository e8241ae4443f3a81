"""AllReduce against p4sim slowed to BMv2's figures (`--slow bmv2`: 8500 packets/s, 100 us added,
a 1024-packet queue) and to a tenth of them (`bmv2-tenth`), N = 4 and 8, 256 B to 1 MiB of
int32, with and without 1% loss on every host link. Every call is exact; lossless, the workers
send at most 10% more packets than the minimum (N x chunks); the time stays within 2x of the
packets through the switch over its rate. This is what proves the hosts' transport adapts:
the fixed 20 ms timeout it replaced failed every bmv2-tenth run (docs/results/slow_switch.md).
"""
from __future__ import annotations

import math

import pytest

from hosts.inc import INC_K as K
from p4sim.dataplane import SLOW_PRESETS
from tests.mininet.test_allreduce import assert_int32_sums, int32_tensors
from topologies.fabric import Impairment

pytestmark = [pytest.mark.mininet, pytest.mark.slow_switch]

# What does not scale with packets: starting the call, process wake-ups with N workers and the
# switch on 2 shared cores, the last round trip. It matters only for small messages (256 B is
# 2 chunks: 1 ms of switch time); from 64 KiB the switch's time dominates the bound.
FIXED_S = 0.25
# With loss, a chunk whose contribution or result is lost waits out a retransmission timeout;
# the last ones do so with nothing else to send. Before a job's first result no round trip is
# measured, so a loss in the first window waits the initial RTO (1 s, RFC 6298) and a second
# one before any sample twice that: 3 s (CI saw 2.98 s for N = 8, 4 KiB, 1% loss, 2 timeouts).
LOSS_ALLOWANCE_S = 3.5

# On a machine that other work loads (load average 8-13 on 2 cores), p4sim itself gets only
# ~4k packets/s of CPU, below the 8500 it is asked for: the 1 MiB cases at BMv2's figures then
# miss the time bound by 1.1-1.5x (sums exact, packets lean). CI runs on its own machine.
# At BMv2's figures, every size. At a tenth every packet costs 1.2 ms of switch time (1 MiB at
# N = 8 would be 77 s a call), so there: 256 B and 64 KiB for both N, with and without loss,
# and 1 MiB only at N = 4 without loss (38 s) to show a long run stays at the switch's rate.
SIZES = {"bmv2": [256, 4 << 10, 64 << 10, 1 << 20], "bmv2-tenth": [256, 64 << 10]}
CASES = [pytest.param((preset, n), size, loss, id=f"{preset}-N{n}-{size}B-loss{loss}",
                      marks=[pytest.mark.impairment] if loss else [])
         for preset, sizes in SIZES.items() for n in (4, 8) for size in sizes for loss in (0, 1)]
CASES.append(pytest.param(("bmv2-tenth", 4), 1 << 20, 0, id="bmv2-tenth-N4-1048576B-loss0"))


@pytest.fixture(scope="module")
def slow_star(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A star of n hosts on p4sim slowed to `preset`; one per (preset, n), as pytest groups them."""
    from tests.mininet.conftest import inc_fabric
    preset, n = request.param
    with inc_fabric(tmp_path_factory.mktemp(f"slow_{preset}_{n}"), n, "p4sim", slow=preset) as star_net:
        yield star_net


@pytest.mark.parametrize("slow_star, size, loss_pct", CASES, indirect=["slow_star"])
def test_allreduce_on_a_slow_switch_is_exact_lean_and_at_the_switchs_rate(slow_star, size, loss_pct):
    preset = slow_star.fabric.options.slow
    pps = SLOW_PRESETS[preset].pps
    n = slow_star.n
    tensors = int32_tensors(n, size // 4, seed=size + loss_pct)
    if loss_pct:
        with slow_star.impaired(Impairment(loss_pct=loss_pct)):
            reports = slow_star.run(tensors)
    else:
        reports = slow_star.run(tensors)
    assert_int32_sums([r.result for r in reports], tensors)

    minimum = n * math.ceil(size // 4 / K)
    sent = sum(r.report["packets_sent"] for r in reports)
    # From the moment the last worker began (worker processes start up to 0.5 s apart on a loaded
    # machine, and nobody's chunk can finish before all have sent it) to the last result.
    all_in = max(r.report["started_at"][-1] for r in reports)
    slowest = max(reports, key=lambda r: r.report["started_at"][-1] + r.report["seconds"][-1])
    seconds = slowest.report["started_at"][-1] + slowest.report["seconds"][-1] - all_in
    if not loss_pct:
        assert sent <= 1.1 * minimum, f"{sent} packets sent, minimum {minimum}"
    bound = 2 * sent / pps + FIXED_S + (LOSS_ALLOWANCE_S if loss_pct else 0)
    assert seconds <= bound, (f"{seconds:.2f} s for {sent} packets through a {pps:.0f} packets/s switch "
                              f"(bound {bound:.2f} s); slowest worker: {slowest.report['last_stats']}")
