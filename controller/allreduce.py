"""What `p4src/allreduce.p4` needs from its controller, planned from the topology alone
(no switch): forwarding (l2_forward, ipv4_lpm, the flood group) and jobs (inc_job, inc_worker,
inc_worker_addr, a multicast group, a slot range), where each job is aggregated and which
switches pass it on. `controller.install` brings a switch to the plan. Names follow
docs/protocol.md.
"""
from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass
from functools import partial

from protocol import AGG_IP, AGG_MAC, INC_PORT, JOB_LEAF, MAX_WORKERS
from topologies.spec import JobSpec, Topology

from .entries import MulticastGroup, Replica, TableEntry
from .errors import ControllerError

FLOOD_GROUP = 1                  # multicast group of every host-facing port (broadcast, ARP)
JOB_GROUP_BASE = 0x100           # job j replicates through group JOB_GROUP_BASE + j
BROADCAST = "ff:ff:ff:ff:ff:ff"
SLOT_REGISTERS = ("MyIngress.slot_seen", "MyIngress.slot_count", "MyIngress.slot_seq",
                  "MyIngress.slot_flags", "MyIngress.slot_need")   # slot_values needs no reset
SLOT_VALUES = "MyIngress.slot_values"    # K cells per slot: its size says the program's K

L2_FORWARD, IPV4_LPM = "MyIngress.l2_forward", "MyIngress.ipv4_lpm"
INC_JOB, INC_WORKER, INC_WORKER_ADDR = "MyIngress.inc_job", "MyIngress.inc_worker", "MyEgress.inc_worker_addr"


@dataclass(frozen=True)
class Worker:
    """A job's worker as one switch sees it: `port` leads to its host (cabled or via a hop)."""
    worker_id: int
    host: str
    port: int
    mac: str
    ip: str
    udp_port: int = INC_PORT


@dataclass(frozen=True)
class Job:
    """A job on a switch that aggregates it: its workers, group and slice of the slot pool.

    In a hierarchical job a leaf's `workers` are the job's workers cabled to it and its
    `uplink` the switch that sums the leaves; that switch's `workers` are the leaves. A leaf
    and the switch above it know each other by one id, after the job's worker ids, and
    address each other with the aggregator's address.
    """
    job_id: int
    workers: tuple[Worker, ...]
    mcast_group: int
    slot_base: int
    num_slots: int
    pool_size: int
    uplink: Worker | None = None

    @property
    def members(self) -> tuple[Worker, ...]:
        """Everyone the switch admits packets from and sends results to."""
        return self.workers + ((self.uplink,) if self.uplink else ())

    @property
    def register_indices(self) -> list[int]:
        """Both versions' register cells of the job's slots."""
        return [version * self.pool_size + self.slot_base + s
                for version in (0, 1) for s in range(self.num_slots)]


@dataclass(frozen=True)
class JobForward:
    """A job that another switch aggregates: INC packets go on through `port`."""
    job_id: int
    aggregator: str
    port: int


@dataclass(frozen=True)
class SwitchPlan:
    """Everything one switch of a topology holds for allreduce.p4."""
    switch: str
    forwarding: tuple[TableEntry, ...]
    flood_groups: tuple[MulticastGroup, ...]
    jobs: tuple[Job, ...]            # the jobs it aggregates
    forwards: tuple[JobForward, ...]  # the jobs it passes on towards their aggregator


def plan_switch(topo: Topology, switch: str, pool: int) -> SwitchPlan:
    """The plan of `switch`, whose program has `pool` slots per version."""
    entries, groups = forwarding_entries(topo, switch)
    aggregated, forwarded = jobs_on_switch(topo, switch, pool)
    return SwitchPlan(switch, tuple(entries), tuple(groups), tuple(aggregated), tuple(forwarded))


