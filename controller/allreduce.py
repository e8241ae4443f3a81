"""What `p4src/allreduce.p4` needs from its controller, planned from the topology alone
(no switch): forwarding (l2_forward, ipv4_lpm, the flood group) and jobs (inc_job, inc_worker,
inc_worker_addr, a multicast group, a slot range), where each job is aggregated and which
switches pass it on. `controller.install` brings a switch to the plan. Names follow
docs/protocol.md.
"""
from __future__ import annotations

import ipaddress
import logging
from collections import deque
from dataclasses import dataclass

from protocol import AGG_IP, AGG_MAC, INC_PORT, JOB_LEAF, MAX_WORKERS, UP_GROUP
from topologies.spec import Topology

from .entries import MulticastGroup, Replica, TableEntry
from .errors import ControllerError

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class JobTree:
    """Where one job is summed: `root` sums all its workers (flat) or the partials of the
    switches just below it (hierarchical). There every switch between the workers and `root`
    sums: a leaf the job's workers cabled to it, a middle tier the partials of the switches
    below it; `leaves` are all of those (in name order: switch k is member N + k of the switch
    above it, N the job's workers) and `parents` the switch above each. `forwards` are the
    switches that pass a flat job on towards `root`, with the port each uses. Planned without
    a switch."""
    job_id: int
    hosts: tuple[str, ...]
    root: str
    leaves: tuple[str, ...] = ()
    forwards: tuple[tuple[str, int], ...] = ()
    parents: tuple[tuple[str, str], ...] = ()

    @property
    def summing(self) -> tuple[str, ...]:
        """The switches that hold slots for the job: the root, then the leaves."""
        return (self.root, *self.leaves)

    @property
    def switches(self) -> tuple[str, ...]:
        """Every switch that holds something of the job."""
        return self.summing + tuple(s for s, _ in self.forwards)


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
        tree = topology_tree(topo, i, routes)
        if switch in tree.summing:
            jobs = tree_jobs(topo, tree, dict.fromkeys(tree.summing, i * share), share,
                             dict.fromkeys(tree.summing, pool), routes=routes)
            aggregated.append(jobs[switch])
        forwarded += [fwd for s, fwd in tree_forwards(tree) if s == switch]
    return aggregated, forwarded


def topology_tree(topo: Topology, index: int, routes: _Routes | None = None) -> JobTree:
    """The tree of the topology's job number `index`. Of the switches closest to all its
    workers' switches (several spines), job i takes the (i mod n)-th by name: the topology's
    jobs spread over the spines, and a restarted controller derives the same trees."""
    spec = topo.jobs[index]
    if not 1 <= len(spec.workers) <= MAX_WORKERS:
        raise ControllerError(f"job {spec.job_id}: {len(spec.workers)} workers; a job has 1..{MAX_WORKERS}")
    if not 0 <= JOB_GROUP_BASE + spec.job_id < UP_GROUP:
        raise ControllerError(f"job id {spec.job_id} is out of range (0..{UP_GROUP - 1 - JOB_GROUP_BASE})")
    routes = routes or _Routes(topo)
    roots = routes.closest([topo.host_port(w)[0] for w in spec.workers], set(topo.switches))
    if not roots:
        raise ControllerError(f"job {spec.job_id}: no switch reaches all of its workers' switches")
    return _tree(routes, spec.job_id, spec.workers, roots[index % len(roots)], spec.hierarchical)


def candidate_trees(topo: Topology, job_id: int, hosts: list[str], allowed: set[str],
                    hierarchical: bool = True) -> list[JobTree]:
    """The trees a job of `hosts` can have using only the `allowed` switches: rooted at each
    of the allowed switches closest to all the hosts' switches (the rule `topology_tree`
    follows) such that every switch on the way is allowed too, in name order. Summed on two
    levels where the workers sit under several switches and the tree's limits allow
    (`hierarchical`), else flat."""
    routes = _Routes(topo)
    sources = [topo.host_port(h)[0] for h in hosts]
    usable = {root for root in allowed
              if all(s in allowed for s in topo.switches if s != root and routes.on_path(s, sources, root))}
    trees = []
    for root in routes.closest(sources, usable):
        try:
            trees.append(_tree(routes, job_id, tuple(hosts), root, hierarchical))
        except ControllerError as e:
            log.info("job %d: %s; summed flat at %s", job_id, e, root)
            trees.append(_tree(routes, job_id, tuple(hosts), root, False))
    return trees


