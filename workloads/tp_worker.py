"""One rank of the tensor-parallel decoder, as a launcher starts it: rank and world size come
from the environment (torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT or Open MPI's
OMPI_COMM_WORLD_*), the collectives from hosts.dist (--impl numpy), or with --backend mpi Open
MPI's own MPI_Allreduce and MPI_Allgather (mpi4py; started by mpirun), the external baseline; or the
PyTorch decoder (workloads/torch_decoder.py) on torch.distributed's "p4inc" backend or gloo
(--impl torch), or with --backend none no collectives at all (the compute floor). Writes this
rank's tokens, logits slice and timings to OUT_DIR/rank<R>.npz; rank 0 prints one JSON line per generated token (progress)
and a last line with the summary.

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 python -m workloads.tp_worker --tokens 8 -o out/
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hosts import dist
from hosts.agent import IncError
from workloads.decoder import Alone, Decoder, DecoderConfig, load_shard, prompt_tokens


IMPLS = ("numpy", "torch")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The decoder's shape and seed, shared with the demo driver that computes the reference."""
    d = DecoderConfig()
    p.add_argument("--layers", type=int, default=d.layers, help=f"transformer layers (default {d.layers})")
    p.add_argument("--hidden", type=int, default=d.hidden, help=f"hidden size (default {d.hidden})")
    p.add_argument("--heads", type=int, default=d.heads, help=f"attention heads (default {d.heads})")
    p.add_argument("--ffn", type=int, default=d.ffn, help=f"MLP width (default {d.ffn})")
    p.add_argument("--vocab", type=int, default=d.vocab, help=f"vocabulary size (default {d.vocab})")
    p.add_argument("--seed", type=int, default=d.seed, help=f"weights and prompt seed (default {d.seed})")
    p.add_argument("--prompt-length", type=int, default=4, help="seeded prompt tokens fed first (default 4)")
    p.add_argument("--tokens", type=int, default=16, help="tokens to generate (default 16)")


def model_config(args: argparse.Namespace) -> DecoderConfig:
    return DecoderConfig(layers=args.layers, hidden=args.hidden, heads=args.heads, ffn=args.ffn,
                         vocab=args.vocab, seed=args.seed,
                         max_positions=max(DecoderConfig.max_positions, args.prompt_length + args.tokens))


@dataclass
class MpiStats:
    calls: int = 0


class MpiGroup:
    """The decoder's collectives as Open MPI's MPI_Allreduce and MPI_Allgather (mpi4py, TCP
    between the ranks mpirun started): the baseline nobody here wrote."""
    backend = "mpi"

    def __init__(self) -> None:
        from mpi4py import MPI      # only here: the other backends run without Open MPI
        self._sum = MPI.SUM
        self.comm = MPI.COMM_WORLD
        self.rank, self.world_size = self.comm.rank, self.comm.size
        self.stats = MpiStats()

    def all_reduce(self, array: np.ndarray) -> np.ndarray:
        array = np.ascontiguousarray(array)
        result = np.empty_like(array)
        self.comm.Allreduce(array, result, op=self._sum)
        self.stats.calls += 1
        return result

    def all_gather(self, array: np.ndarray) -> list[np.ndarray]:
        array = np.ascontiguousarray(array)
        gathered = np.empty((self.world_size, *array.shape), array.dtype)
        self.comm.Allgather(array, gathered)
        self.stats.calls += 1
        return list(gathered)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m workloads.tp_worker",
        description="One rank of the tensor-parallel decoder. Start one per worker host under a launcher "
                    "(torchrun-style RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or mpirun's OMPI_COMM_WORLD_* "
                    "plus MASTER_ADDR/MASTER_PORT); P4INC_JOB_ID, P4INC_AGGREGATOR, P4INC_INTERFACE say "
                    "where the switch is (docs/multi_machine.md).")
    add_model_arguments(p)
    p.add_argument("--impl", choices=IMPLS, default="numpy",
                   help="numpy: the numpy decoder on hosts.dist; torch: the PyTorch decoder on torch.distributed "
                        "(needs make setup TORCH=1) (default numpy)")
    p.add_argument("--backend", choices=(*dist.BACKENDS, "gloo", "mpi", "none"),
                   default=os.environ.get("P4INC_BACKEND", "auto"),
                   help="inc: the switch sums; ring: host ring; auto: the switch if it answers, else the ring; "
                        "gloo: torch's own backend (--impl torch only); mpi: Open MPI's MPI_Allreduce under "
                        "mpirun (--impl numpy only); none: no collectives, each rank computes its shard alone, "
                        "the floor free collectives would reach (its tokens are not the model's; --impl numpy only) "
                        "(default $P4INC_BACKEND or auto)")
    p.add_argument("-o", "--out-dir", type=Path, required=True, help="where rank<R>.npz is written")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.tokens < 1 or args.prompt_length < 1:
        parser.error("--tokens and --prompt-length must be at least 1")
    if args.backend == "gloo" and args.impl != "torch":
        parser.error("--backend gloo needs --impl torch")
    if args.backend in ("mpi", "none") and args.impl != "numpy":
        parser.error(f"--backend {args.backend} needs --impl numpy")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
    try:
        config = model_config(args)
        run = _TorchRun(args.backend) if args.impl == "torch" else _NumpyRun(args.backend)
        config.check_world(run.world_size)
    except (ValueError, OSError, RuntimeError, IncError) as e:      # DistError and torch's are RuntimeErrors
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        progress = (lambda i, tok, s: print(json.dumps({"token": i, "id": tok, "ms": 1e3 * s}), flush=True)) \
            if run.rank == 0 else None
        decoder = run.decoder(config)
        run.start()
        out = decoder.generate(prompt_tokens(config, args.prompt_length), args.tokens, progress)
        summary = run.summary()
    except (IncError, RuntimeError) as e:
        print(f"error: rank {run.rank}: {e}", file=sys.stderr)
        return 1
    finally:
        run.close()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    np.savez(args.out_dir / f"rank{run.rank}.npz", tokens=np.array(out.tokens),
             logits=np.array(out.logits), step_s=np.array([s.total for s in out.steps]),
             comm_s=np.array([s.comm for s in out.steps]))
    if run.rank == 0:
        print(json.dumps({"done": True, **summary}), flush=True)
    return 0