def jobs_on_switch(topo: Topology, switch: str, pool: int) -> tuple[list[Job], list[JobForward]]:
    """The jobs `switch` aggregates and those it passes on towards their aggregator.

    The pool is split evenly between the topology's jobs in their order, the same on
    every switch, so a restarted controller derives the same ranges.
    """
    if switch not in topo.switches:
        raise ControllerError(f"no switch {switch!r} in the topology (it has: {', '.join(topo.switches)})")
    routes = _Routes(topo)
    share = pool // max(1, len(topo.jobs))
    aggregated, forwarded = [], []
    for i, spec in enumerate(topo.jobs):
        if not 1 <= len(spec.workers) <= MAX_WORKERS:
            raise ControllerError(f"job {spec.job_id}: {len(spec.workers)} workers; a job has 1..{MAX_WORKERS}")
        if not 0 <= JOB_GROUP_BASE + spec.job_id <= 0xFFFF:
            raise ControllerError(f"job id {spec.job_id} is out of range (0..{0xFFFF - JOB_GROUP_BASE})")
        sources = [topo.host_port(w)[0] for w in spec.workers]
        aggregator = routes.aggregator(sources)
        job = partial(Job, spec.job_id, mcast_group=JOB_GROUP_BASE + spec.job_id, slot_base=i * share,
                      num_slots=share, pool_size=pool)
        cabled = tuple(Worker(w_id, h, routes.port_to_host(switch, h), topo.hosts[h].mac, topo.hosts[h].address)
                       for w_id, h in enumerate(spec.workers) if switch == aggregator or sources[w_id] == switch)
        leaves = _leaves(routes, spec, sources, aggregator) if spec.hierarchical else []
        if switch == aggregator:
            aggregated.append(job(tuple(_member(routes, switch, leaf, len(spec.workers) + k)
                                        for k, leaf in enumerate(leaves)) or cabled))
        elif switch in leaves:
            uplink = _member(routes, switch, aggregator, len(spec.workers) + leaves.index(switch))
            aggregated.append(job(cabled, uplink=uplink))
        elif routes.on_path(switch, sources, aggregator):
            forwarded.append(JobForward(spec.job_id, aggregator, routes.next_port(switch, aggregator)))
    return aggregated, forwarded


def _leaves(routes: _Routes, spec: JobSpec, sources: list[str], aggregator: str) -> list[str]:
    """The switches that sum a hierarchical job's workers below `aggregator`, in name order;
    none when the workers share one switch (it sums them all)."""
    leaves = sorted(set(sources) - {aggregator}, key=_natural)
    if not leaves:
        return []
    if aggregator in sources:
        raise ControllerError(f"job {spec.job_id}: hierarchical, but some workers are cabled to {aggregator}, "
                              f"which sums the leaves; put them under a leaf or make the job flat")
    far = [leaf for leaf in leaves if routes.hops(leaf, aggregator) != 1]
    if far:
        raise ControllerError(f"job {spec.job_id}: hierarchical, but {', '.join(far)} are not one hop "
                              f"from {aggregator}, which sums the leaves; make the job flat")
    if len(spec.workers) + len(leaves) > MAX_WORKERS:
        raise ControllerError(f"job {spec.job_id}: {len(spec.workers)} workers and {len(leaves)} leaves "
                              f"need more than {MAX_WORKERS} ids; make the job flat")
    return leaves


def _member(routes: _Routes, switch: str, other: str, member_id: int) -> Worker:
    """The switch `other` as a member of a job on `switch`: a leaf below it, or the switch
    above it, known to both by `member_id` and reached at the aggregator's address."""
    return Worker(member_id, other, routes.next_port(switch, other), AGG_MAC, AGG_IP)


def place_job(topo: Topology, hosts: list[str], allowed: set[str]) -> tuple[str, dict[str, int]] | None:
    """Where a job of `hosts` can be aggregated using only the `allowed` switches: the one
    closest to all the hosts' switches (the rule `jobs_on_switch` follows) such that every
    switch on the way to it is allowed too, as it must forward the job; and the port each of
    those switches forwards the job through. None when no allowed switch qualifies."""
    routes = _Routes(topo)
    sources = [topo.host_port(h)[0] for h in hosts]
    candidates = []
    for agg in allowed:
        hops = [routes.hops(s, agg) for s in sources]
        if None in hops:
            continue
        path = [s for s in topo.switches if s != agg and routes.on_path(s, sources, agg)]
        if all(s in allowed for s in path):
            candidates.append((max(hops), _natural(agg), agg, path))
    if not candidates:
        return None
    _, _, agg, path = min(candidates)
    return agg, {s: routes.next_port(s, agg) for s in path}


def worker_ports(topo: Topology, switch: str, hosts: list[str]) -> list[int]:
    """The port of `switch` towards each host."""
    routes = _Routes(topo)
    return [routes.port_to_host(switch, h) for h in hosts]


def forwarding_entries(topo: Topology, switch: str) -> tuple[list[TableEntry], list[MulticastGroup]]:
    """l2_forward for every host MAC (and broadcast to the flood group); ipv4_lpm /32
    routes only towards hosts of subnets this switch has no host in (leaf-spine)."""
    routes = _Routes(topo)
    entries = [TableEntry(L2_FORWARD, "MyIngress.l2_forward_to",
                          {"port": routes.port_to_host(switch, h)}, {"hdr.ethernet.dstAddr": spec.mac})
               for h, spec in sorted(topo.hosts.items()) if routes.reaches(switch, h)]
    local = [h for h in topo.hosts if topo.host_port(h)[0] == switch]
    local_nets = {ipaddress.ip_interface(topo.hosts[h].ip).network for h in local}
    for h, spec in sorted(topo.hosts.items()):
        if h in local or not routes.reaches(switch, h):
            continue
        if ipaddress.ip_interface(spec.ip).network in local_nets:
            continue   # same subnet: hosts address it by MAC, l2_forward carries it
        entries.append(TableEntry(IPV4_LPM, "MyIngress.ipv4_forward",
                                  {"dstAddr": spec.mac, "port": routes.port_to_host(switch, h)},
                                  {"hdr.ipv4.dstAddr": [spec.address, 32]}))
    host_ports = sorted(topo.host_port(h)[1] for h in local)
    groups = []
    if host_ports:
        entries.append(TableEntry(L2_FORWARD, "MyIngress.l2_flood", {"mcast_grp": FLOOD_GROUP},
                                  {"hdr.ethernet.dstAddr": BROADCAST}))
        groups.append(MulticastGroup(FLOOD_GROUP, tuple(Replica(p, 0) for p in host_ports)))
    return entries, groups


