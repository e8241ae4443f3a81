"""The PyTorch tensor-parallel decoder (workloads/torch_decoder.py) without root: two ranks of
`workloads.tp_worker --impl torch` under torchrun's variables generate the numpy reference's
tokens, on p4inc through a loopback stand-in for the switch and on gloo."""
from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="needs PyTorch, an optional extra: make setup TORCH=1 "
                                    "(pip install -r requirements-torch.txt)")

import json
import socket

from tests.workloads.aggregator import LoopbackAggregator
from tests.workloads.test_dist import assert_matches_reference, free_port, run_worker_script, torchrun


def test_the_torch_decoder_on_p4inc_generates_the_reference_tokens(tmp_path):
    agg = LoopbackAggregator(job_id=1, num_workers=2)
    try:
        done = run_worker_script(2, torchrun, {"P4INC_AGGREGATOR": f"127.0.0.1:{agg.address[1]}"}, tmp_path,
                                 ("--impl", "torch", "--backend", "inc"))
    finally:
        agg.close()
    assert [d.returncode for d in done] == [0, 0], [d.stderr[-2000:] for d in done]
    summary = json.loads(done[0].stdout.splitlines()[-1])
    assert summary["backend"] == "inc" and summary["fallbacks"] == 0
    assert summary["calls"]["all_reduce"] == (2 + 5) * (2 * 2 + 1)     # 2 prompt and 5 new steps, 2 layers
    assert agg.results > 0
    assert_matches_reference(tmp_path, 2)


def test_the_torch_decoder_on_gloo_generates_the_reference_tokens(tmp_path):
    done = run_worker_script(2, torchrun, {"P4INC_AGGREGATOR": f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"},
                             tmp_path, ("--impl", "torch", "--backend", "gloo"))
    assert [d.returncode for d in done] == [0, 0], [d.stderr[-2000:] for d in done]
    assert json.loads(done[0].stdout.splitlines()[-1])["backend"] == "gloo"
    assert_matches_reference(tmp_path, 2)
