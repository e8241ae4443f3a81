"""CLI for one rank of a job run through hosts.dist (a process group: rendezvous, the slot pool,
the switch, and the host ring to fall back on): AllReduces each --input .npy in turn, saves
the results next to --output, and prints a JSON line: the backend it ended on, its fallbacks,
calls and seconds. Exit 1 with one `error:` line when the job cannot run.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

from hosts.agent import IncError
from hosts.args import address
from hosts.dist import BACKENDS, DistError, LaunchEnv, Options, new_group

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not 0 <= args.rank < args.world_size:
        parser.error(f"--rank must be 0..{args.world_size - 1} (--world-size), not {args.rank}")
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    master_ip, master_port = args.master
    env = LaunchEnv(rank=args.rank, world_size=args.world_size, local_rank=0, master_addr=master_ip,
                    master_port=master_port)
    options = Options(interface=args.interface, window=args.window, give_up_after=args.give_up_after,
                      probe_timeout=args.probe_timeout, pool=args.pool)
    try:
        inputs = [np.load(path) for path in args.input]
        group = new_group(args.backend, env, options)
        try:
            for i, tensor in enumerate(inputs):
                np.save(args.output.with_name(f"{args.output.stem}-{i}.npy"), group.all_reduce(tensor))
        finally:
            group.close()
    except (DistError, IncError, OSError, ValueError) as e:
        print(f"error: rank {args.rank}: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"rank": args.rank, "backend": group.backend, "fallbacks": group.stats.fallbacks,
                      "calls": group.stats.calls, "seconds": group.stats.seconds}))
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hosts.dist_worker", description=__doc__)
    p.add_argument("--rank", type=int, required=True, help="this process's rank, 0..WORLD_SIZE-1")
    p.add_argument("--world-size", type=int, required=True, help="ranks in the job")
    p.add_argument("--master", type=address(), required=True, metavar="IP:PORT",
                   help="rank 0's address for the rendezvous (rank 0 listens on PORT)")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="default: %(default)s")
    p.add_argument("--pool", metavar="ADDR", help="ask the controller's slot pool for the job's slots: "
                   "HOST:PORT or unix:PATH")
    p.add_argument("--input", type=Path, action="append", required=True,
                   help="a .npy tensor to AllReduce; repeat for several calls, in order")
    p.add_argument("--output", type=Path, required=True,
                   help="results go to OUTPUT's stem plus -0.npy, -1.npy, ... in its folder")
    p.add_argument("--interface", help="bind the sockets to this interface (needs root)")
    p.add_argument("--window", type=int, default=16, help="slots in flight (default: %(default)s)")
    p.add_argument("--give-up-after", type=float, default=30.0,
                   help="seconds without a result before the switch is given up (default: %(default)s)")
    p.add_argument("--probe-timeout", type=float, default=1.0,
                   help="seconds the start-up probe waits for the switch (default: %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    return p


if __name__ == "__main__":
    sys.exit(main())
