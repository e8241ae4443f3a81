"""Issue 12, items 3 and 5, in Mininet (root): `python -m controller pool` sets up a star of 6
hosts (p4sim; BMv2 too where installed) with no jobs of its own and serves the slot pool on a
Unix socket; jobs run `python -m hosts.dist_worker` in their hosts (backend auto, slots from
the pool). Three concurrent jobs on a pool that fits two: the third is refused and runs on the
ring. A switch killed mid-call: the job finishes on the ring. Every result equals numpy's sum
exactly.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import grpc
import numpy as np
import pytest
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controller.switch import Pipeline
from hosts.inc import INC_K
from tests.mininet.conftest import free_port, free_run
from topologies.fabric import Fabric, FabricOptions
from topologies.pieces import DEFAULT_PROGRAM, compile_program
from topologies.procs import end_child
from topologies.spec import Topology, leaf_spine, star
from topologies.switches import REPO_ROOT

pytestmark = pytest.mark.mininet
log = logging.getLogger(__name__)

WINDOW = 16
POOL_SLOTS = 2 * WINDOW          # room for two jobs
CONTRIBUTIONS = "MyIngress.contributions"
HANG_GUARD_S = 600.0
# The same tests on BMv2 where it is installed (skipped with the reason otherwise).
TARGETS = ["p4sim", pytest.param("bmv2", marks=pytest.mark.bmv2)]
# A killed switch's jobs give up on INC after this long without a result (--give-up-after).
GIVE_UP_S = 10.0


@dataclass
class PoolStar:
    """A fabric (a star of 6 hosts here; tests/mininet/test_trees.py: a leaf-spine) and the pool
    controller serving it."""
    fabric: Fabric
    program_dir: Path
    work_dir: Path
    address: str
    controller_log: Path

    def switch_counter(self, name: str, switch: str = "s1") -> int:
        """A counter of `switch`, read over P4Runtime without arbitration (the pool controller stays primary)."""
        pipeline = Pipeline.from_build(self.program_dir, "allreduce")
        (counter_id,) = [c.preamble.id for c in pipeline.p4info.counters if c.preamble.name == name]
        spec = self.fabric.topo.switches[switch]
        request = p4runtime_pb2.ReadRequest(device_id=spec.device_id)
        request.entities.add().counter_entry.counter_id = counter_id
        with grpc.insecure_channel(spec.grpc_addr) as channel:
            responses = p4runtime_pb2_grpc.P4RuntimeStub(channel).Read(request, timeout=30)
            return sum(e.counter_entry.data.packet_count for r in responses for e in r.entities)

    def start_job(self, name: str, hosts: list[str], calls: list[list[np.ndarray]], *extra: str,
                  rounds: int = 1) -> list[subprocess.Popen]:
        """Rank r of the job runs in hosts[r] and AllReduces calls[c][r] for each call c, `rounds`
        times over (a job that must outlast another's start-up: the compiled engine on p4sim's
        C backend does 100k elements in tens of milliseconds)."""
        topo = self.fabric.topo
        master = f"{topo.hosts[hosts[0]].address}:{free_port()}"
        procs = []
        for r, host in enumerate(hosts):
            inputs = []
            for c, call in enumerate(calls):
                inputs += ["--input", str(self.work_dir / f"{name}-r{r}-in{c}.npy")]
                np.save(inputs[-1], call[r])
            inputs *= rounds
            cmd = [sys.executable, "-m", "hosts.dist_worker", "--rank", str(r), "--world-size", str(len(hosts)),
                   "--master", master, "--pool", self.address, "--interface", topo.hosts[host].intf,
                   "--window", str(WINDOW), *inputs, "--output", str(self.work_dir / f"{name}-r{r}.npy"), *extra]
            procs.append(self.fabric.popen(host, cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True))
        return procs

    def finish_job(self, name: str, procs: list[subprocess.Popen], n_calls: int) -> tuple[list[dict], list[list]]:
        """Every rank's JSON report (with its stderr) and results, once all have ended."""
        reports, results = [], []
        for r, proc in enumerate(procs):
            try:
                out, err = proc.communicate(timeout=HANG_GUARD_S)
            finally:
                end_child(proc)
            assert proc.returncode == 0, f"{name} rank {r} failed: {err[-2000:]}"
            reports.append({**json.loads(out.strip().splitlines()[-1]), "stderr": err})
            results.append([np.load(self.work_dir / f"{name}-r{r}-{c}.npy") for c in range(n_calls)])
        return reports, results

    def kill_switch(self, name: str) -> None:
        """Kill the switch process (every slot, entry and group gone) and start the same command
        again, with no pipeline until the pool controller's watch pushes it."""
        switch = self.fabric.host(name)
        switch.proc.kill()
        switch.stop(deleteIntfs=False)
        switch.start([])

    def assert_ended_in_the_switch_or_on_the_ring(self, reports: list[dict], switch: str) -> None:
        """Every rank the same way: on INC with no fallback, where the pool reinstalled the job on
        the restarted switch (JobPool.reinstall) before the ranks' time budget ran out and no
        result was lost; else on the ring after one fallback, saying why (docs/protocol.md)."""
        ways = {(r["backend"], r["fallbacks"]) for r in reports}
        assert ways in ({("inc", 0)}, {("ring", 1)}), reports
        if ways == {("ring", 1)}:
            assert all("the switch stopped answering mid-call" in r["stderr"] for r in reports)
        else:
            self.wait_for_log(f"pool: {switch}: jobs 100 reinstalled")
        self.wait_for_log(f"{switch}: reconciled (pipeline pushed")

    def wait_for_log(self, text: str, count: int = 1, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while self.controller_log.read_text(errors="replace").count(text) < count:
            if time.monotonic() > deadline:
                pytest.fail(f"the pool controller never said {text!r} {count} times: "
                            f"{self.controller_log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)


@pytest.fixture
def pool_star(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PoolStar]:
    """Per test, on the target `request.param`: the switch-kill test leaves a new switch
    process, stopped with its fabric."""
    with serve_pool(dataclasses.replace(star(6, grpc_port=free_port(), thrift_port=free_port()), jobs=[]),
                    request.param, tmp_path) as net:
        yield net


@contextmanager
def serve_pool(topo: Topology, target: str, base: Path, slots: int = POOL_SLOTS) -> Iterator[PoolStar]:
    """The fabric of `topo` (no jobs of its own) on `target`, its hosts' commands run, and
    `python -m controller pool` serving `slots` slots of each switch; all stopped on the way out."""
    program_dir = base / "program"
    compile_program(target, DEFAULT_PROGRAM, program_dir)
    fabric = Fabric(topo, FabricOptions(target=target, build_dir=base / "fabric"))
    controller = None
    try:
        fabric.start()
        fabric.run_host_commands()
        net = PoolStar(fabric, program_dir, base / "work", f"unix:{base / 'pool.sock'}", base / "pool.log")
        net.work_dir.mkdir()
        with net.controller_log.open("wb") as log_file:
            controller = subprocess.Popen(
                [sys.executable, "-m", "controller", "pool", "--topo", str(fabric.options.topology_path),
                 "--target", target, "--build-dir", str(program_dir), "--program", "allreduce",
                 "--listen", net.address, "--slots", str(slots), "--poll", "0.2"],
                cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=log_file)
        net.wait_for_log("serving the slot pool at")
        yield net
    finally:
        if controller is not None:
            end_child(controller)
        fabric.stop()
    assert not fabric.left_behind, f"the fabric left these behind: {fabric.left_behind}"


@contextmanager
def tree_pool(base: Path) -> Iterator[PoolStar]:
    """A leaf-spine on p4sim, leaves s1 (h1-h3) and s2 (h4-h6) under spines s3 and s4, with no jobs of
    its own, and the pool controller serving it (tests/mininet/test_trees.py)."""
    grpc = free_run(4)
    topo = dataclasses.replace(leaf_spine(2, 2, 3, grpc_port=grpc, thrift_port=free_run(4, avoid=grpc)), jobs=[])
    with serve_pool(topo, "p4sim", base) as net:
        yield net


def grants(net: PoolStar) -> list[str]:
    """The pool controller's grant lines so far."""
    return [line for line in net.controller_log.read_text(errors="replace").splitlines() if "granted slots" in line]


def wait_until_running(net: PoolStar, switch: str, before: int, procs: list[subprocess.Popen]) -> None:
    """Until `switch` has counted a good part of a call, so what follows happens mid-call."""
    for _ in range(600):
        if net.switch_counter(CONTRIBUTIONS, switch) > before + 500:
            return
        assert all(p.poll() is None for p in procs), "the job ended before the fault"
        time.sleep(0.1)
    pytest.fail(f"{switch} never counted the job's contributions")


def int_calls(seed: int, ranks: int, length: int, n_calls: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(-2**24, 2**24, length, dtype=np.int32) for _ in range(ranks)] for _ in range(n_calls)]


def assert_exact(results: list[list], calls: list[list[np.ndarray]]) -> None:
    """Every rank's result of every call (the calls over again, as start_job's rounds) is numpy's sum."""
    for per_rank in results:
        for c, result in enumerate(per_rank):
            np.testing.assert_array_equal(result, np.sum(calls[c % len(calls)], axis=0, dtype=np.int32))


@pytest.mark.parametrize("pool_star", TARGETS, indirect=True)
def test_three_jobs_on_a_pool_for_two_the_third_runs_on_the_ring_and_all_are_exact(pool_star: PoolStar) -> None:
    length, n_calls = 100_000, 3
    rounds = {"a": 20, "b": 20, "c": 1}      # a and b hold the pool for seconds after c has started
    jobs = {"a": ["h1", "h2"], "b": ["h3", "h4"], "c": ["h5", "h6"]}
    calls = {name: int_calls(i, 2, length, n_calls) for i, name in enumerate(jobs)}
    before = pool_star.switch_counter("MyIngress.contributions")
    running = {}
    try:
        for name in ("a", "b"):
            running[name] = pool_star.start_job(name, jobs[name], calls[name], rounds=rounds[name])
        pool_star.wait_for_log("granted slots", count=2)
        running["c"] = pool_star.start_job("c", jobs["c"], calls["c"])     # while a and b hold the pool
        done = {name: pool_star.finish_job(name, procs, n_calls * rounds[name]) for name, procs in running.items()}
    finally:
        for procs in running.values():
            for proc in procs:
                end_child(proc)
    added = pool_star.switch_counter("MyIngress.contributions") - before
    log.info("backends %s; fallbacks %s; %d contributions; seconds %s",
             {n: [r["backend"] for r in d[0]] for n, d in done.items()},
             {n: [r["fallbacks"] for r in d[0]] for n, d in done.items()}, added,
             {n: [r["seconds"] for r in d[0]] for n, d in done.items()})
    pool_log = pool_star.controller_log.read_text(errors="replace")
    assert "released" not in pool_log.partition("refused (no_room")[0], (
        f"a or b gave its slots back before c asked: the jobs did not overlap\n{pool_log[-2000:]}")
    for name, (reports, results) in done.items():
        assert_exact(results, calls[name])
        on_ring = name == "c"
        assert [(r["backend"], r["fallbacks"]) for r in reports] == [("ring", 1) if on_ring else ("inc", 0)] * 2
    assert "the slot pool refused the job (no_room" in done["c"][0][0]["stderr"]
    # a and b summed every chunk in the switch (plus a probe and a closing call per rank); c sent it nothing.
    assert added == 2 * 2 * (rounds["a"] * n_calls * -(-length // INC_K) + 2)


@pytest.mark.parametrize("pool_star", TARGETS, indirect=True)
def test_switch_killed_mid_call_the_job_ends_exact_in_the_switch_or_on_the_ring(pool_star: PoolStar) -> None:
    length, n_calls, ranks, rounds = 300_000, 2, 4, 5      # rounds: still running when the switch dies
    calls = int_calls(7, ranks, length, n_calls)
    before = pool_star.switch_counter("MyIngress.contributions")
    procs = pool_star.start_job("k", ["h1", "h2", "h3", "h4"], calls, "--give-up-after", str(GIVE_UP_S),
                                rounds=rounds)
    try:
        pool_star.wait_for_log("granted slots")
        for _ in range(600):
            if pool_star.switch_counter("MyIngress.contributions") > before + 1000:
                break
            assert all(p.poll() is None for p in procs), "the job ended before the switch was killed"
            time.sleep(0.1)
        killed = time.monotonic()
        pool_star.kill_switch("s1")
        reports, results = pool_star.finish_job("k", procs, n_calls * rounds)
        finished = time.monotonic() - killed
    finally:
        for proc in procs:
            end_child(proc)
    log.info("killed s1 mid-call; the job finished %.1f s later; reports %s", finished,
             [(r["backend"], r["fallbacks"]) for r in reports])
    assert_exact(results, calls)
    pool_star.assert_ended_in_the_switch_or_on_the_ring(reports, "s1")


def test_a_spine_killed_mid_call_the_tree_ends_exact_in_the_switch_or_on_the_ring(tmp_path: Path) -> None:
    """On test_trees.py's leaf-spine: a tree of four workers over both leaves, summed by s3."""
    with tree_pool(tmp_path) as pool_tree:
        length, n_calls, rounds = 300_000, 2, 5
        calls = int_calls(7, 4, length, n_calls)
        granted = len(grants(pool_tree))
        before = pool_tree.switch_counter(CONTRIBUTIONS, "s3")
        procs = pool_tree.start_job("k", ["h1", "h2", "h4", "h5"], calls, "--give-up-after", str(GIVE_UP_S),
                                    rounds=rounds)
        try:
            pool_tree.wait_for_log("granted slots", count=granted + 1)
            assert "(root s3:" in grants(pool_tree)[-1], "the pool is empty: the tree's root is the first spine"
            wait_until_running(pool_tree, "s3", before, procs)
            pool_tree.kill_switch("s3")
            reports, results = pool_tree.finish_job("k", procs, n_calls * rounds)
        finally:
            for proc in procs:
                end_child(proc)
        assert_exact(results, calls)
        pool_tree.assert_ended_in_the_switch_or_on_the_ring(reports, "s3")
