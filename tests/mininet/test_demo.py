"""`make demo`, the README's first command after setup, run as a user runs it: the Makefile, the
runner, a 4-host Mininet star, the controller and one worker process per host, 1 MiB of float32.
Also slowed to BMv2's figures (`SLOW=bmv2`), where it must re-send at most 10% of its results.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from protocol import RECOMMENDED_ELEMENTS_PER_PACKET
from topologies.pieces import job_elements_per_packet
from topologies.spec import Topology
from topologies.switches import REPO_ROOT

pytestmark = pytest.mark.mininet

RESENT = re.compile(r"s1 re-sent (\d+) results, [\d.]+% of the (\d+) it delivered")


def make_demo(build_dir: Path, *variables: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("needs make (apt-get install make)")
    done = subprocess.run(["make", "demo", f"BUILD_DIR={build_dir}", *variables], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"make demo failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize("variables", [(), ("SLOW=bmv2",)], ids=["p4sim", "slowed-to-bmv2"])
def test_make_demo_sums_a_mebibyte_like_numpy(tmp_path, variables, fabric_slot_free):
    out = make_demo(tmp_path, *variables)
    assert "AllReduce of 262144 float32 (1.00 MiB) over 4 workers" in out
    assert re.search(r"^OK: max \|result - numpy\| = \S+ ", out, re.MULTILINE), out
    resent, delivered = map(int, RESENT.search(out).groups())
    topology = tmp_path / "topology.json"       # K: the target's recommended one, as the controller recorded it
    k = job_elements_per_packet(topology, Topology.load(topology).jobs[0].job_id)
    assert k == RECOMMENDED_ELEMENTS_PER_PACKET["p4sim"]
    assert delivered >= 262144 // k * 4           # every chunk's result reached all 4 workers
    assert resent <= 0.1 * delivered, out
    if variables:
        assert re.search(r"^s1 \d+ packets received, \d+ served, 0 dropped", out, re.MULTILINE), out
