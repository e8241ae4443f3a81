"""What the torch backend's results must be, from the ranks' saved results (tests/torch/ranks.py):
p4inc's against gloo's answer on the same inputs and against the exact result, within
docs/protocol.md's bound for float sums (tests/hosts/documented.py, written apart from hosts/),
bit for bit for everything else. Shared by the loopback and the Mininet tests."""
from __future__ import annotations

import torch

from hosts.torch_backend import to_numpy
from tests.hosts.documented import documented_bound
from tests.torch.ranks import DTYPES, DTYPES_ALL, OPS, SIZE, inputs
from workloads.ddp import DDP_RTOL

PRECISION = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8, torch.float64: 53}


def assert_matrix(results: list[dict], n: int) -> None:
    """Every collective x dtype x op of every rank (the dtypes they ran), and the async and strided calls."""
    ran = [dtype for dtype in DTYPES_ALL if f"input/{str(dtype)[6:]}" in results[0]]
    assert set(DTYPES) <= set(ran), f"the ranks ran {ran}"
    for dtype in ran:
        d = str(dtype)[6:]
        xs = [r[f"input/{d}"] for r in results]
        for name in OPS:
            for rank, r in enumerate(results):
                _assert_reduced(r[f"p4inc/all_reduce/{d}/{name}"], r[f"gloo/all_reduce/{d}/{name}"], xs, name,
                                f"rank {rank} all_reduce {d} {name}")
            dst = results[n - 1]
            _assert_reduced(dst[f"p4inc/reduce/{d}/{name}"], dst[f"gloo/reduce/{d}/{name}"], xs, name,
                            f"reduce {d} {name}")
            for rank, r in enumerate(results[:-1]):       # torch leaves a non-root's tensor as it is
                assert torch.equal(r[f"p4inc/reduce/{d}/{name}"], xs[rank]), f"rank {rank} reduce {d} {name}"
        if dtype.is_floating_point:
            exact = torch.stack(xs).double().sum(0)
            bound = _sum_bound(exact, xs)
            for rank, r in enumerate(results):
                # The mean: the sum within its bound, divided by N and rounded once more.
                error = (r[f"p4inc/all_reduce/{d}/avg"].double() - exact / n).abs()
                assert torch.all(error <= bound / n + (exact / n).abs() * 2.0 ** -PRECISION[dtype] + 2.0 ** -133), \
                    f"rank {rank} all_reduce {d} avg"
        scattered = [r[f"input_scatter/{d}"] for r in results]
        for rank, r in enumerate(results):
            part = [x[rank * SIZE:(rank + 1) * SIZE] for x in scattered]
            _assert_reduced(r[f"p4inc/reduce_scatter/{d}/sum"], r[f"gloo/reduce_scatter/{d}/sum"], part, "sum",
                            f"rank {rank} reduce_scatter {d}")
            for kind in ("all_gather", "all_gather_list", "broadcast"):
                assert torch.equal(r[f"p4inc/{kind}/{d}"], r[f"gloo/{kind}/{d}"]), f"rank {rank} {kind} {d}"
            assert torch.equal(r[f"p4inc/all_gather/{d}"], torch.cat(xs))
            assert torch.equal(r[f"p4inc/broadcast/{d}"], xs[n - 1])
    strided = [inputs(rank, torch.float32, 2 * SIZE).reshape(SIZE, 2)[:, 1] for rank in range(n)]
    asyncs = [r["p4inc/async_inputs"] for r in results]
    for rank, r in enumerate(results):
        _assert_reduced(r["p4inc/all_reduce/strided"], None, strided, "sum", f"rank {rank} strided")
        for i in range(4):
            _assert_reduced(r["p4inc/async"][i], None, [a[i] for a in asyncs], "sum", f"rank {rank} async {i}")


def _assert_reduced(got: torch.Tensor, gloo: torch.Tensor | None, inputs: list[torch.Tensor], op: str,
                    what: str) -> None:
    """`got` against the exact reduction of `inputs` and against gloo's answer: equal for min,
    max and integers; for float sums within the switch's bound (float16/bfloat16/float32) or N
    roundings of the dtype (float64, summed on the hosts), gloo's within N roundings."""
    assert got.dtype == inputs[0].dtype and got.shape == inputs[0].shape, what
    stacked = torch.stack(inputs)
    if op != "sum" or not got.is_floating_point():
        exact = stacked.min(0).values if op == "min" else stacked.max(0).values if op == "max" else stacked.sum(0)
        assert torch.equal(got, exact.to(got.dtype)), what
        if gloo is not None:
            assert torch.equal(got, gloo), f"{what}: p4inc and gloo differ"
        return
    exact = stacked.double().sum(0)
    host_bound = _host_bound(inputs)
    bound = _sum_bound(exact, inputs)
    error = (got.double() - exact).abs()
    assert torch.all(error <= bound), f"{what}: off the exact sum by {error.max():.3g} (bound {bound.max():.3g})"
    if gloo is not None:
        apart = (got.double() - gloo.double()).abs()
        assert torch.all(apart <= bound + host_bound), f"{what}: {apart.max():.3g} from gloo's"


def _host_bound(inputs: list[torch.Tensor]) -> torch.Tensor:
    """A sum added on hosts in the dtype: N roundings of the sum of magnitudes at most."""
    magnitude = torch.stack(inputs).double().abs().sum(0)
    return len(inputs) * 2.0 ** -PRECISION[inputs[0].dtype] * magnitude + 2.0 ** -133


def _sum_bound(exact: torch.Tensor, inputs: list[torch.Tensor]) -> torch.Tensor:
    """How far p4inc's sum may be from `exact`: the switch's bound, or the hosts' for float64."""
    if inputs[0].dtype == torch.float64:
        return _host_bound(inputs)
    return torch.from_numpy(documented_bound([to_numpy(x) for x in inputs]).reshape(exact.shape))


def assert_no_fallback(results: list[dict]) -> None:
    for rank, r in enumerate(results):
        assert r["stats"]["backend"] == "inc" and r["stats"]["fallbacks"] == 0, (rank, r["stats"])




def assert_ddp_equal(results: list[dict]) -> None:
    first = results[0]["p4inc/params"]
    for rank, r in enumerate(results):
        assert torch.equal(r["p4inc/params"], first), f"rank {rank}'s replica differs from rank 0's"
        gloo = r["gloo/params"]
        scale = float(gloo.abs().max())
        apart = float((r["p4inc/params"] - gloo).abs().max())
        assert apart <= DDP_RTOL * scale, f"rank {rank}: parameters {apart:.3g} from gloo's (scale {scale:.3g})"
        moved = float((gloo - r["initial"]).abs().max())
        assert moved > 100 * DDP_RTOL * scale, f"training moved the parameters by only {moved:.3g}"
