"""Issue 5, item 1 in Mininet (root), smaller: 3,000 of the fuzz test's frames sent from h1's
raw socket into the p4sim switch process while 4 workers AllReduce. The sums equal numpy's,
the switch logs no failed packet, and each drop counter that only bad packets reach grew by
what tests/reliability/expected.py predicts for the frames sent.
"""
from __future__ import annotations

import json
import logging
import pickle
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from hosts.inc import POOL_SIZE
from tests.mininet.conftest import IncStar
from tests.reliability.expected import IN_SLOT, WINDOW_ACK, Admitted, expected_counter
from tests.reliability.test_fuzz_dataplane import fuzz_frames
from topologies.switches import REPO_ROOT

pytestmark = pytest.mark.mininet
log = logging.getLogger(__name__)

FRAMES = 3000
LENGTH = 200_000
INJECTOR = "h1"
# Counters that neither the workers nor the hosts' own traffic (ARP for the aggregator) touch.
BAD_PACKET_COUNTERS = ("malformed_drops", "bad_version_drops", "unknown_job_drops", "spoofed_worker_drops",
                       "slot_range_drops")


def admitted(star: IncStar) -> Admitted:
    topo = star.fabric.topo
    ports = {h: i for i, h in enumerate(sorted(topo.hosts, key=lambda h: int(h[1:])), 1)}
    return Admitted(jobs={star.job.job_id: (0, POOL_SIZE)},
                    workers=frozenset((star.job.job_id, w, ports[h]) for w, h in enumerate(star.job.workers)),
                    macs=frozenset(bytes.fromhex(s.mac.replace(":", "")) for s in topo.hosts.values())
                    | {b"\xff" * 6})


def test_fuzzed_frames_from_a_host_during_an_allreduce_are_counted_and_the_sum_is_right(
        star: IncStar, tmp_path: Path) -> None:
    allowed = admitted(star)
    port = next(p for _, w, p in allowed.workers if w == 0)
    # The injecting host is worker 0: a frame that passes every check is its own contribution,
    # which it may send (and would change the sum), or its window ACK, which goes on to the other
    # hosts (a host whose worker has ended answers it with an ICMP error to the aggregator's
    # address, which the switch counts as malformed), so such frames are left out.
    frames = [f for _, f in fuzz_frames(seed=11) if len(f) >= 14
              and expected_counter(f, port, allowed) not in (IN_SLOT, WINDOW_ACK)][:FRAMES]
    expected = Counter(expected_counter(f, port, allowed) for f in frames)
    frames_file = tmp_path / "frames.pickle"
    frames_file.write_bytes(pickle.dumps(frames))
    inputs = [np.random.default_rng([3, w]).integers(-2**24, 2**24, LENGTH, dtype=np.int32) for w in range(4)]
    before = star.counters()
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(star.allreduce, inputs, "--timeout", "100")
        injector = star.fabric.popen(INJECTOR, [sys.executable, "-m", "tests.reliability.inject", str(frames_file),
                                                "--interface", star.fabric.topo.hosts[INJECTOR].intf],
                                     cwd=REPO_ROOT, stdout=-1, stderr=-1, text=True)
        out, err = injector.communicate(timeout=600)
        results = run.result(timeout=900)
    after = star.counters()
    report = json.loads(out.strip().splitlines()[-1]) if injector.returncode == 0 else {}
    deltas = {name: after[f"MyIngress.{name}"] - before[f"MyIngress.{name}"] for name in BAD_PACKET_COUNTERS}
    log.info("sent %s from %s; expected %s; counted %s", report, INJECTOR, dict(expected), deltas)
    assert injector.returncode == 0, err
    assert report == {"sent": len(frames), "refused": 0}
    expected_sum = np.sum(inputs, axis=0, dtype=np.int32)
    for r in results:
        np.testing.assert_array_equal(r, expected_sum)
    assert deltas == {name: expected[name] for name in BAD_PACKET_COUNTERS}
    switch_log = star.fabric.host("s1").log_path.read_text(errors="replace")
    assert "packet on port" not in switch_log        # p4sim logs each packet the program failed on
