"""hosts.dist, the torch.distributed-shaped facade, without root: ranks as threads (or as
processes started with launcher variables) over loopback UDP, with a stand-in aggregator
for the switch, and without one (the fall-back to the ring)."""
from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from hosts import dist
from hosts.dist import DistError, LaunchEnv, Options, ReduceOp
from hosts.engine import DEFAULT_SPIN, DEFAULT_SPIN_LARGE, unavailable
from hosts.inc import INC_K
from tests.workloads.aggregator import LoopbackAggregator
from workloads.decoder import DecoderConfig, compare, prompt_tokens, reference_generate

ROOT = Path(__file__).resolve().parents[2]
SMALL_FLAGS = ["--layers", "2", "--hidden", "256", "--heads", "8", "--ffn", "512", "--vocab", "512", "--seed", "3",
               "--prompt-length", "3", "--tokens", "5"]
SMALL = DecoderConfig(layers=2, hidden=256, heads=8, ffn=512, vocab=512, seed=3)


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def on_every_rank(n: int, options: Options, body, backend: str = "auto") -> list:
    """body(group) on n ranks in threads, each with its own group from a rendezvous on loopback."""
    master = free_port()
    inc_ports = [free_port(socket.SOCK_DGRAM) for _ in range(n)]

    def rank(r: int):
        env = LaunchEnv(rank=r, world_size=n, local_rank=0, master_addr="127.0.0.1", master_port=master)
        group = dist.new_group(backend, env, Options(**{**options.__dict__, "inc_port": inc_ports[r]}))
        try:
            return group, body(group)
        finally:
            group.close()

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(rank, range(n)))


@pytest.fixture
def aggregator():
    agg = LoopbackAggregator(job_id=1, num_workers=3)
    try:
        yield agg
    finally:
        agg.close()


@pytest.mark.parametrize("backend", ["auto", "inc"])
def test_collectives_over_the_switch_equal_numpy(aggregator, backend):
    """Both run the switch's own collectives (broadcast, all_gather and barrier send JOINs)."""
    rng = np.random.default_rng(5)
    floats = [rng.standard_normal(100).astype(np.float32) for _ in range(3)]
    ints = [rng.integers(-1000, 1000, 70, dtype=np.int32) for _ in range(3)]
    doubles = [rng.standard_normal((2, 5)) for _ in range(3)]

    def body(g: dist.ProcessGroup):
        return {"sum": g.all_reduce(floats[g.rank]), "avg": g.all_reduce(floats[g.rank], ReduceOp.AVG),
                "ints": g.all_reduce(ints[g.rank]), "gather": g.all_gather(doubles[g.rank]),
                "bcast": g.broadcast(doubles[g.rank], src=1), "scatter": g.reduce_scatter(ints[g.rank][:69]),
                "barrier": g.barrier()}

    results = on_every_rank(3, Options(aggregator=aggregator.address, timeout=0.05), body, backend)
    exact_ints = np.sum(ints, axis=0)
    for group, got in results:
        assert group.backend == "inc" and group.stats.fallbacks == 0
        np.testing.assert_allclose(got["sum"], np.sum(np.array(floats, np.float64), axis=0), atol=1e-5)
        np.testing.assert_allclose(got["avg"], np.mean(np.array(floats, np.float64), axis=0), atol=1e-5)
        np.testing.assert_array_equal(got["ints"], exact_ints)
        for mine, theirs in zip(got["gather"], doubles):          # float64, bit for bit
            assert mine.dtype == np.float64 and np.array_equal(mine, theirs)
        assert np.array_equal(got["bcast"], doubles[1])
        part = 69 // 3
        np.testing.assert_array_equal(got["scatter"], exact_ints[group.rank * part:(group.rank + 1) * part])
        assert group.stats.calls == {"all_reduce": 3, "all_gather": 1, "broadcast": 1, "reduce_scatter": 1,
                                     "barrier": 1}
    assert aggregator.results > 0
    assert aggregator.joins > 0


def test_auto_falls_back_to_the_ring_when_no_switch_answers(caplog):
    nobody = ("127.0.0.1", free_port(socket.SOCK_DGRAM))
    x = [np.arange(40, dtype=np.float32) * (r + 1) for r in range(2)]
    results = on_every_rank(2, Options(aggregator=nobody, probe_timeout=0.2), lambda g: g.all_reduce(x[g.rank]))
    for group, got in results:
        assert group.backend == "ring" and group.stats.fallbacks == 1
        np.testing.assert_array_equal(got, x[0] + x[1])
    assert "falling back to the host ring" in caplog.text