class _NumpyRun:
    """The numpy decoder on hosts.dist's default group, on Open MPI (MpiGroup), or with no
    collectives (backend "none": the ranks meet once on the host ring, then compute alone)."""

    def __init__(self, backend: str) -> None:
        self.alone = backend == "none"
        self.group = MpiGroup() if backend == "mpi" else dist.init_process_group("ring" if self.alone else backend)
        self.rank, self.world_size = self.group.rank, self.group.world_size

    def decoder(self, config: DecoderConfig) -> Decoder:
        return Decoder(load_shard(config, self.rank, self.world_size),
                       Alone(self.world_size) if self.alone else self.group)

    def start(self) -> None:
        """Backend "none" starts every rank together, so each shares the cores with all the others
        as it would with collectives; the others meet in their first collective."""
        if self.alone:
            self.group.barrier()

    def summary(self) -> dict:
        if self.alone:
            return {"backend": "none", "fallbacks": 0, "calls": 0}
        return {"backend": self.group.backend, "fallbacks": getattr(self.group.stats, "fallbacks", 0),
                "calls": self.group.stats.calls}

    def close(self) -> None:
        if not isinstance(self.group, MpiGroup):
            dist.destroy_process_group()


class _TorchRun:
    """The PyTorch decoder on torch.distributed's default group: "p4inc" (P4INC_BACKEND set to
    `backend`) or gloo. Rank and world size as hosts.dist reads them, so mpirun works too."""

    def __init__(self, backend: str) -> None:
        try:
            import torch
            import torch.distributed as tdist
            from hosts import torch_backend
        except ImportError as e:
            raise dist.DistError(f"--impl torch needs PyTorch ({e}): make setup TORCH=1") from None
        torch.set_num_threads(1)
        self.tdist, self.torch_backend = tdist, torch_backend
        if backend != "gloo":
            os.environ["P4INC_BACKEND"] = backend
        env = dist.LaunchEnv.from_environ()
        tdist.init_process_group("gloo" if backend == "gloo" else torch_backend.BACKEND,
                                 rank=env.rank, world_size=env.world_size)
        self.rank, self.world_size = env.rank, env.world_size

    def decoder(self, config: DecoderConfig):
        from workloads.torch_decoder import TorchDecoder
        return TorchDecoder(load_shard(config, self.rank, self.world_size))

    def start(self) -> None:
        """The ranks meet in their first collective."""

    def summary(self) -> dict:
        pg = self.tdist.distributed_c10d._get_default_group()
        if not isinstance(pg, self.torch_backend.P4incProcessGroup):
            return {"backend": "gloo", "fallbacks": 0, "calls": {}}
        stats = pg.p4inc.stats
        return {"backend": stats.backend, "fallbacks": stats.fallbacks, "calls": stats.calls}

    def close(self) -> None:
        self.tdist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
