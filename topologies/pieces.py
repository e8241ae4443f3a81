"""The other p4inc pieces a fabric drives, each behind one function and through its CLI:
the P4 compiler (`p4sim compile` or p4c), the controller (`python -m controller`), and the
host workers of an AllReduce job (`python -m hosts.worker`, one per host).
"""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hosts.engine import spin_for
from topologies.fabric import Fabric
from topologies.procs import end_child
from topologies.spec import JobSpec, Topology, TopologyError
from topologies.switches import REPO_ROOT

log = logging.getLogger(__name__)

DEFAULT_PROGRAM = REPO_ROOT / "p4src" / "allreduce.p4"
CONTROLLER_TIMEOUT_S = 120.0
CHECK_EVERY_S = 1.0           # how often a wait on workers looks whether the fabric is still there


class PieceError(RuntimeError):
    """A compiler, controller or worker run that failed; the message carries its stderr."""


@dataclass(frozen=True)
class WorkerResult:
    worker_id: int
    host: str
    result: np.ndarray | dict[str, np.ndarray]   # --matrix: every combination's result, by name
    report: dict            # the worker's JSON line: elements, dtype, seconds, ...


def compile_program(target: str, source: Path, build_dir: Path, elements_per_packet: int | None = None) -> str:
    """Write BUILD/NAME.p4info.txt and BUILD/NAME.json for the target; return NAME. With
    `elements_per_packet`, the program is built with INC_K (allreduce.p4's K) defined to it."""
    name = source.stem
    build_dir.mkdir(parents=True, exist_ok=True)
    defines = [] if elements_per_packet is None else [f"INC_K={elements_per_packet}"]
    if target == "bmv2":
        p4c = shutil.which("p4c")
        if p4c is None:
            raise PieceError("p4c is not installed (not on PATH): install it, or use TARGET=p4sim")
        cmd = [p4c, "--target", "bmv2", "--arch", "v1model",
               "--p4runtime-files", str(build_dir / f"{name}.p4info.txt"), "-o", str(build_dir),
               *(f"-D{d}" for d in defines), str(source)]
    else:
        cmd = [sys.executable, "-m", "p4sim", "compile", str(source), "-o", str(build_dir),
               *(arg for d in defines for arg in ("-D", d))]
    _run(cmd, f"compiling {source}")
    return name


def setup_controller(topology_path: Path, build_dir: Path, program: str, target: str) -> None:
    """Push the pipeline and install forwarding, jobs and multicast groups on every switch; the
    controller records each job's elements per packet in the topology file (`job_elements_per_packet`)."""
    _run([sys.executable, "-m", "controller", "setup", "--topo", str(topology_path), "--target", target,
          "--build-dir", str(build_dir), "--program", program], "controller setup")


def clear_job_slots(topology_path: Path, job_id: int, target: str) -> None:
    """Zero a job's slot state, so that freshly started workers (seq 0) are not taken as stale."""
    _run([sys.executable, "-m", "controller", "clear-slots", str(job_id), "--topo", str(topology_path),
          "--target", target], f"controller clear-slots {job_id}")


def read_counters(topology_path: Path, switch: str, target: str) -> dict[str, list[dict[str, int]]]:
    """Every indirect counter of a switch: name -> [{"packets": p, "bytes": b}, ...]."""
    out = _run([sys.executable, "-m", "controller", "counters", "--topo", str(topology_path),
                "--switch", switch, "--target", target], f"controller counters --switch {switch}")
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        raise PieceError(f"controller counters printed no JSON: {out[:200]!r}") from None


def run_allreduce(fabric: Fabric, job: JobSpec, tensors: list[np.ndarray], work_dir: Path, *,
                  timeout_s: float = 600.0, worker_args: tuple[str, ...] = ()) -> list[WorkerResult]:
    """AllReduce `tensors[w]` from worker w's host at once; return each worker's result.

    Every worker runs `python -m hosts.worker` in its host's namespace on a .npy input.
    Workers that fail or outlive `timeout_s` (together) make a PieceError naming each of
    them with its stderr; nothing started here outlives the call.
    """
    if len(tensors) != len(job.workers):
        raise PieceError(f"job {job.job_id} has {len(job.workers)} workers, got {len(tensors)} tensors")
    work_dir.mkdir(parents=True, exist_ok=True)
    args = []
    for w, tensor in enumerate(tensors):
        inp, out = work_dir / f"w{w}-in.npy", work_dir / f"w{w}-out.npy"
        np.save(inp, tensor)
        out.unlink(missing_ok=True)
        args.append(["--input", str(inp), "--output", str(out), *worker_args])
    outputs = _run_workers(fabric, job, args, timeout_s)
    failed = [f"worker {w} on {host} failed (exit {rc}): {err.strip()}" for w, host, rc, _, err in outputs if rc != 0]
    if failed:
        raise PieceError("\n".join(failed))
    return [WorkerResult(w, host, np.load(work_dir / f"w{w}-out.npy"), _last_json_line(stdout, w))
            for w, host, _, stdout, _ in outputs]


