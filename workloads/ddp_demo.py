"""DDP step time on a Mininet star: `python -m workloads.ddp` on every host, once on torch's gloo
and once on the "p4inc" backend, through the same switch; prints the median step time of each
(the first step, DDP's warm-up, left out) and checks that p4inc's parameters equal gloo's within
workloads/ddp.py's DDP_RTOL. Needs root and PyTorch (make setup TORCH=1).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from hosts.args import settle_elements_per_packet
from hosts.engine import spin_for
from hosts.inc import STAR_WINDOW
from protocol import recommended_elements_per_packet
from topologies.fabric import Fabric, FabricError, FabricOptions
from topologies.pieces import DEFAULT_PROGRAM, PieceError, clear_job_slots, compile_program, setup_controller
from topologies.procs import end_child
from topologies.spec import DEFAULT_MTU, TopologyError, star
from topologies.switches import REPO_ROOT
from workloads.demo import DemoError, rank_envs
from workloads.ddp import DDP_RTOL

BACKENDS = ("gloo", "p4inc")


def run_ranks(fabric: Fabric, backend: str, worker_args: list[str], out_dir: Path, timeout_s: float) -> list[dict]:
    """One `workloads.ddp` rank per host of the fabric's job; their saved results, in rank order."""
    import torch
    job = fabric.topo.jobs[0]
    hosts = [fabric.topo.hosts[h] for h in job.workers]
    out_dir.mkdir(parents=True, exist_ok=True)
    clear_job_slots(fabric.options.topology_path, job.job_id, fabric.options.target)
    procs = []
    try:
        for rank, (host, launch) in enumerate(zip(hosts, rank_envs(fabric))):
            env = {**os.environ, **launch, "P4INC_BACKEND": "inc"}
            with open(out_dir / f"rank{rank}.err", "w") as stderr:
                procs.append(fabric.popen(host.name, [sys.executable, "-m", "workloads.ddp", "--backend", backend,
                                                      "-o", str(out_dir), *worker_args],
                                          cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr))
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        failed = [f"rank {r} (exit {p.returncode}): {(out_dir / f'rank{r}.err').read_text().strip()[-400:]}"
                  for r, p in enumerate(procs) if p.returncode != 0]
        if failed:
            raise DemoError(f"{backend}: " + "; ".join(failed))
    finally:
        for proc in procs:
            end_child(proc)
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(len(hosts))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.ddp_demo", description=__doc__,
                                epilog="example: python -m workloads.ddp_demo --workers 8 --width 690 --steps 12")
    p.add_argument("--workers", type=int, default=8, help="hosts in the star (default 8)")
    p.add_argument("--width", type=int, default=690, help="the model's width (default 690: 3.9 MiB of gradients)")
    p.add_argument("--steps", type=int, default=12, help="training steps per run (default 12: the median of 11)")
    p.add_argument("--target", choices=("p4sim", "bmv2"), default=os.environ.get("TARGET", "p4sim"))
    p.add_argument("--mtu", type=int, default=DEFAULT_MTU,
                   help=f"MTU of every link, for both backends (default {DEFAULT_MTU}; 9000: jumbo frames)")
    p.add_argument("--elements-per-packet", type=int, metavar="K",
                   help="build the switch program with K elements per packet (default: the target's recommended "
                        f"K, {recommended_elements_per_packet()})")
    p.add_argument("--run-timeout", type=float, default=900.0, help="seconds a run may take (default 900)")
    p.add_argument("-o", "--out", type=Path, default=REPO_ROOT / "results" / "ddp.json", help="JSON results")
    args = p.parse_args(argv)
    if args.workers < 2 or args.steps < 2 or args.width < 1:
        p.error("--workers and --steps must be at least 2, --width at least 1")
    settle_elements_per_packet(p, args)
    if os.geteuid() != 0:
        p.error("Mininet needs root")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    build = REPO_ROOT / "build" / "ddp"
    options = FabricOptions(target=args.target, build_dir=build)
    runs: dict[str, list[dict]] = {}
    try:
        program = compile_program(args.target, DEFAULT_PROGRAM, build, args.elements_per_packet)
        with Fabric(star(args.workers, mtu=args.mtu), options) as fabric:
            setup_controller(options.topology_path, build, program, args.target)
            for backend in BACKENDS:
                runs[backend] = run_ranks(fabric, backend, ["--steps", str(args.steps), "--width", str(args.width)],
                                          build / "runs" / backend, args.run_timeout)
    except (DemoError, FabricError, PieceError, TopologyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    gloo = runs["gloo"][0]
    scale = float(gloo["params"].abs().max())
    apart = max(float((r["params"] - gloo["params"]).abs().max()) for r in runs["p4inc"])
    correct = apart <= DDP_RTOL * scale
    median = {b: float(runs[b][0]["step_s"][1:].median()) for b in BACKENDS}
    gradient_mib = gloo["params"].numel() * 4 / 2**20
    print(f"N={args.workers}, {gradient_mib:.2f} MiB of float32 gradients, {args.steps} steps: median step "
          f"gloo {1e3 * median['gloo']:.0f} ms, p4inc {1e3 * median['p4inc']:.0f} ms "
          f"(p4inc/gloo {median['p4inc'] / median['gloo']:.2f}); parameters {apart:.3g} from gloo's "
          f"({'OK' if correct else 'WRONG'}, bound {DDP_RTOL * scale:.3g})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "workers": args.workers, "width": args.width, "steps": args.steps, "gradient_mib": gradient_mib,
        "target": args.target, "mtu": args.mtu, "elements_per_packet": args.elements_per_packet,
        "window": STAR_WINDOW, "spin_s": spin_for(args.workers)._asdict(), "median_step_s": median,
        "max_param_difference": apart, "correct": correct,
        "step_s": {b: runs[b][0]["step_s"].tolist() for b in BACKENDS}}, indent=2))
    print(f"wrote {args.out}")
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
