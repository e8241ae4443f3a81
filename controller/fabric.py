"""Bring every switch of a topology to its wanted state, and keep it there: `setup_switch`
reconciles one switch (pipeline, forwarding, jobs); `watch` notices a switch that went
away or restarted (its StreamChannel ends), reconnects and reconciles it again.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from topologies.spec import Topology

from .allreduce import install_forwarding, install_job, install_job_forward, jobs_on_switch, pool_size
from .control import push_pipeline
from .errors import ControllerError, SwitchUnavailable
from .switch import Pipeline, Switch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SetupResult:
    switch: str
    pipeline_pushed: bool
    forwarding_updates: int
    jobs_admitted: tuple[int, ...]
    jobs_forwarded: tuple[int, ...]


def open_switch(topo: Topology, name: str, target: str,
                election_id: tuple[int, int] | None = None) -> Switch:
    """A (not yet connected) Switch for the topology's switch `name`."""
    spec = topo.switches.get(name)
    if spec is None:
        raise ControllerError(f"no switch {name!r} in the topology (it has: {', '.join(topo.switches)})")
    return Switch(name, spec.grpc_addr, spec.device_id, election_id, target, spec.thrift_port)


def setup_switch(sw: Switch, topo: Topology, pipeline: Pipeline, force: bool = False) -> SetupResult:
    """Pipeline (only if the device lacks it), then forwarding, then every job the switch
    aggregates or passes on. Safe to repeat: what is installed already stays as it is."""
    pushed = push_pipeline(sw, pipeline, force)
    updates = install_forwarding(sw, topo, sw.name)
    aggregated, forwarded = jobs_on_switch(topo, sw.name, pool_size(sw))
    admitted = tuple(job.job_id for job in aggregated if install_job(sw, job, slots_are_fresh=pushed))
    for fwd in forwarded:
        install_job_forward(sw, fwd)
    return SetupResult(sw.name, pushed, updates, admitted, tuple(f.job_id for f in forwarded))


def watch(switches: list[Switch], topo: Topology, pipeline: Pipeline, stop: threading.Event,
          poll_s: float = 1.0, connect_timeout_s: float = 2.0) -> None:
    """Keep each switch set up until `stop` is set; a switch whose stream ended is
    reconnected and reconciled (a restarted switch gets the pipeline and all state back)."""
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
        stop.wait(poll_s)