def tree_jobs(topo: Topology, tree: JobTree, slot_bases: dict[str, int], num_slots: int,
              pool_sizes: dict[str, int], addresses: list[tuple[str, int]] | None = None,
              routes: _Routes | None = None) -> dict[str, Job]:
    """The `Job` each summing switch of `tree` holds, with its slot base there, `num_slots`
    slots (the same on every level: packets carry the slot index within the job's range) and
    its program's slots per version; worker w receives results at `addresses[w]` (ip,
    UDP port; default: its host's address and INC_PORT)."""
    routes = routes or _Routes(topo)
    addresses = addresses or [(topo.hosts[h].address, INC_PORT) for h in tree.hosts]
    sources = [topo.host_port(h)[0] for h in tree.hosts]
    parents = dict(tree.parents)
    ids = {leaf: len(tree.hosts) + k for k, leaf in enumerate(tree.leaves)}
    jobs = {}
    for switch in tree.summing:
        below = tuple(_member(routes, switch, child, ids[child]) for child in tree.leaves if parents[child] == switch)
        cabled = tuple(Worker(w, h, routes.port_to_host(switch, h), topo.hosts[h].mac, *addresses[w])
                       for w, h in enumerate(tree.hosts) if sources[w] == switch or (switch == tree.root and not below))
        uplink = _member(routes, switch, parents[switch], ids[switch]) if switch in parents else None
        jobs[switch] = Job(tree.job_id, below or cabled, JOB_GROUP_BASE + tree.job_id, slot_bases[switch], num_slots,
                           pool_sizes[switch], uplink)
    return jobs


def tree_forwards(tree: JobTree) -> list[tuple[str, JobForward]]:
    """The `JobForward` of each switch that passes the job on."""
    return [(s, JobForward(tree.job_id, tree.root, port)) for s, port in tree.forwards]


def _tree(routes: _Routes, job_id: int, hosts: tuple[str, ...], root: str, hierarchical: bool) -> JobTree:
    sources = [routes.topo.host_port(h)[0] for h in hosts]
    parents = _parents(routes, job_id, len(hosts), sources, root) if hierarchical else {}
    leaves = tuple(sorted(parents, key=_natural))
    forwards = tuple((s, routes.next_port(s, root)) for s in sorted(routes.topo.switches, key=_natural)
                     if s != root and s not in parents and routes.on_path(s, sources, root))
    return JobTree(job_id, hosts, root, leaves, forwards, tuple((s, parents[s]) for s in leaves))


def _parents(routes: _Routes, job_id: int, n_workers: int, sources: list[str], root: str) -> dict[str, str]:
    """The switch above each switch that sums part of a hierarchical job below `root`: every
    switch on the workers' ways to it (a middle tier sums the partials of those below it);
    none when the workers share one switch (it sums them all)."""
    parents: dict[str, str] = {}
    for src in set(sources):
        node = src
        while node != root:
            parents[node] = routes.neighbour(node, routes.next_port(node, root))
            node = parents[node]
    mixed = sorted((s for s in set(parents.values()) | {root} if s in sources and parents), key=_natural)
    if mixed:
        raise ControllerError(f"job {job_id}: hierarchical, but some workers are cabled to {', '.join(mixed)}, "
                              f"which sum{'s' if len(mixed) == 1 else ''} the switches below; put them under "
                              f"a leaf or make the job flat")
    if n_workers + len(parents) > MAX_WORKERS:
        raise ControllerError(f"job {job_id}: {n_workers} workers and {len(parents)} switches below {root} "
                              f"need more than {MAX_WORKERS} ids; make the job flat")
    return parents


def _member(routes: _Routes, switch: str, other: str, member_id: int) -> Worker:
    """The switch `other` as a member of a job on `switch`: a leaf below it, or the switch
    above it, known to both by `member_id` and reached at the aggregator's address."""
    return Worker(member_id, other, routes.next_port(switch, other), AGG_MAC, AGG_IP)


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


def job_entries(job: Job) -> tuple[list[TableEntry], list[MulticastGroup]]:
    """inc_job, one inc_worker and one inc_worker_addr per member, and the job's groups: its
    members' (a leaf: its workers', and its uplink's alone in the group | UP_GROUP, so each
    direction replicates only what it sends)."""
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
    groups = [MulticastGroup(job.mcast_group, tuple(Replica(w.port, w.worker_id) for w in job.workers))]
    if job.uplink:
        groups.append(MulticastGroup(job.mcast_group | UP_GROUP, (Replica(job.uplink.port, job.uplink.worker_id),)))
    return entries, groups


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

    def closest(self, switches: list[str], among: set[str]) -> list[str]:
        """Those of `among` closest to all of `switches` (fewest hops to the farthest), by name."""
        reach = {s: max(self._dist[s][t][0] for t in switches) for s in among
                 if all(t in self._dist[s] for t in switches)}
        best = min(reach.values(), default=None)
        return sorted((s for s, hops in reach.items() if hops == best), key=_natural)

    def neighbour(self, switch: str, port: int) -> str:
        """The switch cabled to `switch`'s `port`."""
        return next(n for p, n in self.adj[switch] if p == port)

    def on_path(self, switch: str, sources: list[str], target: str) -> bool:
        """Whether packets from some source switch to `target` cross `switch`."""
        for src in set(sources):
            node = src
            while node != target:
                if node == switch:
                    return True
                node = self.neighbour(node, self.next_port(node, target))
        return False


def _natural(name: str) -> tuple:
    """s2 before s10."""
    digits = "".join(c for c in name if c.isdigit())
    return (name.rstrip("0123456789"), int(digits) if digits else 0, name)
