"""The p4inc torch.distributed backend without root: N rank processes started with torchrun's
variables (env:// through torch's own TCPStore), a loopback stand-in for the switch
(tests/workloads/aggregator.py), each rank running tests/torch/ranks.py on p4inc and on gloo."""
from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="needs PyTorch, an optional extra: make setup TORCH=1 "
                                    "(pip install -r requirements-torch.txt)")

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as tdist

from hosts.torch_backend import BACKEND, P4incProcessGroup, copy_into, to_numpy
from tests.torch.check import assert_ddp_equal, assert_matrix, assert_no_fallback
from tests.workloads.aggregator import LoopbackAggregator
from tests.workloads.test_dist import ROOT, free_port


def run_ranks(n: int, scenario: str, out: Path, extra_env: dict[str, str] | None = None,
              aggregator: bool = True, args: tuple[str, ...] = (), timeout: float = 240) -> list[dict]:
    """`python -m tests.torch.ranks SCENARIO` on n local processes; their saved results, in rank order."""
    agg = LoopbackAggregator(job_id=1, num_workers=n) if aggregator else None
    address = agg.address if agg else ("127.0.0.1", free_port(socket.SOCK_DGRAM))
    master = str(free_port())
    procs = []
    try:
        for r in range(n):
            env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "RANK": str(r),
                   "WORLD_SIZE": str(n), "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": master,
                   "P4INC_AGGREGATOR": f"127.0.0.1:{address[1]}", "P4INC_PORT": str(free_port(socket.SOCK_DGRAM)),
                   **(extra_env or {})}
            procs.append(subprocess.Popen([sys.executable, "-m", "tests.torch.ranks", scenario, str(out), *args],
                                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        done = [(p.wait(timeout=timeout), p.stderr.read()) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
            p.stdout.close()
            p.stderr.close()
        if agg is not None:
            agg.close()
    assert [code for code, _ in done] == [0] * n, [err[-2000:] for _, err in done]
    return [torch.load(out / f"rank{r}.pt") for r in range(n)]


def test_every_collective_dtype_and_op_equals_gloos_answer_on_two_ranks(tmp_path):
    results = run_ranks(2, "matrix", tmp_path)
    assert_matrix(results, 2)
    assert_no_fallback(results)


def test_every_collective_dtype_and_op_equals_gloos_answer_on_the_ring_without_a_switch(tmp_path):
    results = run_ranks(3, "matrix", tmp_path, {"P4INC_PROBE_TIMEOUT": "0.2"}, aggregator=False)
    assert_matrix(results, 3)
    for r in results:
        assert r["stats"]["backend"] == "ring" and r["stats"]["fallbacks"] == 1


def test_a_rank_calling_with_another_size_gets_an_error_on_every_rank(tmp_path):
    results = run_ranks(2, "mismatch", tmp_path, {"P4INC_GIVE_UP_S": "3"})
    for rank, r in enumerate(results):
        assert "differs across ranks (rank 0: all_reduce of 100 float32, rank 1: all_reduce of 101 float32)" \
            in r["error"], (rank, r["error"])
        assert r["seconds"] < 30, "the error took longer than the switch's time-out and the diagnosis"


def test_ddp_on_p4inc_trains_as_on_gloo(tmp_path):
    results = run_ranks(2, "ddp", tmp_path, args=("--steps", "3"))
    assert_ddp_equal(results)
    assert_no_fallback(results)


def test_an_async_all_reduce_returns_at_once_and_completes_while_the_caller_computes(tmp_path):
    for r in run_ranks(2, "overlap", tmp_path):
        assert not r["done_at_return"] and r["returned_s"] < 0.1 * r["completed_s"], r
        assert r["products"] > 0, "the caller's thread did not run while the collective was in flight"
        assert torch.allclose(r["result"].double(), r["inputs_sum"], atol=1e-4)


def test_the_ddp_comm_hook_of_hosts_dist_trains_as_gloo_does(tmp_path):
    """hosts.dist under torch.distributed: its group rendezvous through torch's store (it used to
    bind MASTER_PORT, which torch's TCPStore holds), and DDP's buckets go through its hook."""
    results = run_ranks(2, "hook", tmp_path, args=("--steps", "3"))
    assert_ddp_equal(results)
    assert_no_fallback(results)
    assert results[0]["stats"]["calls"]["all_reduce"] >= 3


def test_unsupported_ops_are_refused_naming_them(tmp_path):
    said = [r["said"] for r in run_ranks(2, "refused", tmp_path)]
    for s in said:
        assert "ReduceOp.PRODUCT is not supported (SUM, AVG, MIN and MAX are)" in s["product"]
        assert "p4inc does not do send" in s["send"]


def test_tensors_round_trip_through_numpy_in_every_dtype_and_layout():
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.float64, torch.int64):
        t = (torch.arange(12, dtype=torch.float64) - 5.5).to(dtype).reshape(3, 4)
        view = t.t()                                      # not contiguous
        array = to_numpy(view)
        assert array.shape == (4, 3)
        assert np.array_equal(np.asarray(array, np.float64), view.double().numpy())
        target = torch.zeros(4, 3, dtype=dtype).t().contiguous().t()
        copy_into(target, array + array)
        assert torch.equal(target, view + view)


def test_the_backend_is_registered_and_a_single_rank_group_works(tmp_path, monkeypatch):
    monkeypatch.setenv("P4INC_BACKEND", "ring")
    store = tdist.HashStore()
    tdist.init_process_group(BACKEND, store=store, rank=0, world_size=1)
    try:
        pg = tdist.distributed_c10d._get_default_group()
        assert isinstance(pg, P4incProcessGroup) and pg.name() == BACKEND
        t = torch.tensor([1.5, -2.0])
        tdist.all_reduce(t)
        assert torch.equal(t, torch.tensor([1.5, -2.0])) and pg.p4inc.stats.calls == {"all_reduce": 1}
    finally:
        tdist.destroy_process_group()
