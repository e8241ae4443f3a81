"""Runs Open MPI across Mininet hosts. The hosts have no ssh, so `mpirun` runs in the first
host and Open MPI's rsh launcher (`plm_rsh_agent`) starts its daemon in each other host with
`mnexec -a PID`, PID being that host's shell: the daemon then lives in the host's network
namespace and every rank's traffic (TCP, one rank per host) crosses the switch.
"""
from __future__ import annotations

import importlib.util
import ipaddress
import shutil
import sys
from pathlib import Path

from topologies.fabric import Fabric

# Open MPI refuses root unless told twice; Mininet needs root.
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def mpi_missing() -> str | None:
    """Why an MPI baseline cannot run on this machine, or None if it can."""
    if shutil.which("mpirun") is None or shutil.which("mnexec") is None:
        return "mpirun or mnexec not found (make setup installs openmpi-bin and mininet)"
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (make setup)"
    return None


def write_launcher(fabric: Fabric, hosts: list[str], path: Path) -> Path:
    """An ssh stand-in, `LAUNCHER HOST COMMAND...`, that runs COMMAND in that Mininet host."""
    cases = "\n".join(f"  {fabric.topo.hosts[h].address}) pid={fabric.host(h).pid} ;;" for h in hosts)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The hosts share one hostname and /tmp: each orted gets its own TMPDIR, else two of them (or
    # one and mpirun) can make the same session directory, /tmp/ompi.HOST.UID/jf.J/0, at once
    # and one fails ("A call to mkdir was unable to create the desired directory").
    tmp = path.parent / f"{path.stem}-tmp"
    path.write_text("#!/bin/sh\n"
                    "# Open MPI's plm_rsh_agent for Mininet hosts (written by bench/mpi.py).\n"
                    'host=$1; shift\ncase "$host" in\n'
                    f"{cases}\n"
                    '  *) echo "no Mininet host $host" >&2; exit 255 ;;\nesac\n'
                    f'mkdir -p "{tmp}/$host"\n'
                    f'exec env TMPDIR="{tmp}/$host" mnexec -a "$pid" sh -c "$*"\n')
    path.chmod(0o755)
    return path


def mpirun_command(fabric: Fabric, hosts: list[str], launcher: Path, cwd: Path,
                   program: tuple[str, ...] = ("-m", "bench.mpi_worker"), env: dict[str, str] | None = None) -> list[str]:
    """mpirun for one rank per host of `python PROGRAM...` (default: `bench.mpi_worker`), TCP only,
    on the hosts' subnet, each rank with `env` set. TCP segments follow the hosts' interface MTU,
    so MPI runs at the fabric's MTU as INC and the ring do."""
    specs = [fabric.topo.hosts[h] for h in hosts]
    subnet = str(ipaddress.ip_interface(specs[0].ip).network)
    return ["mpirun", "-np", str(len(hosts)), "--host", ",".join(f"{s.address}:1" for s in specs),
            "--wdir", str(cwd), *(arg for name, value in (env or {}).items() for arg in ("-x", f"{name}={value}")),
            "--mca", "plm_rsh_agent", str(launcher),
            # The ranks share the machine's cores with each other and the switch: spin politely.
            "--mca", "mpi_yield_when_idle", "1",
            # Open MPI's TCP progress runs in its event loop, which it ticks every 10 ms unless some
            # component counts itself a user of it; a rank left uncounted (2 of 10 N=2 runs here,
            # from MPI_Init on) waits up to 10 ms for every message, every call ~9.7 ms at every
            # size. A 1 us tick costs nothing otherwise: a counted rank ticks on every poll anyway.
            "--mca", "mpi_event_tick_rate", "1",
            # orted maps the hwloc topology into shared memory at the "biggest" hole of its address
            # space; on some machines that write segfaults (Open MPI 4.1.4, hwloc_shmem_topology_write).
            "--mca", "rtc_hwloc_vmhole", "none",
            # Unbound, as INC's and the ring's workers and the switch are (Open MPI binds 2 ranks
            # to a core each).
            "--bind-to", "none",
            # Every rank pair connects in MPI_Init, not at its first message in some trial.
            "--mca", "mpi_preconnect_mpi", "1",
            "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", subnet, "--mca", "oob_tcp_if_include", subnet,
            sys.executable, *program]
