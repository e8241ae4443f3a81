"""One rank of the hosts.dist module-level tests, started with torchrun's variables: every
module-level function on the default group, in place as torch's are, on numpy arrays (and torch
tensors where torch is installed); saves what each left in its arguments to OUT/rank<R>.npz.

    RANK=0 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python -m tests.workloads.dist_ranks out/
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

from hosts import dist

SIZE = 90         # elements, divisible by 2, 3 and 6


def inputs(rank: int, salt: int = 0) -> np.ndarray:
    """Rank `rank`'s seeded int32 input: sums are exact, so results compare with ==."""
    return np.random.default_rng([rank, salt]).integers(-1000, 1000, SIZE, dtype=np.int32)


def floats(rank: int) -> np.ndarray:
    return np.random.default_rng([rank, 99]).standard_normal(SIZE).astype(np.float32)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.workloads.dist_ranks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="folder for rank<R>.npz")
    args = p.parse_args(argv)
    dist.init_process_group()
    rank, n = dist.get_rank(), dist.get_world_size()
    out: dict[str, np.ndarray] = {"world": np.array([n, int(dist.is_initialized())])}
    try:
        for op in dist.ReduceOp:
            x = floats(rank) if op is dist.ReduceOp.AVG else inputs(rank)
            returned = dist.all_reduce(x, op)
            assert returned is x, "all_reduce returns its argument"
            out[f"all_reduce_{op.value}"] = x
        gathered = [np.zeros(SIZE, np.int32) for _ in range(n)]
        dist.all_gather(gathered, inputs(rank))
        out["all_gather"] = np.stack(gathered)
        part = np.zeros(SIZE // n, np.int32)
        dist.reduce_scatter(part, list(inputs(rank).reshape(n, -1)))
        out["reduce_scatter"] = part
        x = inputs(rank)
        assert dist.reduce(x, n - 1) is x
        out["reduce"] = x
        x = inputs(rank, salt=1)
        assert dist.broadcast(x, 1) is x
        out["broadcast"] = x
        dist.barrier()
        if importlib.util.find_spec("torch") is not None:
            import torch
            t = torch.from_numpy(floats(rank))
            dist.all_reduce(t)
            out["torch_all_reduce"] = t.numpy()
            t = torch.from_numpy(inputs(rank, salt=1)).reshape(2, -1).t()      # not contiguous
            dist.broadcast(t, 1)
            out["torch_broadcast"] = t.t().contiguous().numpy().ravel()
        try:
            dist.all_reduce(inputs(rank).tolist())
        except TypeError as e:
            out["refused"] = np.array(str(e))
        stats = dist._default().stats
        out["backend"] = np.array(stats.backend)
    finally:
        dist.destroy_process_group()
    out["destroyed"] = np.array(not dist.is_initialized())
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez(args.out / f"rank{rank}.npz", **out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
