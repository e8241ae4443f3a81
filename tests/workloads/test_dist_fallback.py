"""hosts.dist's automatic fall-back to the host ring, without root: when the slot pool
service cannot be reached, and when the switch (a loopback stand-in) goes away between
calls. Results are compared with numpy's exactly; every fallback is counted and logged.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import numpy as np

from hosts.dist import Options, ProcessGroup
from tests.workloads.aggregator import LoopbackAggregator
from tests.workloads.test_dist import ROOT, free_port, on_every_rank


def test_auto_uses_the_ring_when_the_slot_pool_cannot_be_reached(caplog, tmp_path):
    x = [np.arange(100, dtype=np.int32) * (r + 3) for r in range(3)]
    options = Options(aggregator=("127.0.0.1", free_port(socket.SOCK_DGRAM)), pool=f"unix:{tmp_path}/none.sock")
    results = on_every_rank(3, options, lambda g: g.all_reduce(x[g.rank]))
    for group, got in results:
        assert group.backend == "ring" and group.stats.fallbacks == 1
        np.testing.assert_array_equal(got, np.sum(x, axis=0))
    assert "the slot pool refused the job (unreachable" in caplog.text


def test_auto_finishes_on_the_ring_when_the_switch_goes_away(caplog):
    aggregator = LoopbackAggregator(job_id=1, num_workers=2)
    rng = np.random.default_rng(4)
    calls = [[rng.integers(-2**20, 2**20, 300, dtype=np.int32) for _ in range(2)] for _ in range(3)]
    between = threading.Barrier(2)

    def body(g: ProcessGroup) -> list[np.ndarray]:
        out = [g.all_reduce(calls[0][g.rank])]
        assert g.backend == "inc"
        if between.wait() == 0:
            aggregator.close()
        between.wait()
        return out + [g.all_reduce(c[g.rank]) for c in calls[1:]]

    try:
        results = on_every_rank(2, Options(aggregator=aggregator.address, timeout=0.05, give_up_after=0.5), body)
    finally:
        if not aggregator._stop.is_set():
            aggregator.close()
    for group, got in results:
        assert group.backend == "ring" and group.stats.fallbacks == 1
        assert group.stats.calls["all_reduce"] == 3
        for c, call in enumerate(calls):
            np.testing.assert_array_equal(got[c], np.sum(call, axis=0, dtype=np.int32))
    assert "falling back to the host ring at call 1: the switch stopped answering mid-call" in caplog.text


def test_dist_worker_cli_runs_a_rank_and_reports_bad_input_in_one_line(tmp_path):
    x = np.arange(50, dtype=np.int32)
    np.save(tmp_path / "x.npy", x)
    base = [sys.executable, "-m", "hosts.dist_worker", "--rank", "0", "--world-size", "1",
            "--master", f"127.0.0.1:{free_port()}", "--output", str(tmp_path / "out.npy")]
    done = subprocess.run([*base, "--backend", "ring", "--input", str(tmp_path / "x.npy"),
                           "--input", str(tmp_path / "x.npy")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["backend"] == "ring" and report["calls"] == {"all_reduce": 2}
    for i in range(2):
        np.testing.assert_array_equal(np.load(tmp_path / f"out-{i}.npy"), x)
    missing = subprocess.run([*base, "--input", str(tmp_path / "none.npy")], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode == 1 and missing.stderr.strip().splitlines()[-1].startswith("error: rank 0:")
    assert "Traceback" not in missing.stderr


def test_auto_redoes_the_switchs_own_collectives_on_the_ring_when_the_switch_goes_away():
    """The first calls run through the switch's collectives (JOINs seen); the switch goes; each
    kind of call then times out once or runs on the ring, bit for bit or exact all the same."""
    aggregator = LoopbackAggregator(job_id=1, num_workers=2)
    rng = np.random.default_rng(5)
    ints = [rng.integers(-2**20, 2**20, 70, dtype=np.int32) for _ in range(2)]
    doubles = [rng.standard_normal((3, 4)) for _ in range(2)]
    between = threading.Barrier(2)

    def calls(g: ProcessGroup) -> list:
        return [g.all_gather(doubles[g.rank]), g.broadcast(doubles[g.rank], src=1), g.reduce_scatter(ints[g.rank]),
                g.barrier()]

    def body(g: ProcessGroup) -> list:
        first = calls(g)
        if between.wait() == 0:
            aggregator.close()
        between.wait()
        return [first, calls(g)]

    try:
        results = on_every_rank(2, Options(aggregator=aggregator.address, timeout=0.05, give_up_after=0.5), body)
    finally:
        if not aggregator._stop.is_set():
            aggregator.close()
    assert aggregator.joins > 0
    for group, rounds in results:
        assert group.backend == "ring" and group.stats.fallbacks == 1
        for gathered, broadcast, scattered, _ in rounds:
            assert all(np.array_equal(mine, theirs) for mine, theirs in zip(gathered, doubles))
            assert np.array_equal(broadcast, doubles[1])
            np.testing.assert_array_equal(scattered, np.sum(ints, axis=0)[group.rank * 35:(group.rank + 1) * 35])
