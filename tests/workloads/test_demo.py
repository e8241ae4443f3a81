"""`make demo-tp`'s summary: the table of backends, and the floor row (no collectives, unchecked)
with each backend's share of its tokens/s; the worker's refusals of backends its decoder lacks."""
import numpy as np
import pytest

from workloads.decoder import Generation, compare
from workloads.demo import Run, Summary, print_table
from workloads.tp_worker import main as tp_worker


def test_the_demo_table_says_what_share_of_the_floor_each_backend_reaches(capsys):
    ok = compare([1, 2], np.zeros((2, 4), np.float32), Generation([1, 2], [np.zeros(4, np.float32)] * 2))
    runs = [Run("inc", 2, [0.02, 0.02], [0.01, 0.01], ok), Run("none", 2, [0.01, 0.01], [0.0, 0.0], None)]
    summaries = [Summary.of([r]) for r in runs]
    assert summaries[1].correct is None and summaries[0].correct
    print_table(summaries)
    out = capsys.readouterr().out
    assert "not checked" in out
    assert "N=2: with no collectives the ranks make 100.0 tokens/s on these cores; of that, INC 50%" in out


@pytest.mark.parametrize("backend", ["mpi", "none"])
def test_the_torch_decoder_refuses_the_numpy_only_backends(backend, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        tp_worker(["--impl", "torch", "--backend", backend, "-o", str(tmp_path)])
    assert exit_.value.code == 2
    assert f"--backend {backend} needs --impl numpy" in capsys.readouterr().err