def test_backend_inc_without_a_switch_is_an_error():
    nobody = ("127.0.0.1", free_port(socket.SOCK_DGRAM))
    with pytest.raises(DistError, match="did not answer"):
        on_every_rank(2, Options(aggregator=nobody, give_up_after=0.3), lambda g: None, backend="inc")


def test_rank_and_world_size_come_from_torchrun_or_open_mpi_variables():
    torchrun = LaunchEnv.from_environ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                                       "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"})
    assert torchrun == LaunchEnv(3, 4, 1, "10.0.0.1", 29500)
    mpi = LaunchEnv.from_environ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "8",
                                  "OMPI_COMM_WORLD_LOCAL_RANK": "0", "MASTER_ADDR": "h1", "MASTER_PORT": "1"})
    assert (mpi.rank, mpi.world_size, mpi.local_rank) == (2, 8, 0)
    under_torchrun = LaunchEnv.from_environ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h1",
                                             "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"})
    assert under_torchrun.master_port == 29501            # torchrun's own store holds MASTER_PORT
    with pytest.raises(DistError, match="RANK or OMPI_COMM_WORLD_RANK is not set"):
        LaunchEnv.from_environ({"WORLD_SIZE": "2", "MASTER_ADDR": "x", "MASTER_PORT": "1"})
    with pytest.raises(DistError, match="rank 5 is not in 0..3"):
        LaunchEnv.from_environ({"RANK": "5", "WORLD_SIZE": "4", "MASTER_ADDR": "x", "MASTER_PORT": "1"})


def test_elements_per_packet_and_engine_come_from_p4inc_variables():
    options = Options.from_environ({"P4INC_ELEMENTS_PER_PACKET": "7", "P4INC_ENGINE": "python"})
    assert (options.elements_per_packet, options.engine) == (7, "python")
    assert (Options.from_environ({}).elements_per_packet, Options.from_environ({}).engine) == (INC_K, "c")
    for env, message in (({"P4INC_ELEMENTS_PER_PACKET": "0"}, "P4INC_ELEMENTS_PER_PACKET: elements per packet"),
                         ({"P4INC_ELEMENTS_PER_PACKET": "x"}, "malformed"),
                         ({"P4INC_ENGINE": "fortran"}, "P4INC_ENGINE must be one of c, python")):
        with pytest.raises(DistError, match=message):
            Options.from_environ(env)



def test_the_spin_follows_the_ranks_that_share_the_machines_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    def spins(env):
        options = Options.from_environ(env)
        return options.spin, options.spin_large

    assert spins({}) == (DEFAULT_SPIN, DEFAULT_SPIN_LARGE)                     # one rank here: its own core
    assert spins({"LOCAL_WORLD_SIZE": "2"}) == (DEFAULT_SPIN, DEFAULT_SPIN_LARGE)
    assert spins({"LOCAL_WORLD_SIZE": "4"}) == (DEFAULT_SPIN, 0.0)             # torchrun's: small calls poll
    assert spins({"LOCAL_WORLD_SIZE": "5"}) == (0.0, 0.0)
    assert spins({"OMPI_COMM_WORLD_LOCAL_SIZE": "8"}) == (0.0, 0.0)            # mpirun's
    assert spins({"LOCAL_WORLD_SIZE": "8", "P4INC_SPIN_US": "250", "P4INC_SPIN_LARGE_US": "50"}) == (
        pytest.approx(250e-6), pytest.approx(50e-6))
    for name in ("P4INC_SPIN_US", "P4INC_SPIN_LARGE_US"):
        for bad in ("-1", "1e6", "x"):
            with pytest.raises(DistError, match=f"{name}|malformed"):
                Options.from_environ({name: bad})

@pytest.mark.parametrize("engine", ["c", "python"])
@pytest.mark.parametrize("backend", ["inc", "ring"])
def test_a_job_of_seven_elements_per_packet_sums_on_either_engine(backend, engine):
    """The job's K reaches the workers: the stand-in switch reads 7 elements a packet and
    answers one result per 7; the engine asked for is the one the calls run on."""
    rng = np.random.default_rng(7)
    ints = [rng.integers(-1000, 1000, 100, dtype=np.int32) for _ in range(3)]
    agg = LoopbackAggregator(job_id=1, num_workers=3, k=7)
    try:
        options = Options(aggregator=agg.address, timeout=0.05, elements_per_packet=7, engine=engine)
        results = on_every_rank(3, options, lambda g: (g.engine, g.all_reduce(ints[g.rank])), backend)
    finally:
        agg.close()
    expected_engine = "python" if engine == "python" or unavailable() is not None else "c"
    for group, (used, summed) in results:
        assert group.backend == backend and used == expected_engine
        np.testing.assert_array_equal(summed, np.sum(ints, axis=0))
    # inc: the probe's one packet, then 100 elements in 15 packets of 7; the ring never asks the switch
    assert agg.results == (1 + 15 if backend == "inc" else 0)


