"""p4inc's control plane: P4Runtime (p4runtime-shell's client) to p4sim or BMv2 switches.

It pushes the pipeline, installs forwarding, jobs and multicast groups from the topology
JSON, clears slots, reads counters and registers; `python -m controller --help`.
"""
from .allreduce import (Job, JobForward, SwitchPlan, Worker, forwarding_entries, job_entries, jobs_on_switch,
                        plan_switch)
from .control import (install_runtime_config, install_table_entries, push_pipeline, read_counters,
                      read_multicast_groups, read_table_entries)
from .entries import CloneSession, MulticastGroup, Replica, RuntimeConfig, TableEntry
from .errors import ControllerError, SwitchUnavailable
from .fabric import open_switch, setup_switch, watch
from .install import (ProgramSizes, clear_slots, install_forwarding, install_job, install_jobs, install_plan,
                      program_sizes, remove_job)
from .pool import Grant, JobPool, PoolRefused, PoolServer, SlotPool
from .registers import P4RuntimeRegisters, Registers, ThriftRegisters
from .switch import Pipeline, Switch

__all__ = [
    "CloneSession", "ControllerError", "Grant", "Job", "JobForward", "JobPool", "MulticastGroup",
    "P4RuntimeRegisters", "Pipeline", "PoolRefused", "PoolServer", "ProgramSizes", "Registers", "Replica",
    "RuntimeConfig", "SlotPool", "Switch", "SwitchPlan", "SwitchUnavailable", "TableEntry", "ThriftRegisters",
    "Worker", "clear_slots", "forwarding_entries", "install_forwarding", "install_job", "install_jobs",
    "install_plan", "install_runtime_config", "install_table_entries", "job_entries", "jobs_on_switch",
    "open_switch", "plan_switch", "program_sizes", "push_pipeline", "read_counters", "read_multicast_groups",
    "read_table_entries", "remove_job", "setup_switch", "watch",
]
