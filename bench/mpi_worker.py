"""The third baseline, one that no one here wrote: `MPI_Allreduce` of Open MPI (Debian's,
through mpi4py), one rank per Mininet host, its TCP traffic through the same switch.

Started by `mpirun` (see bench/mpi.py). Rank 0 reads trials as JSON lines on stdin, as
bench.worker does, and sends them to the other ranks, which wait for them asleep: an MPI
rank blocked in a collective spins, and N spinning ranks between MPI trials would take the
2 cores from the switch and the INC and ring workers in theirs. They wait in a blocking read
of a FIFO that rank 0 writes a byte to (a `Doorbell`), not by polling MPI: looking every
0.5 ms from 7 ranks slowed the INC trials between MPI's by 16-30%. Every rank runs a barrier and one timed
`Allreduce`, sleeps `SETTLE_S` and waits for the others (a barrier: a check must not take a
core from a rank still in its call), checks its sum against numpy, and rank 0 answers with
every rank's start and end (CLOCK_MONOTONIC, shared by all namespaces of the machine) on one
JSON line.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np
from mpi4py import MPI

from bench.worker import SETTLE_S, sum_is_right
from hosts.worker import generated_tensor

TRIAL_TAG = 1


class Doorbell:
    """Rank 0 rings the others awake through one FIFO each (the ranks share the machine's
    files); a rank waiting for the bell sleeps in read(2). The FIFOs are unlinked once open."""

    def __init__(self, comm: MPI.Comm):
        self.comm = comm
        folder = comm.bcast(tempfile.mkdtemp(prefix="p4inc-mpi-") if comm.rank == 0 else None, root=0)
        if comm.rank != 0:
            os.mkfifo(os.path.join(folder, str(comm.rank)))
        comm.Barrier()
        # Each open waits for its other end: rank 0 opens the FIFOs in rank order, each rank its own.
        if comm.rank == 0:
            self.fds = [os.open(os.path.join(folder, str(rank)), os.O_WRONLY) for rank in range(1, comm.size)]
        else:
            self.fds = [os.open(os.path.join(folder, str(comm.rank)), os.O_RDONLY)]
        comm.Barrier()
        if comm.rank == 0:
            shutil.rmtree(folder)

    def ring(self) -> None:
        for fd in self.fds:
            os.write(fd, b"!")

    def wait(self) -> bool:
        """False if rank 0 is gone (end of file)."""
        return os.read(self.fds[0], 1) == b"!"


def next_trial(comm: MPI.Comm, bell: Doorbell) -> dict[str, Any] | None:
    """The next trial, None at the end of input; ranks other than 0 sleep until rank 0 rings."""
    if comm.rank == 0:
        line = sys.stdin.readline()
        trial = json.loads(line) if line else None
        bell.ring()
        for rank in range(1, comm.size):
            comm.send(trial, dest=rank, tag=TRIAL_TAG)
        return trial
    return comm.recv(source=0, tag=TRIAL_TAG) if bell.wait() else None


def run_trial(comm: MPI.Comm, trial: dict) -> dict:
    size = max(1, trial["bytes"] // 4)
    tensor = generated_tensor(trial["seed"], comm.rank, size, trial["dtype"])
    result = np.empty_like(tensor)
    comm.Barrier()
    cpu = time.process_time()        # user + system of every thread of the rank
    start = time.perf_counter()
    comm.Allreduce(tensor, result, op=MPI.SUM)
    end = time.perf_counter()
    cpu = time.process_time() - cpu
    time.sleep(SETTLE_S)        # as bench.worker's: an early finisher leaves the cores to the others
    comm.Barrier()
    ok = sum_is_right(result, trial, comm.size)
    return {"ok": ok, "start": start, "end": end, "cpu_s": cpu,
            "error": None if ok else f"rank {comm.rank}: sum differs"}


def main() -> int:
    comm = MPI.COMM_WORLD
    bell = Doorbell(comm)
    while True:
        trial = next_trial(comm, bell)
        if trial is None:
            return 0
        replies = comm.gather(run_trial(comm, trial), root=0)
        if comm.rank == 0:
            bad = [r["error"] for r in replies if not r["ok"]]
            sys.stdout.write(json.dumps({"ok": not bad, "error": bad[0] if bad else None, "ranks": [
                {"start": r["start"], "end": r["end"], "cpu_s": r["cpu_s"]} for r in replies]}) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
