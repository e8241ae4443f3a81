"""One rank of the torch backend's tests, started as a launcher starts it (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT; P4INC_* say where the switch is): it sets up the p4inc default group
and a gloo group beside it, runs a scenario on both and saves what each returned, with its
inputs, to OUT/rank<R>.pt; the test compares them. Scenarios:

- matrix: every collective x dtype x op, blocking and async, on p4inc and on gloo;
- mismatch: rank 1 calls all_reduce with one element more; every rank saves the error it got;
- ddp: STEPS steps of DistributedDataParallel on a small model, on p4inc and on gloo;
- refused: PRODUCT and send, which p4inc refuses, and what it said;
- hook: DDP on gloo with hosts.dist.ddp_comm_hook, against DDP on gloo alone;
- overlap: an async all_reduce while this thread computes: when it returned, when it completed.

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python -m tests.torch.ranks matrix out/
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as tdist

import hosts.torch_backend  # noqa: F401  (registers "p4inc")
from hosts.torch_backend import P4incProcessGroup
from workloads.ddp import train

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int32)
HOST_DTYPES = (torch.float64, torch.int64)            # done on the hosts' path
DTYPES_ALL = DTYPES + HOST_DTYPES
OPS = {"sum": tdist.ReduceOp.SUM, "min": tdist.ReduceOp.MIN, "max": tdist.ReduceOp.MAX}
SIZE = 100                  # elements: 4 packets and a partial one


def inputs(rank: int, dtype: torch.dtype, size: int = SIZE, salt: int = 0) -> torch.Tensor:
    """Rank `rank`'s seeded input: integers in a range every dtype holds exactly, or normals."""
    g = torch.Generator().manual_seed(1000 * rank + 17 * salt + DTYPES_ALL.index(dtype))
    if dtype.is_floating_point:
        return (torch.randn(size, generator=g, dtype=torch.float64) * 4).to(dtype)
    return torch.randint(-2**20, 2**20, (size,), generator=g, dtype=dtype)


def matrix(rank: int, n: int, p4inc: tdist.ProcessGroup, gloo: tdist.ProcessGroup,
           dtypes: tuple[torch.dtype, ...] = DTYPES_ALL) -> dict:
    """Each collective's result on both groups, keyed "collective/dtype[/op]"; async ones too."""
    out: dict = {}
    for dtype in dtypes:
        d = str(dtype)[6:]
        x = inputs(rank, dtype)
        out[f"input/{d}"] = x
        for name, op in OPS.items():
            for label, group in (("p4inc", p4inc), ("gloo", gloo)):
                t = x.clone()
                tdist.all_reduce(t, op, group=group)
                out[f"{label}/all_reduce/{d}/{name}"] = t
                t = x.clone()
                tdist.reduce(t, dst=n - 1, op=op, group=group)
                out[f"{label}/reduce/{d}/{name}"] = t
        if dtype.is_floating_point:
            t = x.clone()
            tdist.all_reduce(t, tdist.ReduceOp.AVG, group=p4inc)
            out[f"p4inc/all_reduce/{d}/avg"] = t
        for label, group in (("p4inc", p4inc), ("gloo", gloo)):
            big = inputs(rank, dtype, SIZE * n, salt=1)
            part = torch.empty(SIZE, dtype=dtype)
            tdist.reduce_scatter_tensor(part, big, group=group)
            out[f"{label}/reduce_scatter/{d}/sum"] = part
            gathered = torch.empty(n * SIZE, dtype=dtype)
            tdist.all_gather_into_tensor(gathered, x, group=group)
            out[f"{label}/all_gather/{d}"] = gathered
            listed = [torch.empty(SIZE, dtype=dtype) for _ in range(n)]
            tdist.all_gather(listed, x, group=group)
            out[f"{label}/all_gather_list/{d}"] = torch.cat(listed)
            t = x.clone()
            tdist.broadcast(t, src=n - 1, group=group)
            out[f"{label}/broadcast/{d}"] = t
        out[f"input_scatter/{d}"] = inputs(rank, dtype, SIZE * n, salt=1)
    # Non-contiguous: every other element of a matrix's column, in place.
    strided = inputs(rank, torch.float32, 2 * SIZE).reshape(SIZE, 2)[:, 1]
    tdist.all_reduce(strided, group=p4inc)
    out["p4inc/all_reduce/strided"] = strided
    # Async: several calls in flight at once, completed in order through their futures.
    pending = []
    for i in range(4):
        t = inputs(rank, torch.float32, salt=10 + i)
        pending.append((t, tdist.all_reduce(t, async_op=True, group=p4inc)))
    futures = [work.get_future() for _, work in pending]
    torch.futures.wait_all(futures)
    out["p4inc/async"] = torch.stack([f.value()[0] for f in futures])
    out["p4inc/async_inputs"] = torch.stack([inputs(rank, torch.float32, salt=10 + i) for i in range(4)])
    tdist.barrier(group=p4inc)
    return out


