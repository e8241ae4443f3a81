"""`python -m hosts.worker` as Mininet hosts run it, here on loopback: N processes with
real UDP sockets, through p4sim (inc, behind a UDP bridge) or to each other (ring), each
checking its result against numpy (--check)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from p4sim import Switch

from hosts.inprocess import InProcessFabric
from tests.hosts.bridge import UdpBridge, free_udp_port, loopback_ip
from tests.hosts.conftest import Job, host, install_forwarding, install_job

ROOT = Path(__file__).resolve().parents[2]


def run_workers(commands: list[list[str]]) -> list[dict]:
    procs = [subprocess.Popen([sys.executable, "-m", "hosts.worker", *c], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    return [json.loads(out) for out, _ in outs]


def run_inc_workers(switch: Switch, n: int, args: list[str], job_id: int = 4,
                    engines: list[str] | None = None) -> list[dict]:
    """`python -m hosts.worker` for each of n workers of a job on `switch` (through a UdpBridge),
    with `args` after the job's, worker's and aggregator's ({w} and {engine} in them: the worker's
    id and its engine, engines[w], default c); their JSON reports."""
    port = free_udp_port()
    job = Job(job_id=job_id, hosts=tuple(host(i) for i in range(1, n + 1)), num_slots=8)
    install_forwarding(switch, list(job.hosts))
    install_job(switch, job)
    with InProcessFabric(switch, list(job.hosts)) as fabric:
        bridge = UdpBridge(fabric, n, port)
        try:
            aggregator = f"{bridge.address[0]}:{bridge.address[1]}"
            return run_workers([
                ["--job-id", str(job_id), "--worker-id", str(w), "--workers", str(n), "--aggregator", aggregator,
                 "--bind", loopback_ip(w), "--port", str(port), "--window", "8", *[a.format(w=w, engine=(engines or ["c"] * n)[w]) for a in args]]
                for w in range(n)])
        finally:
            bridge.close()


@pytest.mark.parametrize("dtype, op", [("int32", "sum"), ("float32", "sum"), ("bfloat16", "sum"), ("float32", "max")])
def test_inc_workers_over_udp_through_p4sim_get_the_numpy_sum(switch: Switch, dtype: str, op: str) -> None:
    reports = run_inc_workers(switch, 3, ["--size", "200", "--dtype", dtype, "--op", op, "--check", "--warmup", "1",
                                          "--iterations", "2"])
    for r in reports:
        assert r["correct"] and len(r["seconds"]) == 2 and r["elements"] == 200
        first, second = r["started_at"]
        assert second >= first + r["seconds"][0]        # the second call began after the first ended
        # 7 chunks a call; after the warm-up call the exponents are settled: one packet each, and
        # no more but the retransmissions. How many those are depends on the machine: all 7 chunks
        # are in flight at once, so one stall of a worker or the switch longer than the learned RTO
        # (20 ms at least) re-sends them all (5 seen at load 13). test_adaptive.py checks the RTO
        # against a round trip it controls.
        assert r["packets_sent"] == 14 + r["retransmits"]
        assert r["last_stats"]["chunks"] == 7 and r["last_stats"]["redone_chunks"] == 0
        assert r["last_stats"]["results"] == 7 and r["last_stats"]["final_rto_s"] > 0


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_workers_on_either_engine_share_a_job_and_get_the_same_bits(switch: Switch, dtype: str,
                                                                    tmp_path: Path) -> None:
    """Worker processes on the compiled engine and on the Python one, in one job: all correct,
    all with the same result, bit for bit."""
    engines = ["c", "python", "c"]
    reports = run_inc_workers(switch, 3, ["--size", "700", "--dtype", dtype, "--check", "--warmup", "1",
                                          "--output", str(tmp_path / "w{w}.npy"), "--engine", "{engine}"],
                              engines=engines)
    assert all(r["correct"] for r in reports)
    results = [np.load(tmp_path / f"w{w}.npy") for w in range(3)]
    assert all(r.tobytes() == results[0].tobytes() and r.dtype == np.dtype(dtype) for r in results)


def test_ring_workers_on_either_engine_get_the_numpy_sum() -> None:
    n, port = 3, free_udp_port()
    peers = ",".join(loopback_ip(w) for w in range(n))
    reports = run_workers([
        ["--algorithm", "ring", "--peers", peers, "--port", str(port), "--job-id", "1", "--worker-id", str(w),
         "--workers", str(n), "--size", "5000", "--dtype", "float32", "--check", "--engine", engine,
         "--elements-per-packet", "100"] for w, engine in enumerate(["c", "python", "c"])])
    assert all(r["correct"] for r in reports)


def test_ring_workers_over_udp_get_the_numpy_sum() -> None:
    n, port = 3, free_udp_port()
    peers = ",".join(loopback_ip(w) for w in range(n))
    reports = run_workers([
        ["--algorithm", "ring", "--peers", peers, "--port", str(port), "--job-id", "1", "--worker-id", str(w),
         "--workers", str(n), "--size", "500", "--dtype", "float32", "--check"] for w in range(n)])
    assert all(r["correct"] for r in reports)


def test_bad_arguments_give_a_message_not_a_traceback() -> None:
    p = subprocess.run([sys.executable, "-m", "hosts.worker", "--job-id", "1", "--worker-id", "3",
                        "--workers", "2", "--size", "4"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "worker_id must be 0..1" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("args, message", [
    (["--algorithm", "ring", "--peers", "127.0.0.1,127.0.0.2", "--workers", "2", "--worker-id", "2"],
     "--worker-id must be 0..1"),
    (["--workers", "2", "--worker-id", "0", "--iterations", "0", "--check"], "--iterations must be at least 1"),
    (["--workers", "2", "--worker-id", "0", "--iterations", "0", "--output", "out.npy"],
     "--iterations must be at least 1"),
    (["--workers", "2", "--worker-id", "0", "--iterations", "-1"], "--iterations and --warmup must not be negative"),
    (["--workers", "2", "--worker-id", "0", "--warmup", "-1"], "--iterations and --warmup must not be negative"),
    (["--workers", "2", "--worker-id", "0", "--give-up-after", "0"], "--give-up-after must be positive"),
    (["--workers", "2", "--worker-id", "0", "--timeout", "-5"], "--timeout must be positive"),
    (["--workers", "2", "--worker-id", "0", "--op", "max", "--dtype", "float16"],
     "--op max takes int32, float32, not --dtype float16"),
    (["--algorithm", "ring", "--peers", "127.0.0.1,127.0.0.2", "--workers", "2", "--worker-id", "0", "--op", "min"],
     "--algorithm ring only sums"),
    (["--workers", "2", "--worker-id", "0", "--collective", "broadcast", "--check"],
     "--collective broadcast runs on inc only, without --check"),
    (["--workers", "2", "--worker-id", "0", "--collective", "reduce", "--root", "2"], "--root must be a worker 0..1"),
    (["--workers", "2", "--worker-id", "0", "--elements-per-packet", "4065"], "--elements-per-packet must be 1..4064"),
    (["--workers", "2", "--worker-id", "0", "--engine", "rust"], "argument --engine: invalid choice"),
])
def test_impossible_combinations_are_one_line_usage_errors(args: list[str], message: str, tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "hosts.worker", "--job-id", "1", "--size", "4", *args],
                       cwd=tmp_path, env={"PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("usage: ") and message in p.stderr.strip().splitlines()[-1], p.stderr
    assert not (tmp_path / "out.npy").exists()
