"""Issue 5, item 3, in Mininet (root): 4 workers (`python -m hosts.worker` in their hosts)
AllReduce through a p4sim switch process while the controller is run again, and while the
switch process is killed (SIGKILL) and started again under `python -m controller watch`.
Outcomes as docs/protocol.md's "Faults" section states them: the right sum, or every worker
failing with IncTimeoutError naming the job within its time budget; never a hang.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controller.switch import Pipeline
from hosts.inc import INC_K
from tests.mininet.conftest import IncStar
from topologies.switches import REPO_ROOT

pytestmark = pytest.mark.mininet
log = logging.getLogger(__name__)

LENGTH = 400_000
KILL_LENGTH = 1_200_000        # long enough to still run after watch has started
GIVE_UP_S = 15.0            # each worker gives up on a chunk 15 s after first sending it
WORKER_ARGS = ("--timeout", "100", "--give-up-after", str(GIVE_UP_S), "--window", "16")
HANG_GUARD_S = 900.0        # IncStar.allreduce stops the workers after this
DRAIN_S = 1.0               # a paused job's last packets through the switch: a few hundred at most


@pytest.fixture
def star(tmp_path: Path, switch_target: str):  # noqa: ANN201 - an IncStar
    """A star of 4 hosts on the `--target` switch, of this test's own: the kill test leaves a new
    switch process, which must be stopped before the test's leak check, not by a module's fixture after it."""
    from tests.mininet.conftest import inc_fabric
    with inc_fabric(tmp_path / "star", 4, switch_target) as net:
        yield net


def controller(star: IncStar, *args: str) -> list[str]:
    """The command line of `python -m controller ARGS` for this star."""
    return [sys.executable, "-m", "controller", *args, "--topo", str(star.fabric.options.topology_path),
            "--build-dir", str(star.work_dir.parent / "program"), "--program", "allreduce"]


def tensors(seed: int, length: int = LENGTH) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-2**24, 2**24, length, dtype=np.int32) for _ in range(4)]


def wait_for_log(path: Path, text: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        if time.monotonic() > deadline:
            pytest.fail(f"{path.name} never said {text!r}: {path.read_text(errors='replace')[-1000:]}")
        time.sleep(0.1)


def contributions(star: IncStar) -> int:
    """The switch's `contributions` counter, read over P4Runtime without arbitration: a
    `controller counters` run would take over as primary and fail the workers' clear-slots."""
    pipeline = Pipeline.from_build(star.work_dir.parent / "program", "allreduce")
    (counter_id,) = [c.preamble.id for c in pipeline.p4info.counters if c.preamble.name == "MyIngress.contributions"]
    request = p4runtime_pb2.ReadRequest(device_id=0)
    request.entities.add().counter_entry.counter_id = counter_id
    with grpc.insecure_channel(star.fabric.topo.switches["s1"].grpc_addr) as channel:
        responses = p4runtime_pb2_grpc.P4RuntimeStub(channel).Read(request, timeout=30)
        return sum(e.counter_entry.data.packet_count for r in responses for e in r.entities)


def wait_for_progress(star: IncStar, than: int, run: Future) -> int:
    """Wait until the switch has counted more contributions than `than` (the AllReduce runs)."""
    for _ in range(200):
        now = contributions(star)
        if now > than:
            return now
        if run.done():
            run.result()            # the workers' own error, if they ended already
            pytest.fail("the workers finished before the switch counted any contribution")
        time.sleep(0.2)
    pytest.fail("the workers never reached the switch")


def test_controller_setup_again_during_an_allreduce_changes_nothing(star: IncStar) -> None:
    inputs = tensors(1)
    before = contributions(star)
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(star.allreduce, inputs, *WORKER_ARGS)
        wait_for_progress(star, before, run)
        again = subprocess.run(controller(star, "setup"), cwd=REPO_ROOT, capture_output=True, text=True,
                               timeout=120)
        results = run.result(timeout=HANG_GUARD_S)
    log.info("controller set up again mid-AllReduce: %s", again.stderr.strip().splitlines()[-3:])
    assert again.returncode == 0, again.stderr
    assert "pipeline kept" in again.stderr and "cleared" not in again.stderr
    expected = np.sum(inputs, axis=0, dtype=np.int32)
    for r in results:
        np.testing.assert_array_equal(r, expected)


def worker_pids(star: IncStar) -> list[int]:
    """The pids of the `hosts.worker` processes this star's AllReduce started (found by their
    --input file, which lives in the star's own work folder)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"hosts.worker" in argv and any(a.startswith(str(star.work_dir).encode()) for a in argv):
            pids.append(int(proc.name))
    return pids


def test_switch_killed_mid_allreduce_with_no_result_in_flight_is_reinstalled_by_watch_and_every_sum_is_right(
        star: IncStar, tmp_path: Path) -> None:
    """docs/protocol.md: a restart during which no result was lost finishes with the right sum.
    The workers are paused (SIGSTOP) and the switch drains before the kill, so every result the
    old switch made has reached its host: the claim is then exactly this outcome, not either.
    (A restart that loses a result makes every worker time out: test_faults.py, in process.)"""
    inputs = tensors(2, KILL_LENGTH)
    total = 4 * -(-KILL_LENGTH // INC_K)            # contributions of the whole AllReduce, sent once each
    watch_log = tmp_path / "watch.log"
    s1 = star.fabric.host("s1")
    watch = None
    paused: list[int] = []
    try:
        before = contributions(star)
        with ThreadPoolExecutor(1) as pool:
            run = pool.submit(star.allreduce, inputs, *WORKER_ARGS)
            wait_for_progress(star, before, run)
            # Started once the job's slots are cleared, so its later election id keeps it primary.
            with watch_log.open("wb") as log_file:
                watch = subprocess.Popen(controller(star, "watch") + ["--poll", "0.2"], cwd=REPO_ROOT,
                                         stdout=subprocess.DEVNULL, stderr=log_file)
            wait_for_log(watch_log, "reconciled (pipeline kept")
            if run.done():
                pytest.fail(f"the AllReduce ended before the switch was killed: {run.result()!r:.200}")
            paused = worker_pids(star)
            assert len(paused) == 4, paused
            for pid in paused:
                os.kill(pid, signal.SIGSTOP)
            time.sleep(DRAIN_S)                 # the switch answers what it got; nothing new arrives
            at_kill = contributions(star) - before
            killed = time.monotonic()
            s1.proc.kill()                      # no clean-up: the switch and all its state are gone
            s1.stop(deleteIntfs=False)
            s1.start([])                        # the same process command, same ports, no pipeline
            restarted = time.monotonic() - killed
            for pid in paused:
                os.kill(pid, signal.SIGCONT)
            paused = []
            outcome = run.result(timeout=HANG_GUARD_S)      # a worker's IncTimeoutError fails the test
            finished = time.monotonic() - killed
        after = contributions(star)             # the new switch's count only
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
        if watch is not None:
            watch.terminate()
            watch.wait(timeout=60)
    text = watch_log.read_text()
    log.info("killed s1 after %d of %d contributions; it served again %.1f s later and counted %d; workers "
             "ended %.1f s after the kill", at_kill, total, restarted, after, finished)
    assert "lost the P4Runtime stream" in text and "reconciled (pipeline pushed" in text, text
    assert 0 < at_kill < total                  # killed mid-AllReduce ...
    assert after > 0 and at_kill + after >= total   # ... and the rest went through the new switch
    expected = np.sum(inputs, axis=0, dtype=np.int32)
    for r in outcome:
        np.testing.assert_array_equal(r, expected)
