"""A short tensor-parallel decoding in a Mininet star of 2 hosts on p4sim: the launcher-style
workers generate the single-process reference's tokens, with INC, with the host ring and with
Open MPI's MPI_Allreduce (mpirun) through the same switch; the PyTorch decoder (where torch is
installed) with p4inc and with gloo."""
import importlib.util

import pytest

from bench.mpi import mpi_missing
from topologies.pieces import job_elements_per_packet
from workloads.decoder import prompt_tokens, reference_generate
from workloads.demo import run_decoder
from workloads.tp_worker import build_parser, model_config

pytestmark = pytest.mark.mininet
FLAGS = ["--layers", "4", "--hidden", "1024", "--prompt-length", "2", "--tokens", "3"]


NO_TORCH = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                              reason="needs PyTorch, an optional extra: make setup TORCH=1")


@pytest.mark.parametrize("inc_star", [2], indirect=True, ids=lambda n: f"N{n}")
@pytest.mark.parametrize("impl, backend", [("numpy", "inc"), ("numpy", "ring"), ("numpy", "mpi"),
                                           pytest.param("torch", "inc", marks=NO_TORCH),
                                           pytest.param("torch", "gloo", marks=NO_TORCH)])
def test_decoder_on_two_hosts_generates_the_reference_tokens(inc_star, impl, backend, tmp_path):
    if backend == "mpi" and (why := mpi_missing()):
        pytest.skip(why)
    config = model_config(build_parser().parse_args([*FLAGS, "-o", str(tmp_path)]))
    reference = reference_generate(config, prompt_tokens(config, 2), 3)
    before = inc_star.counters()["MyIngress.contributions"]
    # No progress bar: tqdm starts its monitor thread even for a disabled one.
    run = run_decoder(inc_star.fabric, backend, [*FLAGS, "--impl", impl], tmp_path, None, reference, timeout_s=300)
    assert run.backend == backend and len(run.step_s) == 3
    assert run.comparison.tokens_equal and run.comparison.ok, run.comparison
    added = inc_star.counters()["MyIngress.contributions"] - before
    # Each of the 4 steps (1 prompt, 3 new) AllReduces 2 * layers + 1 vectors of hidden / K packets per worker.
    k = job_elements_per_packet(inc_star.fabric.options.topology_path, inc_star.job.job_id)
    steps, per_step = 4, (2 * config.layers + 1) * config.hidden // k * inc_star.n
    assert added >= steps * per_step if backend == "inc" else added == 0


@pytest.mark.parametrize("inc_star", [2], indirect=True, ids=lambda n: f"N{n}")
def test_the_floor_row_computes_on_every_rank_without_the_switch(inc_star, tmp_path):
    config = model_config(build_parser().parse_args([*FLAGS, "-o", str(tmp_path)]))
    reference = reference_generate(config, prompt_tokens(config, 2), 3)
    before = inc_star.counters()["MyIngress.contributions"]
    run = run_decoder(inc_star.fabric, "none", [*FLAGS, "--impl", "numpy"], tmp_path, None, reference, timeout_s=300)
    assert run.backend == "none" and len(run.step_s) == 3 and run.comparison is None
    assert all(0 <= comm < step for comm, step in zip(run.comm_s, run.step_s))
    assert inc_star.counters()["MyIngress.contributions"] == before
