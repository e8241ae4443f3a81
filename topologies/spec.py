"""The topology description: hosts, switches, links and AllReduce jobs, as JSON.

`star`, `leaf_spine` and `three_tier` build it; `Topology.load`/`dump` read and write the JSON file
that the fabric runner writes and the controller reads (the P4 tutorials' format).
"""
from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

CPU_PORT = 510
GRPC_BASE_PORT = 50051
THRIFT_BASE_PORT = 9090
MAX_STAR_HOSTS = 8
DEFAULT_MTU = 1500               # bytes of IPv4 packet every link carries, as `ip link` sets it
MTU_RANGE = (576, 65535)         # IPv4's minimum, veth's maximum
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_SWITCH_PORT = re.compile(r"^(?P<node>[A-Za-z_][\w]*)-p(?P<port>[1-9]\d*)$")
_NODE = re.compile(r"^[A-Za-z_]\w*$")


class TopologyError(ValueError):
    """A topology description that cannot be built; the message says what and where."""


@dataclass(frozen=True)
class HostSpec:
    name: str
    ip: str                        # with prefix length: "10.0.0.1/24"
    mac: str
    commands: tuple[str, ...] = ()

    @property
    def intf(self) -> str:
        """The host's only interface, as Mininet names it."""
        return f"{self.name}-eth0"

    @property
    def address(self) -> str:
        """The IP address without its prefix length."""
        return str(ipaddress.ip_interface(self.ip).ip)


@dataclass(frozen=True)
class SwitchSpec:
    name: str
    device_id: int
    grpc_addr: str                 # "127.0.0.1:50051"
    thrift_port: int
    cpu_port: int = CPU_PORT

    def intf(self, port: int) -> str:
        """The Mininet interface of a data-plane port (`s1-eth3` for port 3)."""
        return f"{self.name}-eth{port}"


@dataclass(frozen=True)
class Endpoint:
    """One end of a link: a host (`h1`, its eth0) or a switch port (`s1-p3`)."""
    node: str
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        if not isinstance(text, str):
            raise TopologyError(f"link endpoint {text!r} is not a string")
        m = _SWITCH_PORT.match(text)
        if m:
            return cls(m["node"], int(m["port"]))
        if _NODE.match(text):
            return cls(text)
        raise TopologyError(f"link endpoint {text!r} is neither a host ('h1') nor a switch port ('s1-p1')")

    def __str__(self) -> str:
        return self.node if self.port is None else f"{self.node}-p{self.port}"


@dataclass(frozen=True)
class LinkSpec:
    a: Endpoint
    b: Endpoint
    delay: str | None = None       # "1ms", as Mininet's TCLink takes it
    bw: float | None = None        # Mb/s

    def to_json(self) -> list:
        items: list = [str(self.a), str(self.b)]
        if self.delay is not None or self.bw is not None:
            items.append(self.delay if self.delay is not None else "0ms")
        if self.bw is not None:
            items.append(self.bw)
        return items


@dataclass(frozen=True)
class JobSpec:
    """An AllReduce job; a worker's id is its position in `workers`. A `hierarchical` job whose
    workers sit under several switches is summed on two levels: each of those switches sums
    its own workers and the switch above them all sums their partials (docs/protocol.md);
    otherwise the switch above them all sums every worker's packets, the others forward.
    `elements_per_packet` (K) is recorded by the controller when it installs the job, from the
    pipeline it pushed; the job's workers take it from here."""
    job_id: int
    workers: tuple[str, ...]
    hierarchical: bool = False
    elements_per_packet: int | None = None

    def to_json(self) -> dict:
        return {"job_id": self.job_id, "workers": list(self.workers),
                **({"hierarchical": True} if self.hierarchical else {}),
                **({"elements_per_packet": self.elements_per_packet} if self.elements_per_packet else {})}