def job_entries(job: Job) -> tuple[list[TableEntry], MulticastGroup]:
    """inc_job, one inc_worker and one inc_worker_addr per member, and the job's group."""
    entries = [TableEntry(INC_JOB, "MyIngress.set_job",
                          {"num_workers": len(job.workers) | (JOB_LEAF if job.uplink else 0),
                           "mcast_grp": job.mcast_group, "slot_base": job.slot_base, "num_slots": job.num_slots},
                          {"hdr.inc.job_id": job.job_id})]
    for w in job.members:
        entries.append(TableEntry(INC_WORKER, "MyIngress.admit_worker", {},
                                  {"hdr.inc.job_id": job.job_id, "hdr.inc.worker_id": w.worker_id,
                                   "standard_metadata.ingress_port": w.port}))
        entries.append(TableEntry(INC_WORKER_ADDR, "MyEgress.set_worker_addr",
                                  {"mac": w.mac, "ip": w.ip, "udp_port": w.udp_port},
                                  {"hdr.inc.job_id": job.job_id, "meta.dest_worker": w.worker_id}))
    group = MulticastGroup(job.mcast_group, tuple(Replica(w.port, w.worker_id) for w in job.members))
    return entries, group


def forward_entry(fwd: JobForward) -> TableEntry:
    return TableEntry(INC_JOB, "MyIngress.forward_to_aggregator", {"port": fwd.port},
                      {"hdr.inc.job_id": fwd.job_id})


class _Routes:
    """Shortest paths over the switch graph (BFS, lowest port first, so deterministic)."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.adj: dict[str, list[tuple[int, str]]] = {s: [] for s in topo.switches}
        for link in topo.links:
            if link.a.node in topo.switches and link.b.node in topo.switches:
                self.adj[link.a.node].append((link.a.port, link.b.node))
                self.adj[link.b.node].append((link.b.port, link.a.node))
        for ports in self.adj.values():
            ports.sort()
        self._dist = {s: self._bfs(s) for s in topo.switches}

    def _bfs(self, src: str) -> dict[str, tuple[int, int | None]]:
        """switch -> (hops from src, first port out of src)."""
        seen: dict[str, tuple[int, int | None]] = {src: (0, None)}
        todo = deque([src])
        while todo:
            s = todo.popleft()
            hops, first = seen[s]
            for port, nxt in self.adj[s]:
                if nxt not in seen:
                    seen[nxt] = (hops + 1, port if first is None else first)
                    todo.append(nxt)
        return seen

    def reaches(self, switch: str, host: str) -> bool:
        return self.topo.host_port(host)[0] in self._dist[switch]

    def hops(self, switch: str, target: str) -> int | None:
        return self._dist[switch][target][0] if target in self._dist[switch] else None

    def next_port(self, switch: str, target: str) -> int:
        return self._dist[switch][target][1]

    def port_to_host(self, switch: str, host: str) -> int:
        attached, port = self.topo.host_port(host)
        return port if attached == switch else self.next_port(switch, attached)

    def aggregator(self, switches: list[str]) -> str:
        """The switch closest to all of them (fewest hops to the farthest; then by name)."""
        candidates = [s for s in self.topo.switches if all(t in self._dist[s] for t in switches)]
        if not candidates:
            raise ControllerError(f"no switch reaches all of {sorted(set(switches))}")
        return min(candidates, key=lambda s: (max(self._dist[s][t][0] for t in switches),
                                              _natural(s)))

    def on_path(self, switch: str, sources: list[str], target: str) -> bool:
        """Whether packets from some source switch to `target` cross `switch`."""
        for src in set(sources):
            node = src
            while node != target:
                if node == switch:
                    return True
                port = self.next_port(node, target)
                node = next(n for p, n in self.adj[node] if p == port)
        return False


def _natural(name: str) -> tuple:
    """s2 before s10."""
    digits = "".join(c for c in name if c.isdigit())
    return (name.rstrip("0123456789"), int(digits) if digits else 0, name)
