"""The third baseline, one that no one here wrote: `MPI_Allreduce` of Open MPI (Debian's,
through mpi4py), one rank per Mininet host, its TCP traffic through the same switch.

Started by `mpirun` (see bench/mpi.py). Rank 0 reads trials as JSON lines on stdin, as
bench.worker does, and sends them to the other ranks, which wait for them asleep: an MPI
rank blocked in a collective spins, and N spinning ranks between MPI trials would take the
2 cores from the switch and the INC and ring workers in theirs. Every rank runs a barrier and one timed
`Allreduce`, waits for the others (a barrier: a check must not take a core from a rank still
in its call), checks its sum against numpy, and rank 0 answers with every rank's start and
end (CLOCK_MONOTONIC, shared by all namespaces of the machine) on one JSON line.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np
from mpi4py import MPI

from bench.worker import sum_is_right
from hosts.worker import generated_tensor

TRIAL_TAG = 1
IDLE_POLL_S = 0.0005      # how often a waiting rank looks for the next trial


def next_trial(comm: MPI.Comm) -> dict[str, Any] | None:
    """The next trial, None at the end of input; ranks other than 0 sleep between looks."""
    if comm.rank == 0:
        line = sys.stdin.readline()
        trial = json.loads(line) if line else None
        for rank in range(1, comm.size):
            comm.send(trial, dest=rank, tag=TRIAL_TAG)
        return trial
    while not comm.Iprobe(source=0, tag=TRIAL_TAG):
        time.sleep(IDLE_POLL_S)
    return comm.recv(source=0, tag=TRIAL_TAG)


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
    comm.Barrier()
    ok = sum_is_right(result, trial, comm.size)
    return {"ok": ok, "start": start, "end": end, "cpu_s": cpu,
            "error": None if ok else f"rank {comm.rank}: sum differs"}


def main() -> int:
    comm = MPI.COMM_WORLD
    while True:
        trial = next_trial(comm)
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
