"""Send raw Ethernet frames out of one interface, as a misbehaving host would (AF_PACKET,
needs root): the fuzz tests run it inside a Mininet host. Prints {"sent": n, "refused": m}.
Paced, so the switch's receive buffer never overflows and every frame can be accounted for.
"""
from __future__ import annotations

import argparse
import json
import pickle
import socket
import sys
import time
from pathlib import Path

BURST = 10          # frames sent back to back, then a pause to keep the average rate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.reliability.inject", description=__doc__)
    p.add_argument("frames", type=Path, help="a pickled list of frames (bytes), sent in order")
    p.add_argument("--interface", required=True, help="the interface to send them from, e.g. h1-eth0")
    p.add_argument("--rate", type=float, default=500.0, help="frames per second on average (default 500)")
    args = p.parse_args(argv)
    if args.rate <= 0:
        p.error("--rate must be positive")
    frames = pickle.loads(args.frames.read_bytes())
    sent = refused = 0
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((args.interface, 0))
        start = time.monotonic()
        for i, frame in enumerate(frames):
            if i % BURST == 0:
                time.sleep(max(0.0, start + i / args.rate - time.monotonic()))
            try:
                s.send(frame)
                sent += 1
            except OSError:         # the kernel refuses some frames (e.g. shorter than a header)
                refused += 1
    print(json.dumps({"sent": sent, "refused": refused}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
