"""Wide packets end to end: allreduce.p4 built with K = 256 elements per packet on a star of
standard (1500-byte) links, and with K = 512 on jumbo (9000-byte) links, which a 2092-byte
packet needs. The controller records the program's K in the job, the runner hands it to every
worker, and AllReduces of int32 (exact) and float32 (within docs/protocol.md's bound) equal
numpy's, with the switch counting one contribution per worker per K-element chunk. One fabric
per K, shared by the module's tests.
"""
from __future__ import annotations

import json
from typing import Iterator

import numpy as np
import pytest

from tests.hosts.documented import documented_bound
from tests.mininet.conftest import IncStar, inc_fabric
from tests.mininet.test_allreduce import assert_int32_sums, float32_tensors, int32_tensors
from topologies.fabric import Impairment

pytestmark = pytest.mark.mininet
N = 4
WIDTHS = [pytest.param((256, 1500), id="K256-mtu1500"), pytest.param((512, 9000), id="K512-mtu9000")]


@pytest.fixture(scope="module", params=WIDTHS)
def wide_star(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
              switch_target: str) -> Iterator[IncStar]:
    k, mtu = request.param
    with inc_fabric(tmp_path_factory.mktemp(f"wide{k}"), N, switch_target, elements_per_packet=k,
                    mtu=mtu) as star_net:
        yield star_net


def test_the_controller_records_the_programs_k_and_the_links_carry_the_mtu(wide_star: IncStar):
    topology = json.loads(wide_star.fabric.options.topology_path.read_text())
    k, mtu = {256: (256, 1500), 512: (512, 9000)}[wide_star.k]
    assert topology["mtu"] == mtu and [j["elements_per_packet"] for j in topology["jobs"]] == [k]
    for name in ("h1", "s1"):
        intf = "h1-eth0" if name == "h1" else "s1-eth1"
        assert f"mtu {mtu} " in wide_star.fabric.host(name).cmd(f"ip link show {intf}")


@pytest.mark.parametrize("chunks", [1, 3])
def test_wide_int32_allreduce_is_exact_with_a_contribution_per_k_elements(wide_star: IncStar, chunks: int):
    length = (chunks - 1) * wide_star.k + 5          # the last chunk partly padding
    tensors = int32_tensors(N, length, seed=chunks)
    before = wide_star.counters()["MyIngress.contributions"]
    assert_int32_sums(wide_star.allreduce(tensors), tensors)
    assert wide_star.counters()["MyIngress.contributions"] - before == N * chunks


def test_wide_float32_allreduce_under_loss_is_within_the_bound(wide_star: IncStar):
    tensors = float32_tensors(N, 7 * wide_star.k + 3, seed=21)
    with wide_star.impaired(Impairment(loss_pct=2)):
        results = wide_star.allreduce(tensors, "--max-rto", "250")
    expected = np.sum(np.array(tensors, dtype=np.float64), axis=0)
    bound = documented_bound(tensors, wide_star.k)       # K elements share a block exponent
    for r in results:
        assert r.dtype == np.float32 and np.all(np.abs(r - expected) <= bound)
        np.testing.assert_array_equal(r, results[0])