@dataclass
class Topology:
    hosts: dict[str, HostSpec]
    switches: dict[str, SwitchSpec]
    links: list[LinkSpec]
    jobs: list[JobSpec] = field(default_factory=list)
    target: str | None = None       # what the running fabric's switches are (p4sim, bmv2), as it wrote it
    mtu: int = DEFAULT_MTU           # of every link, hosts' and switches' ends alike

    def __post_init__(self) -> None:
        _validate(self)

    def host_port(self, host: str) -> tuple[str, int]:
        """The switch and port a host is wired to."""
        for link in self.links:
            for mine, other in ((link.a, link.b), (link.b, link.a)):
                if mine.node == host and other.port is not None:
                    return other.node, other.port
        raise TopologyError(f"host {host} is not wired to a switch")

    def switch_intfs(self) -> list[str]:
        """Every switch-side interface name the fabric creates."""
        return sorted(self.switches[e.node].intf(e.port)
                      for link in self.links for e in (link.a, link.b) if e.port is not None)

    def switch_link_intfs(self) -> list[str]:
        """The interfaces at both ends of every link between two switches."""
        return sorted(self.switches[e.node].intf(e.port) for link in self.links
                      if link.a.node in self.switches and link.b.node in self.switches for e in (link.a, link.b))

    def to_dict(self) -> dict:
        return {
            "hosts": {h.name: {"ip": h.ip, "mac": h.mac, "commands": list(h.commands)}
                      for h in self.hosts.values()},
            "switches": {s.name: {"device_id": s.device_id, "grpc_addr": s.grpc_addr,
                                  "thrift_port": s.thrift_port, "cpu_port": s.cpu_port}
                         for s in self.switches.values()},
            "links": [link.to_json() for link in self.links],
            "jobs": [j.to_json() for j in self.jobs],
            **({"target": self.target} if self.target else {}),
            "mtu": self.mtu,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Topology:
        if not isinstance(data, dict):
            raise TopologyError("a topology is a JSON object with hosts, switches, links and jobs")
        try:
            hosts = {name: HostSpec(name, h["ip"], h["mac"].lower(), tuple(h.get("commands", ())))
                     for name, h in data.get("hosts", {}).items()}
            switches = {name: SwitchSpec(name, int(s["device_id"]), s["grpc_addr"],
                                         int(s.get("thrift_port", THRIFT_BASE_PORT + int(s["device_id"]))),
                                         int(s.get("cpu_port", CPU_PORT)))
                        for name, s in data.get("switches", {}).items()}
            links = [_link_from_json(item) for item in data.get("links", [])]
            jobs = [JobSpec(int(j["job_id"]), tuple(j["workers"]), _flag(j.get("hierarchical", False)),
                            _optional_int(j.get("elements_per_packet")))
                    for j in data.get("jobs", [])]
            mtu = int(data.get("mtu", DEFAULT_MTU))
        except TopologyError:
            raise
        except KeyError as e:
            raise TopologyError(f"missing key {e.args[0]!r} in topology") from None
        except (TypeError, ValueError, AttributeError) as e:
            raise TopologyError(f"malformed topology: {e}") from None
        target = data.get("target")
        if target is not None and not isinstance(target, str):
            raise TopologyError(f"malformed topology: target must be a name, not {target!r}")
        return cls(hosts, switches, links, jobs, target=target, mtu=mtu)

    def dump(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> Topology:
        try:
            data = json.loads(Path(path).read_text())
        except OSError as e:
            raise TopologyError(f"cannot read topology {path}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise TopologyError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
        return cls.from_dict(data)


def star(n_hosts: int, *, grpc_port: int = GRPC_BASE_PORT, thrift_port: int = THRIFT_BASE_PORT,
         device_id: int = 0, job_id: int = 1, mtu: int = DEFAULT_MTU) -> Topology:
    """N hosts on one switch: host hi is 10.0.0.i/24, 08:00:00:00:00:0i, on port i."""
    if not 2 <= n_hosts <= MAX_STAR_HOSTS:
        raise TopologyError(f"a star has 2 to {MAX_STAR_HOSTS} hosts, not {n_hosts}")
    names = [f"h{i}" for i in range(1, n_hosts + 1)]
    hosts = {name: HostSpec(name, f"10.0.0.{i}/24", f"08:00:00:00:00:{i:02x}")
             for i, name in enumerate(names, 1)}
    switch = SwitchSpec("s1", device_id, f"127.0.0.1:{grpc_port}", thrift_port)
    links = [LinkSpec(Endpoint(name), Endpoint("s1", i)) for i, name in enumerate(names, 1)]
    return Topology(hosts, {"s1": switch}, links, [JobSpec(job_id, tuple(names))], mtu=mtu)


def leaf_spine(leaves: int, spines: int, hosts_per_leaf: int, *, grpc_port: int = GRPC_BASE_PORT,
               thrift_port: int = THRIFT_BASE_PORT, job_id: int = 1, hierarchical: bool = True,
               mtu: int = DEFAULT_MTU) -> Topology:
    """Leaves s1..sL and spines after them; leaf l's host j is 10.0.l.j/24 behind gateway 10.0.l.254.
    One job of every host, summed by the leaves and the first spine (`hierarchical`), or by
    the first spine alone.

    A leaf's hosts are on ports 1..H and its uplink to spine k on port H+k; a spine's
    port l goes to leaf l. As in the P4 tutorials, each host routes through its leaf
    with a static ARP entry for the gateway MAC 08:00:00:00:0l:00.
    """
    if leaves < 1 or spines < 1 or hosts_per_leaf < 1 or leaves > 250 or hosts_per_leaf > 250:
        raise TopologyError("a leaf-spine needs 1..250 leaves, at least one spine and 1..250 hosts per leaf")
    hosts, links = _leaf_hosts(leaves, hosts_per_leaf)
    for k in range(1, spines + 1):
        spine = f"s{leaves + k}"
        for leaf in range(1, leaves + 1):
            links.append(LinkSpec(Endpoint(f"s{leaf}", hosts_per_leaf + k), Endpoint(spine, leaf)))
    switches = _switches(leaves + spines, grpc_port, thrift_port)
    return Topology(hosts, switches, links, [JobSpec(job_id, tuple(hosts), hierarchical)], mtu=mtu)


def three_tier(pods: int, leaves_per_pod: int, hosts_per_leaf: int, *, grpc_port: int = GRPC_BASE_PORT,
               thrift_port: int = THRIFT_BASE_PORT, job_id: int = 1, hierarchical: bool = True,
               mtu: int = DEFAULT_MTU) -> Topology:
    """Leaves, one aggregation switch per pod of leaves, and one core: leaves s1..sL (pod p holds
    leaves (p-1)*LP+1..p*LP), aggregation switches after them, the core last. Hosts as in
    `leaf_spine`. A leaf's hosts are on ports 1..H and its uplink on H+1; an aggregation
    switch's port k goes to its pod's k-th leaf and port LP+1 to the core; the core's port p to
    pod p. One job of every host, summed on three levels (`hierarchical`) or by the core alone."""
    if pods < 1 or leaves_per_pod < 1 or pods * leaves_per_pod > 250 or not 1 <= hosts_per_leaf <= 250:
        raise TopologyError("a three-tier fabric needs pods and leaves per pod (1..250 leaves in all) "
                            "and 1..250 hosts per leaf")
    n_leaves = pods * leaves_per_pod
    hosts, links = _leaf_hosts(n_leaves, hosts_per_leaf)
    core = f"s{n_leaves + pods + 1}"
    for pod in range(1, pods + 1):
        agg = f"s{n_leaves + pod}"
        for k in range(1, leaves_per_pod + 1):
            links.append(LinkSpec(Endpoint(f"s{(pod - 1) * leaves_per_pod + k}", hosts_per_leaf + 1), Endpoint(agg, k)))
        links.append(LinkSpec(Endpoint(agg, leaves_per_pod + 1), Endpoint(core, pod)))
    switches = _switches(n_leaves + pods + 1, grpc_port, thrift_port)
    return Topology(hosts, switches, links, [JobSpec(job_id, tuple(hosts), hierarchical)], mtu=mtu)


def _leaf_hosts(leaves: int, hosts_per_leaf: int) -> tuple[dict[str, HostSpec], list[LinkSpec]]:
    """Leaf l's host j is 10.0.l.j/24 on its port j, routing through the leaf's gateway."""
    hosts: dict[str, HostSpec] = {}
    links: list[LinkSpec] = []
    for leaf in range(1, leaves + 1):
        gw_ip, gw_mac = f"10.0.{leaf}.254", f"08:00:00:00:{leaf:02x}:00"
        for j in range(1, hosts_per_leaf + 1):
            name = f"h{(leaf - 1) * hosts_per_leaf + j}"
            intf = f"{name}-eth0"
            hosts[name] = HostSpec(name, f"10.0.{leaf}.{j}/24", f"08:00:00:00:{leaf:02x}:{j:02x}", (
                f"ip neigh replace {gw_ip} lladdr {gw_mac} dev {intf}",
                f"ip route replace default via {gw_ip} dev {intf}"))
            links.append(LinkSpec(Endpoint(name), Endpoint(f"s{leaf}", j)))
    return hosts, links


def _switches(count: int, grpc_port: int, thrift_port: int) -> dict[str, SwitchSpec]:
    """s1..sN on consecutive gRPC and Thrift ports from the bases."""
    return {f"s{i}": SwitchSpec(f"s{i}", i - 1, f"127.0.0.1:{grpc_port + i - 1}", thrift_port + i - 1)
            for i in range(1, count + 1)}


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise TopologyError(f"a job's hierarchical is true or false, not {value!r}")
    return value


def _optional_int(value: object) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TopologyError(f"a job's elements_per_packet is a whole number, not {value!r}")
    return value


def _link_from_json(item: object) -> LinkSpec:
    if not isinstance(item, list) or not 2 <= len(item) <= 4:
        raise TopologyError(f"link {item!r} is not [a, b] or [a, b, delay, bw]")
    delay = str(item[2]) if len(item) > 2 else None
    bw = float(item[3]) if len(item) > 3 else None
    return LinkSpec(Endpoint.parse(item[0]), Endpoint.parse(item[1]), delay, bw)


def _validate(topo: Topology) -> None:
    names = set(topo.hosts) | set(topo.switches)
    if len(names) != len(topo.hosts) + len(topo.switches):
        raise TopologyError(f"names used by both a host and a switch: {sorted(set(topo.hosts) & set(topo.switches))}")
    for h in topo.hosts.values():
        try:
            ipaddress.ip_interface(h.ip)
        except ValueError:
            raise TopologyError(f"host {h.name}: ip {h.ip!r} is not an address with prefix (10.0.0.1/24)") from None
        if "/" not in h.ip:
            raise TopologyError(f"host {h.name}: ip {h.ip!r} needs a prefix length (10.0.0.1/24)")
        if not _MAC.match(h.mac):
            raise TopologyError(f"host {h.name}: mac {h.mac!r} is not like 08:00:00:00:00:01")
    _unique("device_id", [s.device_id for s in topo.switches.values()])
    _unique("grpc_addr", [s.grpc_addr for s in topo.switches.values()])
    for s in topo.switches.values():
        host, _, port = s.grpc_addr.rpartition(":")
        if not host or not port.isdigit():
            raise TopologyError(f"switch {s.name}: grpc_addr {s.grpc_addr!r} is not HOST:PORT")
    used: list[str] = []
    for link in topo.links:
        for e in (link.a, link.b):
            if e.node in topo.hosts and e.port is not None:
                raise TopologyError(f"link endpoint {e}: a host has one interface, write {e.node!r}")
            if e.node in topo.switches and e.port is None:
                raise TopologyError(f"link endpoint {e}: a switch endpoint needs a port, like '{e.node}-p1'")
            if e.node not in names:
                raise TopologyError(f"link endpoint {e}: no host or switch named {e.node!r}")
            used.append(str(e))
    _unique("link endpoint", used)
    job_ids = []
    for job in topo.jobs:
        job_ids.append(job.job_id)
        if job.elements_per_packet is not None and job.elements_per_packet < 1:
            raise TopologyError(f"job {job.job_id}: elements_per_packet must be at least 1, not {job.elements_per_packet}")
        missing = [w for w in job.workers if w not in topo.hosts]
        if missing:
            raise TopologyError(f"job {job.job_id}: workers {missing} are not hosts")
        _unique(f"job {job.job_id} worker", list(job.workers))
    _unique("job_id", job_ids)
    if not MTU_RANGE[0] <= topo.mtu <= MTU_RANGE[1]:
        raise TopologyError(f"mtu {topo.mtu} is outside {MTU_RANGE[0]}..{MTU_RANGE[1]} bytes")


def _unique(what: str, values: list) -> None:
    seen = set()
    for v in values:
        if v in seen:
            raise TopologyError(f"{what} {v!r} is used twice")
        seen.add(v)