def test_the_torch_shaped_functions_work_in_place_on_the_default_group(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("P4INC_AGGREGATOR", f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}")
    monkeypatch.setenv("P4INC_PORT", str(free_port(socket.SOCK_DGRAM)))
    monkeypatch.setenv("P4INC_PROBE_TIMEOUT", "0.1")
    with pytest.raises(DistError, match="init_process_group"):
        dist.get_rank()
    dist.init_process_group()
    try:
        assert (dist.get_rank(), dist.get_world_size(), dist.is_initialized()) == (0, 1, True)
        x = np.array([1.5, -2.0], np.float32)
        dist.all_reduce(x)
        np.testing.assert_array_equal(x, [1.5, -2.0])
        out = [np.zeros(3, np.int64)]
        dist.all_gather(out, np.array([7, 8, 9]))
        np.testing.assert_array_equal(out[0], [7, 8, 9])
        dist.barrier()
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def run_worker_script(n: int, launcher_env, extra_env: dict[str, str], out_dir: Path,
                      worker_args: tuple[str, ...] = ()) -> list[subprocess.CompletedProcess]:
    master = str(free_port())
    procs = []
    for r in range(n):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               **launcher_env(r, n), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": master,
               "P4INC_PORT": str(free_port(socket.SOCK_DGRAM)), **extra_env}
        procs.append(subprocess.Popen([sys.executable, "-m", "workloads.tp_worker", *SMALL_FLAGS, *worker_args,
                                       "-o", str(out_dir)],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        return [subprocess.CompletedProcess(p.args, p.wait(timeout=120), p.stdout.read(), p.stderr.read())
                for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def assert_matches_reference(out_dir: Path, n: int) -> None:
    reference = reference_generate(SMALL, prompt_tokens(SMALL, 3), 5)
    shards = [np.load(out_dir / f"rank{r}.npz") for r in range(n)]
    logits = np.concatenate([s["logits"] for s in shards], axis=1)
    result = compare(shards[0]["tokens"].tolist(), logits, reference)
    assert result.ok, result


def torchrun(rank: int, n: int) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": "0"}


def open_mpi(rank: int, n: int) -> dict[str, str]:
    return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(n), "OMPI_COMM_WORLD_LOCAL_RANK": "0"}


def test_worker_script_under_torchrun_variables_falls_back_to_the_ring(tmp_path):
    nobody = f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"
    done = run_worker_script(2, torchrun, {"P4INC_AGGREGATOR": nobody, "P4INC_PROBE_TIMEOUT": "0.2"}, tmp_path)
    assert [d.returncode for d in done] == [0, 0], [d.stderr for d in done]
    summary = json.loads(done[0].stdout.splitlines()[-1])
    assert summary["backend"] == "ring" and summary["fallbacks"] == 1
    assert len(done[0].stdout.splitlines()) == 5 + 1           # a progress line per token, then the summary
    assert_matches_reference(tmp_path, 2)


def test_worker_script_under_open_mpi_variables_uses_the_switch(tmp_path):
    agg = LoopbackAggregator(job_id=1, num_workers=2)
    try:
        done = run_worker_script(2, open_mpi, {"P4INC_AGGREGATOR": f"127.0.0.1:{agg.address[1]}"}, tmp_path)
    finally:
        agg.close()
    assert [d.returncode for d in done] == [0, 0], [d.stderr for d in done]
    assert json.loads(done[0].stdout.splitlines()[-1])["backend"] == "inc"
    assert_matches_reference(tmp_path, 2)


def test_the_ddp_hook_without_torch_says_it_needs_torch():
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed: the hook is available")
    with pytest.raises(DistError, match="needs PyTorch"):
        dist.ddp_comm_hook(None)


@pytest.mark.parametrize("backend", ["inc", "ring"])
def test_every_group_method_equals_numpy_on_three_ranks(aggregator, backend):
    """Issue 25: each method at N >= 2 on both backends, every op, results compared exactly
    (int32) or within the switch's float bound."""
    rng = np.random.default_rng(8)
    ints = [rng.integers(-1000, 1000, 66, dtype=np.int32) for _ in range(3)]
    floats = [rng.standard_normal(66).astype(np.float32) for _ in range(3)]

    def body(g: dist.ProcessGroup):
        got = {op.value: g.all_reduce(ints[g.rank], op) for op in (ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX)}
        got["avg"] = g.all_reduce(floats[g.rank], ReduceOp.AVG)
        got.update({f"reduce_{op.value}": g.reduce(ints[g.rank], 2, op) for op in (ReduceOp.SUM, ReduceOp.MAX)})
        got.update({f"scatter_{op.value}": g.reduce_scatter(ints[g.rank], op) for op in (ReduceOp.SUM, ReduceOp.MIN)})
        got["gather"] = g.all_gather(floats[g.rank])
        got["bcast"] = g.broadcast(ints[g.rank], src=2)
        g.barrier()
        return got

    results = on_every_rank(3, Options(aggregator=aggregator.address, timeout=0.05), body, backend)
    exact = {"sum": np.sum(ints, axis=0), "min": np.min(ints, axis=0), "max": np.max(ints, axis=0)}
    for group, got in results:
        assert group.backend == backend
        r = group.rank
        for op in exact:
            np.testing.assert_array_equal(got[op], exact[op])
        np.testing.assert_allclose(got["avg"], np.mean(np.array(floats, np.float64), axis=0), atol=1e-6)
        if r == 2:
            np.testing.assert_array_equal(got["reduce_sum"], exact["sum"])
            np.testing.assert_array_equal(got["reduce_max"], exact["max"])
        else:
            assert got["reduce_sum"] is None and got["reduce_max"] is None
        np.testing.assert_array_equal(got["scatter_sum"], exact["sum"][22 * r:22 * (r + 1)])
        np.testing.assert_array_equal(got["scatter_min"], exact["min"][22 * r:22 * (r + 1)])
        assert all(np.array_equal(mine, theirs) for mine, theirs in zip(got["gather"], floats))
        np.testing.assert_array_equal(got["bcast"], ints[2])


def run_dist_ranks(n: int, extra_env: dict[str, str], out_dir: Path) -> list[dict]:
    """`python -m tests.workloads.dist_ranks` on n processes with torchrun's variables."""
    master = str(free_port())
    procs = []
    try:
        for r in range(n):
            env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **torchrun(r, n),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": master, "P4INC_PORT": str(free_port(socket.SOCK_DGRAM)),
                   **extra_env}
            procs.append(subprocess.Popen([sys.executable, "-m", "tests.workloads.dist_ranks", str(out_dir)], cwd=ROOT,
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        done = [(p.wait(timeout=180), p.stderr.read()) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
            p.stdout.close()
            p.stderr.close()
    assert [code for code, _ in done] == [0] * n, [err[-1500:] for _, err in done]
    return [dict(np.load(out_dir / f"rank{r}.npz")) for r in range(n)]


@pytest.mark.parametrize("switch", [True, False], ids=["switch", "ring"])
def test_the_module_level_functions_work_in_place_on_three_ranks(switch, tmp_path):
    """Issue 25: every module-level function at N = 3, whose results differ from every rank's
    input, so a function that writes nothing back fails."""
    from tests.workloads.dist_ranks import SIZE, floats, inputs
    agg = LoopbackAggregator(job_id=1, num_workers=3) if switch else None
    address = f"127.0.0.1:{agg.address[1] if agg else free_port(socket.SOCK_DGRAM)}"
    try:
        results = run_dist_ranks(3, {"P4INC_AGGREGATOR": address, "P4INC_PROBE_TIMEOUT": "0.3"}, tmp_path)
    finally:
        if agg is not None:
            agg.close()
    ints = [inputs(r) for r in range(3)]
    exact = {"sum": np.sum(ints, axis=0), "min": np.min(ints, axis=0), "max": np.max(ints, axis=0)}
    float_sum = np.sum([floats(r).astype(np.float64) for r in range(3)], axis=0)
    for r, got in enumerate(results):
        assert got["backend"] == ("inc" if switch else "ring")
        assert got["world"].tolist() == [3, 1] and got["destroyed"]
        for op in exact:
            np.testing.assert_array_equal(got[f"all_reduce_{op}"], exact[op])
        np.testing.assert_allclose(got["all_reduce_avg"], float_sum / 3, atol=1e-6)
        np.testing.assert_array_equal(got["all_gather"], np.stack(ints))
        np.testing.assert_array_equal(got["reduce_scatter"], exact["sum"][r * SIZE // 3:(r + 1) * SIZE // 3])
        np.testing.assert_array_equal(got["reduce"], exact["sum"] if r == 2 else ints[r])
        np.testing.assert_array_equal(got["broadcast"], inputs(1, salt=1))
        assert "in place needs a writable numpy array or a torch tensor, not list" in str(got["refused"])
        if importlib.util.find_spec("torch") is not None:
            np.testing.assert_allclose(got["torch_all_reduce"], float_sum, atol=1e-5)
            np.testing.assert_array_equal(got["torch_broadcast"], inputs(1, salt=1))
