"""Data-parallel training with PyTorch's DistributedDataParallel on a torch.distributed group:
a small MLP of a chosen width trained with SGD on seeded data, the same on any backend, so the
"p4inc" group's parameters and step times can be set against gloo's (tests/torch/ranks.py, and
`python -m workloads.ddp_demo` on a Mininet star).
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as tdist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


# p4inc's parameters after a few steps against gloo's, relative to the largest parameter: float32
# gradients travel as block floating point (about 2^-20 of each 32-element block's largest value
# at N=8, docs/protocol.md) where gloo rounds N-1 times; measured ~1e-7 after 3-6 steps, while
# a lost or doubled contribution moves them by the learning rate times a gradient (~1e-2).
DDP_RTOL = 1e-5


class SmallNet(nn.Module):
    """Three linear layers: 2 w^2 + 82 w + 8 float32 parameters (w = 64: 13 k, 53 KiB of
    gradients; w = 690: 1.0 M, 3.9 MiB)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(64, width), nn.Tanh(), nn.Linear(width, 2 * width), nn.Tanh(),
                                    nn.Linear(2 * width, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


@dataclass
class Training:
    initial: torch.Tensor      # every parameter, flattened, before the first step
    params: torch.Tensor       # ... after the last
    step_s: list[float]        # seconds per step: forward, backward (DDP's reductions), optimiser


def train(group: tdist.ProcessGroup | None, rank: int, steps: int, width: int, bucket_mb: float = 1.0,
          hook: Callable[[Any, Any], torch.futures.Future] | None = None) -> Training:
    """`steps` SGD steps of SmallNet(width) under DDP on `group` (its gradients reduced by
    `hook` if given: hosts.dist.ddp_comm_hook); the same seeds on every run."""
    torch.manual_seed(0)
    net = SmallNet(width)
    initial = torch.cat([p.detach().ravel() for p in net.parameters()])
    model = DistributedDataParallel(net, process_group=group, bucket_cap_mb=bucket_mb)
    if hook is not None:
        model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(rank)
    times = []
    for _ in range(steps):
        x = torch.randn(32, 64, generator=data)
        y = torch.randn(32, 8, generator=data)
        start = time.perf_counter()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return Training(initial, torch.cat([p.detach().ravel() for p in model.parameters()]), times)


def main(argv: list[str] | None = None) -> int:
    """One rank, as a launcher starts it: train on `--backend`, save params and step times."""
    p = argparse.ArgumentParser(prog="python -m workloads.ddp",
                                description="One rank of DDP training on torch.distributed's p4inc backend or gloo "
                                            "(rank and world size from torchrun's variables); writes OUT/rank<R>.pt.")
    p.add_argument("--backend", choices=("p4inc", "gloo"), default="p4inc", help="default: %(default)s")
    p.add_argument("--steps", type=int, default=6, help="training steps (default 6)")
    p.add_argument("--width", type=int, default=690, help="the model's width (default 690: 3.9 MiB of gradients)")
    p.add_argument("-o", "--out-dir", type=Path, required=True, help="where rank<R>.pt goes")
    args = p.parse_args(argv)
    if args.steps < 1 or args.width < 1:
        p.error("--steps and --width must be at least 1")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
    torch.set_num_threads(1)
    from hosts import torch_backend      # registers "p4inc"
    try:
        tdist.init_process_group(torch_backend.BACKEND if args.backend == "p4inc" else "gloo")
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        run = train(None, tdist.get_rank(), args.steps, args.width)
        rank = tdist.get_rank()
    except RuntimeError as e:
        print(f"error: rank {tdist.get_rank()}: {e}", file=sys.stderr)
        return 1
    finally:
        tdist.destroy_process_group()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"initial": run.initial, "params": run.params, "step_s": torch.tensor(run.step_s)},
               args.out_dir / f"rank{rank}.pt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