def run_matrix(fabric: Fabric, job: JobSpec, work_dir: Path, size: int, seed: int, *,
               timeout_s: float = 600.0, worker_args: tuple[str, ...] = ()) -> list[WorkerResult]:
    """Every worker runs `python -m hosts.worker --matrix` (each collective x op x dtype once,
    checked against numpy by the worker itself); return each worker's report, failures
    included (exit 1), and its results (an .npz: `result` is its files, by combination).
    A worker that prints no report (bad arguments, a crash, a timeout) makes a PieceError."""
    work_dir.mkdir(parents=True, exist_ok=True)
    outs = [work_dir / f"w{w}-matrix.npz" for w in range(len(job.workers))]
    for out in outs:
        out.unlink(missing_ok=True)
    args = [["--matrix", "--size", str(size), "--seed", str(seed), "--output", str(out), *worker_args] for out in outs]
    outputs = _run_workers(fabric, job, args, timeout_s)
    failed = [f"worker {w} on {host} failed (exit {rc}): {err.strip()}"
              for w, host, rc, _, err in outputs if rc not in (0, 1) or not outs[w].exists()]
    if failed:
        raise PieceError("\n".join(failed))
    return [WorkerResult(w, host, _load_npz(outs[w]), _last_json_line(stdout, w)) for w, host, _, stdout, _ in outputs]


def job_elements_per_packet(topology_path: Path, job_id: int) -> int:
    """The elements per packet (K) the controller recorded for a job when it installed it."""
    try:
        jobs = {job.job_id: job for job in Topology.load(topology_path).jobs}
    except TopologyError as e:
        raise PieceError(str(e)) from None
    if job_id not in jobs:
        raise PieceError(f"{topology_path} has no job {job_id}")
    k = jobs[job_id].elements_per_packet
    if k is None:
        raise PieceError(f"job {job_id} in {topology_path} records no elements per packet: the controller's "
                         f"setup records the K of the pipeline it pushed; run it first")
    return k


def _run_workers(fabric: Fabric, job: JobSpec, args: list[list[str]],
                 timeout_s: float) -> list[tuple[int, str, int, str, str]]:
    """Start `python -m hosts.worker` with args[w] (after the job's and worker's ids, the
    elements per packet the controller recorded for the job, and the spin of as many workers
    sharing this machine's cores) on each worker's host at once;
    (worker, host, exit code, stdout, stderr) of each, in worker order. Workers still running
    after `timeout_s` (together) are ended; none outlives the call. A fabric found gone meanwhile
    (Fabric.check) raises FabricError within CHECK_EVERY_S."""
    k = job_elements_per_packet(fabric.options.topology_path, job.job_id)
    for w, worker_args in enumerate(args):
        told = [worker_args[i + 1] for i, arg in enumerate(worker_args[:-1]) if arg == "--elements-per-packet"]
        if any(t != str(k) for t in told):
            raise PieceError(f"worker {w} of job {job.job_id} was to run with --elements-per-packet {told[-1]}, but "
                             f"the switch program the controller installed the job on carries {k} elements per packet")
    spin = spin_for(len(job.workers))
    procs: list[tuple[int, str, subprocess.Popen]] = []
    try:
        for w, (host, worker_args) in enumerate(zip(job.workers, args)):
            cmd = [sys.executable, "-m", "hosts.worker", "--job-id", str(job.job_id), "--worker-id", str(w),
                   "--workers", str(len(job.workers)), "--elements-per-packet", str(k),
                   "--interface", fabric.topo.hosts[host].intf, "--spin", str(spin.small),
                   "--spin-large", str(spin.large), *worker_args]
            procs.append((w, host, fabric.popen(host, cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE, text=True)))
        deadline = time.monotonic() + timeout_s
        outputs = []
        for w, host, proc in procs:
            while True:
                try:
                    wait = min(CHECK_EVERY_S, max(0.0, deadline - time.monotonic()))
                    stdout, stderr = proc.communicate(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        end_child(proc)
                        stdout, stderr = proc.communicate()
                        stderr = f"did not finish within {timeout_s:.0f} s; {stderr}"
                        break
                    fabric.check()      # a fabric torn down under the workers ends the wait now
            outputs.append((w, host, proc.returncode, stdout, stderr))
        return outputs
    finally:
        for _, _, proc in procs:
            end_child(proc)


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def _last_json_line(stdout: str, worker: int) -> dict:
    for line in reversed(stdout.splitlines()):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    raise PieceError(f"worker {worker} printed no JSON report: {stdout[-200:]!r}")


def _run(cmd: list[str], what: str) -> str:
    log.info("%s: %s", what, " ".join(cmd))
    try:
        done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=CONTROLLER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PieceError(f"{what} did not finish within {CONTROLLER_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        raise PieceError(f"{what} failed (exit {done.returncode}): {detail}")
    return done.stdout
