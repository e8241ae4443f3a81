"""Bring one switch running allreduce.p4 to its plan (`controller.allreduce`) with the generic
entity operations of `controller.control`: forwarding, then jobs (a new job's slots cleared
first, its admission last), jobs passed on, and their removal; and the program's sizes
(slots per version, elements per packet), read from its P4Info.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable

from p4.config.v1 import p4info_pb2

from topologies.spec import Topology

from .allreduce import (INC_JOB, SLOT_REGISTERS, SLOT_VALUES, Job, JobForward, SwitchPlan, forward_entry,
                        forwarding_entries, job_entries)
from .control import (delete_multicast_groups, delete_table_entries, install_multicast_groups,
                      install_table_entries, read_table_entries)
from .entries import MulticastGroup, TableEntry
from .errors import ControllerError
from .switch import Switch

log = logging.getLogger(__name__)

SET_JOB = "MyIngress.set_job"


@dataclass(frozen=True)
class ProgramSizes:
    """What allreduce.p4 was built with, as its registers' sizes say."""
    pool_size: int               # slots per version (the slot registers hold two versions)
    elements_per_packet: int     # K: slot_values holds K cells per slot


def program_sizes(p4info: p4info_pb2.P4Info) -> ProgramSizes:
    """The sizes of the allreduce.p4 that `p4info` describes (a pipeline's, or a switch's)."""
    sizes = {r.preamble.name: r.size for r in p4info.registers}
    missing = [name for name in (SLOT_REGISTERS[0], SLOT_VALUES) if name not in sizes]
    if missing:
        raise ControllerError(f"the pipeline is not allreduce.p4: it has no register {', '.join(missing)}")
    slots = sizes[SLOT_REGISTERS[0]]
    return ProgramSizes(slots // 2, sizes[SLOT_VALUES] // slots)


def install_plan(sw: Switch, plan: SwitchPlan, slots_are_fresh: bool = False) -> tuple[int, tuple[int, ...]]:
    """Forwarding, then the plan's jobs and forwards (install_jobs); return the number of
    forwarding updates written and the ids of the jobs newly admitted."""
    updates = _install_forwarding(sw, plan.forwarding, plan.flood_groups)
    return updates, install_jobs(sw, plan.jobs, plan.forwards, slots_are_fresh)


def install_forwarding(sw: Switch, topo: Topology, switch: str) -> int:
    """Make `switch` forward ordinary traffic between the topology's hosts; return the updates."""
    return _install_forwarding(sw, *forwarding_entries(topo, switch))


def install_jobs(sw: Switch, jobs: Iterable[Job], forwards: Iterable[JobForward] = (),
                 slots_are_fresh: bool = False) -> tuple[int, ...]:
    """Admit `jobs` (their multicast groups, their members' ports and addresses, their slot
    ranges) and pass `forwards` on towards their aggregators; return the ids newly admitted.

    A job the switch does not hold yet gets its slots cleared before it is admitted (unless
    `slots_are_fresh`: the pipeline was just pushed, so every register is 0); a job already
    there is only brought up to date, so running rounds are not disturbed. Each job's inc_job
    entry comes last: a packet admitted finds everything it needs.
    """
    jobs, forwards = list(jobs), list(forwards)
    held = {e.match.get("hdr.inc.job_id") for e in read_table_entries(sw, INC_JOB) if e.action_name == SET_JOB}
    new = [job for job in jobs if job.job_id not in held]
    if not slots_are_fresh:
        for job in new:
            clear_slots(sw, job)
    planned = [job_entries(job) for job in jobs]
    install_multicast_groups(sw, [group for _, groups in planned for group in groups])
    install_table_entries(sw, [e for entries, _ in planned for e in entries[1:]])
    install_table_entries(sw, [entries[0] for entries, _ in planned] + [forward_entry(f) for f in forwards])
    for job in jobs:
        log.info("%s: job %d %s: members %s, group %d, slots %d..%d", sw.name, job.job_id,
                 "admitted" if job in new else "up to date", " ".join(w.host for w in job.members),
                 job.mcast_group, job.slot_base, job.slot_base + job.num_slots - 1)
    for fwd in forwards:
        log.info("%s: job %d passed on to %s through port %d", sw.name, fwd.job_id, fwd.aggregator, fwd.port)
    return tuple(job.job_id for job in new)


def install_job(sw: Switch, job: Job, slots_are_fresh: bool = False) -> bool:
    """Admit one job (install_jobs); return whether it was newly admitted."""
    return bool(install_jobs(sw, [job], slots_are_fresh=slots_are_fresh))


def install_job_forward(sw: Switch, fwd: JobForward) -> int:
    return install_table_entries(sw, [forward_entry(fwd)])


def remove_job(sw: Switch, job: Job) -> None:
    """Stop admitting the job (inc_job first), then drop its workers and its group."""
    entries, groups = job_entries(job)
    delete_table_entries(sw, entries[:1])
    delete_table_entries(sw, entries[1:])
    delete_multicast_groups(sw, [group.multicast_group_id for group in groups])
    log.info("%s: job %d removed", sw.name, job.job_id)


def remove_job_forward(sw: Switch, fwd: JobForward) -> int:
    return delete_table_entries(sw, [forward_entry(fwd)])


def clear_slots(sw: Switch, job: Job) -> None:
    """Zero the job's slot state in both versions, so its workers can start at seq 0."""
    cells = job.register_indices
    for name in SLOT_REGISTERS:
        sw.registers.reset(name, cells)
    log.info("%s: job %d: slots %d..%d cleared", sw.name, job.job_id, job.slot_base,
             job.slot_base + job.num_slots - 1)


def _install_forwarding(sw: Switch, entries: Iterable[TableEntry], flood_groups: Iterable[MulticastGroup]) -> int:
    return install_multicast_groups(sw, flood_groups) + install_table_entries(sw, entries)