def mismatch(rank: int, n: int, p4inc: tdist.ProcessGroup, gloo: tdist.ProcessGroup) -> dict:
    t = torch.ones(SIZE + (rank == 1), dtype=torch.float32)
    started = time.monotonic()
    try:
        tdist.all_reduce(t, group=p4inc)
        error = ""
    except Exception as e:             # every kind: the test asserts which
        error = f"{type(e).__name__}: {e}"
    return {"error": error, "seconds": time.monotonic() - started}


def ddp(rank: int, n: int, p4inc: tdist.ProcessGroup, gloo: tdist.ProcessGroup, steps: int, width: int) -> dict:
    """The same model, data and optimiser on each group (workloads/ddp.py): parameters, step times."""
    out: dict = {}
    for label, group in (("gloo", gloo), ("p4inc", p4inc)):
        run = train(group, rank, steps, width)
        out["initial"] = run.initial
        out[f"{label}/params"] = run.params
        out[f"{label}/step_s"] = torch.tensor(run.step_s)
    return out


def hook(rank: int, n: int, steps: int, width: int) -> dict:
    """DDP on gloo (the default group here) once plainly and once with hosts.dist's comm hook,
    whose hosts.dist group rendezvoused through torch's store (nothing else on MASTER_PORT)."""
    from hosts import dist
    group = dist.init_process_group("inc")
    try:
        out = {"gloo/params": train(None, rank, steps, width).params}
        run = train(None, rank, steps, width, hook=dist.ddp_comm_hook(group))
        out.update({"initial": run.initial, "p4inc/params": run.params,
                    "stats": {"backend": group.backend, "fallbacks": group.stats.fallbacks, "calls": group.stats.calls}})
        return out
    finally:
        dist.destroy_process_group()


def overlap(rank: int, n: int, p4inc: tdist.ProcessGroup, gloo: tdist.ProcessGroup) -> dict:
    """An async all_reduce of 256 Ki elements: how long the call took to return, whether it was
    done then, and when its future completed (a callback on the collective thread) while this
    thread multiplied matrices."""
    big = inputs(rank, torch.float32, 1 << 18)
    completed: list[float] = []
    started = time.perf_counter()
    work = tdist.all_reduce(big, async_op=True, group=p4inc)
    returned = time.perf_counter() - started
    done_at_return = work.is_completed()
    future = work.get_future().then(lambda f: completed.append(time.perf_counter() - started))
    a = torch.randn(256, 256)
    products = 0
    while not work.is_completed():
        a = torch.tanh(a @ a)
        products += 1
    future.wait()
    return {"returned_s": returned, "done_at_return": done_at_return, "completed_s": completed[0],
            "products": products, "result": big,
            "inputs_sum": sum(inputs(r, torch.float32, 1 << 18).double() for r in range(n))}


def refused(rank: int, n: int, p4inc: tdist.ProcessGroup, gloo: tdist.ProcessGroup) -> dict:
    said = {}
    for name, call in (("product", lambda: tdist.all_reduce(torch.ones(3), tdist.ReduceOp.PRODUCT, group=p4inc)),
                       ("send", lambda: tdist.send(torch.ones(3), dst=(rank + 1) % n, group=p4inc))):
        try:
            call()
            said[name] = ""
        except Exception as e:
            said[name] = str(e)
    return {"said": said}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.torch.ranks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", choices=("matrix", "mismatch", "ddp", "refused", "overlap", "hook"))
    p.add_argument("out", type=Path, help="folder for rank<R>.pt")
    p.add_argument("--steps", type=int, default=5, help="ddp: training steps (default 5)")
    p.add_argument("--width", type=int, default=64, help="ddp: the model's width (default 64: 53 KiB of gradients)")
    p.add_argument("--switch-dtypes", action="store_true",
                   help="matrix: only the dtypes the switch reduces (not float64 and int64, the hosts' path)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
    if args.scenario == "hook":
        tdist.init_process_group("gloo")
        try:
            result = hook(tdist.get_rank(), tdist.get_world_size(), args.steps, args.width)
        finally:
            tdist.destroy_process_group()
        return _save(result, args.out, int(os.environ["RANK"]))
    tdist.init_process_group("p4inc")
    rank, n = tdist.get_rank(), tdist.get_world_size()
    p4inc = tdist.group.WORLD
    gloo = tdist.new_group(backend="gloo")
    try:
        if args.scenario == "ddp":
            result = ddp(rank, n, p4inc, gloo, args.steps, args.width)
        elif args.scenario == "matrix":
            result = matrix(rank, n, p4inc, gloo, DTYPES if args.switch_dtypes else DTYPES_ALL)
        else:
            result = {"mismatch": mismatch, "refused": refused, "overlap": overlap}[args.scenario](rank, n, p4inc, gloo)
        pg = tdist.distributed_c10d._get_default_group()
        assert isinstance(pg, P4incProcessGroup)
        stats = pg.p4inc.stats
        result["stats"] = {"backend": stats.backend, "fallbacks": stats.fallbacks, "calls": stats.calls}
    finally:
        if args.scenario != "mismatch":      # a group whose ranks are out of step cannot close together
            tdist.destroy_process_group()
    return _save(result, args.out, rank)


def _save(result: dict, out: Path, rank: int) -> int:
    out.mkdir(parents=True, exist_ok=True)
    torch.save(result, out / f"rank{rank}.pt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
