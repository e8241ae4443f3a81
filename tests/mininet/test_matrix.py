"""Issue 12, item 5: every collective x op x dtype against numpy, N = 2..8, with 5% random
loss on every host link, on a star of 8 hosts running one job of each size (the first N hosts;
one fabric, started once, instead of seven). One `python -m hosts.worker --matrix` process per
host runs the whole matrix (hosts/matrix.py) and checks its own results; `assert_matrix`
checks them again, against tests/hosts/documented.py's bound (written apart from hosts/),
and the workers' reports. test_matrix_leaf_spine.py runs it on the leaf-spine.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from hosts.matrix import REDUCING, Combination, combinations, dtype_of, matrix_inputs
from tests.mininet.conftest import IncStar, inc_fabric
from tests.mininet.test_collectives import LOSS, assert_reduced
from topologies.pieces import WorkerResult

pytestmark = [pytest.mark.mininet, pytest.mark.impairment]
SIZES = tuple(range(2, 9))
# Elements per call: with 36 calls a worker sends >= ~180 packets even at N=2, so a run has
# well over 300 and P(no drop at all, a run that proved nothing) at 5% loss is below 1e-7.
SIZE = 130
MIN_PACKETS = 300
# The workers wait for each other's retransmissions at 5% loss, so their round trips and RTO grow
# to the ceiling: at the default 2 s, each of the 36 small calls cost 2-15 s at N=8 (130 s a run).
MAX_RTO_MS = "250"


@pytest.fixture(scope="module")
def jobs_star(tmp_path_factory: pytest.TempPathFactory, switch_target: str) -> Iterator[IncStar]:
    with inc_fabric(tmp_path_factory.mktemp("matrix_star"), max(SIZES), switch_target, job_sizes=SIZES) as net:
        yield net


@pytest.mark.parametrize("n", SIZES, ids=lambda n: f"N{n}")
def test_every_collective_op_and_dtype_equals_numpy_on_a_star_under_5pct_loss(jobs_star: IncStar, n: int) -> None:
    net = replace(jobs_star, job_index=SIZES.index(n))
    assert net.n == n
    assert_matrix(net, seed=1000 + n)


def assert_matrix(net: IncStar, seed: int) -> None:
    """Run the matrix on `net`'s job with 5% loss on every host link; every worker reports every
    combination passed, and its results equal numpy's here too. Only results: they must hold
    whether a leaf-spine's leaves aggregate or forward."""
    n = net.n
    with net.impaired(LOSS):
        runs = net.run_matrix(SIZE, seed, "--max-rto", MAX_RTO_MS)
        dropped = net.fabric.impairment_counts()["drop"]
    assert dropped > 0, "no packet was lost: this run proved nothing"
    assert sum(r.report["packets_sent"] for r in runs) >= MIN_PACKETS
    combos = combinations(n)
    for run in runs:
        failed = [(c["name"], c["detail"]) for c in run.report["matrix"] if not c["passed"]]
        assert failed == [], f"worker {run.worker_id}: {failed}"
        assert [c["name"] for c in run.report["matrix"]] == [c.name for c in combos]
    for index, combo in enumerate(combos):
        inputs = matrix_inputs(combo, index, n, SIZE, seed)
        for run in runs:
            assert_result(combo, inputs, run)


def assert_result(combo: Combination, inputs: list[np.ndarray], run: WorkerResult) -> None:
    """The worker's result against numpy, independently of its own check."""
    me, results = run.worker_id, run.result
    assert isinstance(results, dict)
    if combo.overflow or combo.collective == "barrier" or (combo.collective == "reduce" and me != combo.root):
        assert combo.name not in results             # nothing returned, or overflow raised
        return
    got = results[combo.name]
    if got.dtype.kind == "V":                         # .npz keeps bfloat16 as raw 2-byte records
        got = got.view(dtype_of(combo.dtype))
    if combo.collective == "broadcast":
        assert got.dtype == inputs[combo.root].dtype and got.tobytes() == inputs[combo.root].tobytes()
    elif combo.collective == "all-gather":
        assert got.shape == (len(inputs), inputs[0].size) and got.tobytes() == np.stack(inputs).tobytes()
    else:
        assert combo.collective in REDUCING and combo.op is not None
        if combo.collective == "reduce-scatter":
            inputs = [x.reshape(len(inputs), -1)[me] for x in inputs]
        assert_reduced(got, inputs, combo.op)
