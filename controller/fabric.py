"""Bring every switch of a topology to its wanted state, and keep it there: `setup_switch`
reconciles one switch (pipeline, forwarding, jobs); `watch` notices a switch that went
away or restarted (its StreamChannel ends), reconnects and reconciles it again.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from topologies.spec import Topology

from protocol import elements_per_packet_problem

from .allreduce import plan_switch
from .control import push_pipeline
from .errors import ControllerError, SwitchUnavailable
from .install import install_plan, program_sizes
from .switch import Pipeline, Switch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SetupResult:
    switch: str
    pipeline_pushed: bool
    forwarding_updates: int
    jobs_admitted: tuple[int, ...]
    jobs_forwarded: tuple[int, ...]
    elements_per_packet: int        # K of the program the switch runs


def open_switch(topo: Topology, name: str, target: str,
                election_id: tuple[int, int] | None = None) -> Switch:
    """A (not yet connected) Switch for the topology's switch `name`."""
    spec = topo.switches.get(name)
    if spec is None:
        raise ControllerError(f"no switch {name!r} in the topology (it has: {', '.join(topo.switches)})")
    return Switch(name, spec.grpc_addr, spec.device_id, election_id, target, spec.thrift_port)


def setup_switch(sw: Switch, topo: Topology, pipeline: Pipeline, force: bool = False) -> SetupResult:
    """Pipeline (only if the device lacks it), then forwarding, then every job the switch
    aggregates or passes on. Safe to repeat: what is installed already stays as it is.

    The pipeline's elements per packet (K) must fit the topology's MTU and agree with any
    job that records one; otherwise nothing is pushed or installed."""
    sizes = program_sizes(pipeline.p4info)
    check_elements_per_packet(topo, sizes.elements_per_packet, sw.name)
    pushed = push_pipeline(sw, pipeline, force)
    plan = plan_switch(topo, sw.name, sizes.pool_size)
    updates, admitted = install_plan(sw, plan, slots_are_fresh=pushed)
    return SetupResult(sw.name, pushed, updates, admitted, tuple(f.job_id for f in plan.forwards),
                       sizes.elements_per_packet)


def check_elements_per_packet(topo: Topology, k: int, switch: str) -> None:
    """A program of K elements per packet runs on this topology: its packets fit the links'
    MTU, and every job that records a K (the one its workers were told) has this one."""
    problem = elements_per_packet_problem(k, topo.mtu)
    if problem:
        raise ControllerError(f"{switch}: the pipeline's {problem}")
    for job in topo.jobs:
        if job.elements_per_packet is not None and job.elements_per_packet != k:
            raise ControllerError(f"{switch}: job {job.job_id} records {job.elements_per_packet} elements per "
                                  f"packet, but the pipeline carries {k}: rebuild the program with "
                                  f"INC_K={job.elements_per_packet}, or give the job K = {k}")


def record_elements_per_packet(topo: Topology, k: int, path: Path) -> None:
    """Record K in every job of the topology file at `path` that has none yet: the job's
    workers take it from there (the runner hands it to each)."""
    jobs = [replace(job, elements_per_packet=k) if job.elements_per_packet is None else job for job in topo.jobs]
    if jobs != topo.jobs:
        replace(topo, jobs=jobs).dump(path)
        log.info("%s: jobs %s record %d elements per packet", path, " ".join(str(j.job_id) for j in jobs), k)


def watch(switches: list[Switch], topo: Topology, pipeline: Pipeline, stop: threading.Event,
          poll_s: float = 1.0, connect_timeout_s: float = 2.0,
          reconciled: Callable[[Switch], None] | None = None) -> None:
    """Keep each switch set up until `stop` is set; a switch whose stream ended is
    reconnected and reconciled (a restarted switch gets the pipeline and all state back),
    then handed to `reconciled` for what the topology does not hold (the slot pool's jobs)."""
    up: dict[str, bool] = {sw.name: False for sw in switches}
    waiting: set[str] = set()
    while not stop.is_set():
        for sw in switches:
            if sw.poll():
                continue
            if up[sw.name]:
                log.warning("%s: lost the P4Runtime stream (switch stopped or restarted)", sw.name)
                up[sw.name] = False
            sw.close()
            try:
                sw.connect(timeout=connect_timeout_s)
            except SwitchUnavailable as e:
                if sw.name not in waiting:
                    log.info("%s; retrying every %g s", e, poll_s)
                    waiting.add(sw.name)
                continue
            waiting.discard(sw.name)
            up[sw.name] = True
            if not sw.is_primary:
                log.warning("%s: another controller is primary; watching only", sw.name)
                continue
            try:
                result = setup_switch(sw, topo, pipeline)
            except ControllerError as e:
                # A switch that went away mid-way is retried when its stream ends; a
                # refused request is not, as repeating it would not help.
                log.error("%s: reconcile failed: %s", sw.name, e)
                continue
            log.info("%s: reconciled (pipeline %s, %d forwarding updates, jobs admitted %s)",
                     sw.name, "pushed" if result.pipeline_pushed else "kept",
                     result.forwarding_updates, list(result.jobs_admitted) or "none")
            if reconciled is not None:
                try:
                    reconciled(sw)
                except ControllerError as e:
                    log.error("%s: %s", sw.name, e)
        stop.wait(poll_s)
