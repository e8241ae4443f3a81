"""p4inc's control plane: P4Runtime (p4runtime-shell's client) to p4sim or BMv2 switches.

It pushes the pipeline, installs forwarding, jobs and multicast groups from the topology
JSON, clears slots, reads counters and registers; `python -m controller --help`.
"""
from .allreduce import (Job, JobForward, Worker, clear_slots, forwarding_entries, install_forwarding,
                        install_job, job_entries, jobs_on_switch, remove_job)
from .control import (install_runtime_config, install_table_entries, push_pipeline, read_counters,
                      read_multicast_groups, read_table_entries)
from .entries import CloneSession, MulticastGroup, Replica, RuntimeConfig, TableEntry
from .errors import ControllerError, SwitchUnavailable
from .fabric import open_switch, setup_switch, watch
from .pool import Grant, JobPool, PoolRefused, PoolServer, SlotPool
from .registers import P4RuntimeRegisters, Registers, ThriftRegisters
from .switch import Pipeline, Switch

__all__ = [
    "CloneSession", "ControllerError", "Grant", "Job", "JobForward", "JobPool", "MulticastGroup",
    "P4RuntimeRegisters", "Pipeline", "PoolRefused", "PoolServer", "Registers", "Replica", "RuntimeConfig",
    "SlotPool", "Switch", "SwitchUnavailable", "TableEntry",
    "ThriftRegisters", "Worker", "clear_slots", "forwarding_entries", "install_forwarding",
    "install_job", "install_runtime_config", "install_table_entries", "job_entries", "jobs_on_switch",
    "open_switch", "push_pipeline", "read_counters", "read_multicast_groups", "read_table_entries",
    "remove_job", "setup_switch", "watch",
]
