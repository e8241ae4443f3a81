"""A running Mininet fabric built from a Topology: hosts in network namespaces wired by
veth pairs to P4Runtime switch nodes, with optional loss and duplication on host links
(nftables in each host's namespace, since this kernel has no netem).
"""
from __future__ import annotations

import logging
import re
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Iterator

from mininet.link import Link, TCLink
from mininet.net import Mininet
from mininet.node import Host
from mininet.topo import Topo

from topologies import machine
from topologies.nodes import BoundedHost, BoundedShell, NodeGone
from topologies.procs import Recorded, end_child, record, recorded
from topologies.spec import Topology, TopologyError
from topologies.switches import switch_class

log = logging.getLogger(__name__)

TOPOLOGY_FILE = "topology.json"
IMPAIR_TABLE = "p4inc_impair"
_NFT_COUNTER = re.compile(r"counter packets (\d+) bytes \d+ (drop|dup|meta priority)\b")
_COUNT_NAMES = {"drop": "drop", "dup": "dup", "meta priority": "reorder"}
# Reordering: the egress rule marks a packet for HTB class 1:20, a slow lane (200 kb/s: one
# 186-byte INC packet per 7.4 ms, queued behind the lane's earlier ones) that later packets
# in the fast lane 1:10 overtake. netem would do this; this kernel has no netem.
_SLOW_LANE = "1:20"
_LANES = ("qdisc replace dev {intf} root handle 1: htb default 10 r2q 100000",
          "class add dev {intf} parent 1: classid 1:10 htb rate 10gbit",
          "class add dev {intf} parent 1: classid " + _SLOW_LANE + " htb rate 200kbit burst 200 cburst 200 quantum 1500")


class FabricError(RuntimeError):
    """The fabric could not be built or configured; the message says which step."""


@dataclass(frozen=True)
class Impairment:
    """Random loss on every host link, both directions; duplication and reordering host -> switch;
    random loss on every link between two switches, both directions (`switch_loss_pct`). A host's
    segmented send (UDP_SEGMENT: the workers send a run of same-size datagrams as one) passes the
    host's rules as one packet, so its datagrams share one fate on the way to the switch."""
    loss_pct: float = 0.0
    duplicate_pct: float = 0.0
    reorder_pct: float = 0.0
    switch_loss_pct: float = 0.0

    def __post_init__(self) -> None:
        for name, pct in (("loss", self.loss_pct), ("duplicate", self.duplicate_pct),
                          ("reorder", self.reorder_pct), ("switch link loss", self.switch_loss_pct)):
            if not 0.0 <= pct < 100.0:
                raise FabricError(f"{name} must be a percentage in [0, 100), not {pct}")

    def nft_ruleset(self, intf: str) -> str:
        """An nftables netdev table on `intf`; it sees raw-socket frames too, unlike iptables."""
        # numgen draws 0..9999 per packet: percentages to 0.01 %.
        def below(pct: float) -> str:
            return f"numgen random mod 10000 < {round(pct * 100)}"
        egress = [f"{below(self.loss_pct)} counter drop"] if self.loss_pct else []
        egress += [f'{below(self.duplicate_pct)} counter dup to "{intf}"'] if self.duplicate_pct else []
        egress += [f"{below(self.reorder_pct)} counter meta priority set {_SLOW_LANE}"] if self.reorder_pct else []
        ingress = [f"{below(self.loss_pct)} counter drop"] if self.loss_pct else []
        lines = [f"table netdev {IMPAIR_TABLE} {{"]
        for hook, rules in (("egress", egress), ("ingress", ingress)):
            lines += [f"  chain {hook} {{", f'    type filter hook {hook} device "{intf}" priority 0;',
                      *(f"    {rule}" for rule in rules), "  }"]
        return "\n".join(lines + ["}", ""])

    def switch_link_ruleset(self, intf: str) -> str:
        """A switch port's table (in the root namespace, where switch ports live): loss on
        departure, so the tables at both ends of a link cover both directions. Not on arrival:
        the switch's packet socket (ETH_P_ALL) takes its copy of an arriving frame before any
        ingress hook runs, so an ingress drop would count frames the switch still gets."""
        return "\n".join([f"table netdev {switch_table(intf)} {{", "  chain egress {",
                          f'    type filter hook egress device "{intf}" priority 0;',
                          f"    numgen random mod 10000 < {round(self.switch_loss_pct * 100)} counter drop",
                          "  }", "}", ""])


def switch_table(intf: str) -> str:
    """The nftables table of a switch port's impairment (table names take no '-')."""
    return f"{IMPAIR_TABLE}_{intf.replace('-', '_')}"


@dataclass(frozen=True)
class FabricOptions:
    target: str = "p4sim"
    build_dir: Path = Path("build")
    pcap: bool = False
    log_console: bool = False
    impairment: Impairment | None = None
    slow: str | None = None         # p4sim's slow-target preset: as slow as BMv2 (bmv2), or a tenth

    @property
    def log_dir(self) -> Path:
        return self.build_dir / "logs"

    @property
    def pcap_dir(self) -> Path | None:
        return self.build_dir / "pcaps" if self.pcap else None

    @property
    def run_dir(self) -> Path:
        return self.build_dir / "run"

    @property
    def topology_path(self) -> Path:
        return self.build_dir / TOPOLOGY_FILE


@dataclass
class Fabric:
    """Builds and starts the network; `stop()` (or leaving the `with`) ends everything it started."""
    topo: Topology
    options: FabricOptions = field(default_factory=FabricOptions)
    net: Mininet | None = None
    _impairment: Impairment | None = None
    _lock: IO[str] | None = None
    _started: float = 0.0
    left_behind: list[str] = field(default_factory=list)    # processes and veths still there at stop()
    _children: list[tuple[subprocess.Popen, Recorded]] = field(default_factory=list)

    def __enter__(self) -> Fabric:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Write the topology file, create hosts and links, start switches, configure hosts."""
        try:
            self._lock = machine.take_slot(self.options.build_dir)
        except machine.SlotError as e:
            raise FabricError(str(e)) from None
        self._started = time.time()
        # The controller reads the target from here: it decides how registers are reached.
        replace(self.topo, target=self.options.target).dump(self.options.topology_path)
        cls = switch_class(self.options.target)
        self.net = Mininet(topo=_MininetTopo(self.topo, self.options), host=BoundedHost, switch=cls,
                           controller=None, autoSetMacs=False, build=False)
        try:
            self.net.build()
        except Exception as e:  # Mininet raises bare Exceptions, e.g. for an existing veth name
            raise FabricError(f"cannot build the network: {e} (is another fabric still up? make stop)") from None
        for node in self.net.hosts + self.net.switches:
            record(self.options.run_dir, f"shell-{node.name}", node.pid, f"mininet:{node.name}")
        self._quiet_interfaces()
        self._set_mtu()
        self.net.start()
        if self.options.impairment:
            self.impair(self.options.impairment)

    def stop(self) -> None:
        with _uninterrupted():
            self._stop()

    def _stop(self) -> None:
        # Our own children are stopped through Popen, not by pid and marker: one started an
        # instant ago may not have exec'd its command line yet.
        for proc, rec in self._children:
            if proc.poll() is None:
                log.info("stopping %s (pid %d)", rec.marker, proc.pid)
            end_child(proc)
            rec.path.unlink(missing_ok=True)
        self._children.clear()
        try:
            if self._impairment is not None and self._impairment.switch_loss_pct:
                unimpair_switch_links(self.topo)
            if self.net is not None:
                # Mininet would wait forever on a dead shell; without one, its commands are skipped.
                for node in self._nodes():
                    if node.shell is not None and node.shell_ended() is not None:
                        node.terminate()
                self.net.stop()
        finally:
            if self.net is not None:
                for node in self.net.hosts + self.net.switches:
                    (self.options.run_dir / f"shell-{node.name}.pid").unlink(missing_ok=True)
                self.net = None
            if self._lock is not None:
                # Looked for while the lock is held: once it is released, another fabric on this
                # machine may bring up interfaces of the same names.
                self.left_behind = leftovers(self.options.build_dir, self.topo)
                self._lock.close()
                self._lock = None

    def host(self, name: str) -> Host:
        if self.net is None:
            raise FabricError("the fabric is not running")
        return self.net[name]

    def check(self) -> None:
        """Raise FabricError if part of the fabric is gone (a shell, a switch target, an
        interface), naming what and who removed it, as far as the machine's records say."""
        if self.net is None:
            raise FabricError("the fabric is not running")
        gone = [f"{node.name}'s shell ({ended})" for node in self._nodes() if (ended := node.shell_ended())]
        gone += [f"{sw.name}'s {sw.target} (exit {sw.proc.returncode})" for sw in self.net.switches
                 if sw.proc is not None and sw.proc.poll() is not None]
        missing = [name for name in self.topo.switch_intfs() if not Path("/sys/class/net", name).exists()]
        if missing:
            gone.append(f"interface{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
        if gone:
            raise FabricError(f"the fabric of {self.options.build_dir} is gone: {'; '.join(gone)} ended or "
                              f"removed; {machine.who_tore_down(self.options.build_dir, self._started)}")

    @contextmanager
    def _alive(self) -> Iterator[None]:
        """Turn a node's dead shell or stuck command into a FabricError that says what is gone."""
        try:
            yield
        except NodeGone as e:
            self.check()
            raise FabricError(str(e)) from None

    def _nodes(self) -> list[BoundedShell]:
        return self.net.hosts + self.net.switches

    def run_host_commands(self) -> None:
        """Run each host's `commands` from the topology, in its namespace; stop at the first failure."""
        for spec in self.topo.hosts.values():
            for command in spec.commands:
                self.sh(spec.name, command)

    def sh(self, host: str, command: str) -> str:
        """Run a shell command in a host; return its output, raise FabricError if it fails."""
        with self._alive():
            out = self.host(host).cmd(f"{command}; echo __rc=$?")
        text, _, rc = out.rstrip().rpartition("__rc=")
        if rc.strip() != "0":
            raise FabricError(f"{host}: `{command}` failed (exit {rc.strip()}): {text.strip()}")
        return text

    def popen(self, host: str, args: list[str], **kwargs) -> subprocess.Popen:
        """Start a process in a host's namespace; `stop()` ends it if it is still running."""
        self.check()        # a dead host has no namespace to start it in
        proc = self.host(host).popen(args, **kwargs)
        rec = record(self.options.run_dir, f"{host}-{proc.pid}", proc.pid, " ".join(args))
        self._children.append((proc, rec))
        return proc

    def _quiet_interfaces(self) -> None:
        """Offloads off (veths fill checksums lazily) and IPv6 off (no stray RS/MLD frames)."""
        with self._alive():
            self._quiet_nodes()

    def _quiet_nodes(self) -> None:
        for node in self.net.hosts:
            node.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 "
                     "net.ipv6.conf.lo.disable_ipv6=1")
        for node in self.net.hosts + self.net.switches:
            for intf in node.intfList():
                if intf.name == "lo":
                    continue
                node.cmd(f"ethtool -K {intf.name} rx off tx off sg off >/dev/null 2>&1")
                if node in self.net.switches:
                    node.cmd(f"sysctl -qw net.ipv6.conf.{intf.name}.disable_ipv6=1")

    def _set_mtu(self) -> None:
        """Every veth, host end and switch end, carries the topology's MTU (jumbo frames: 9000)."""
        for node in self.net.hosts + self.net.switches:
            for intf in node.intfList():
                if intf.name != "lo":
                    out = node.cmd(f"ip link set dev {intf.name} mtu {self.topo.mtu} 2>&1; echo __rc=$?")
                    if not out.rstrip().endswith("__rc=0"):
                        raise FabricError(f"{node.name}: cannot set MTU {self.topo.mtu} on {intf.name}: "
                                          f"{out.rpartition('__rc=')[0].strip()}")

    def impair(self, impairment: Impairment | None) -> None:
        """Replace the loss/duplication/reordering rules on every host link and the loss rules
        on every link between switches (None: none)."""
        with self._alive():
            self._impair(impairment)

    def _impair(self, impairment: Impairment | None) -> None:
        had_lanes = self._impairment is not None and self._impairment.reorder_pct > 0
        had_switch_loss = self._impairment is not None and self._impairment.switch_loss_pct > 0
        self._impairment = impairment
        for spec in self.topo.hosts.values():
            host = self.host(spec.name)
            host.cmd(f"nft delete table netdev {IMPAIR_TABLE} 2>/dev/null")
            if had_lanes:
                host.cmd(f"tc qdisc del dev {spec.intf} root")
            if impairment is None:
                continue
            if impairment.reorder_pct:
                for line in _LANES:
                    self.sh(spec.name, "tc " + line.format(intf=spec.intf))
            proc = host.popen(["nft", "-f", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
            out, _ = proc.communicate(impairment.nft_ruleset(spec.intf))
            if proc.returncode != 0:
                raise FabricError(f"{spec.name}: cannot set loss/duplication on {spec.intf} with nft: {out.strip()}")
        if had_switch_loss:
            unimpair_switch_links(self.topo)
        if impairment is not None and impairment.switch_loss_pct:
            for intf in self.topo.switch_link_intfs():
                done = subprocess.run(["nft", "-f", "-"], input=impairment.switch_link_ruleset(intf), text=True,
                                      capture_output=True, check=False)
                if done.returncode != 0:
                    raise FabricError(f"cannot set loss on {intf} with nft: {done.stderr.strip()}")

    def impairment_counts(self) -> dict[str, int]:
        """Packets the impairment rules dropped, duplicated and sent down the slow lane so far."""
        counts = dict.fromkeys(_COUNT_NAMES.values(), 0)
        for spec in self.topo.hosts.values():
            with self._alive():
                rules = self.host(spec.name).cmd(f"nft list table netdev {IMPAIR_TABLE} 2>/dev/null")
            for packets, verdict in _NFT_COUNTER.findall(rules):
                counts[_COUNT_NAMES[verdict]] += int(packets)
        counts["switch_link_drop"] = 0
        for intf in self.topo.switch_link_intfs():
            done = subprocess.run(["nft", "list", "table", "netdev", switch_table(intf)], text=True,
                                  capture_output=True, check=False)
            counts["switch_link_drop"] += sum(int(n) for n, _ in _NFT_COUNTER.findall(done.stdout))
        return counts


def leftovers(build_dir: Path, topo: Topology | None = None) -> list[str]:
    """What is still alive or present from the fabric in `build_dir`, one line each."""
    found = [f"process {r.pid} ({r.marker})" for r in recorded(build_dir / "run") if r.alive()]
    found += [f"interface {name}" for name in present_intfs(build_dir, topo)]
    return found


def recorded_topology(build_dir: Path) -> Topology | None:
    """The topology the fabric in `build_dir` wrote, if any (None if absent or unreadable)."""
    path = build_dir / TOPOLOGY_FILE
    if not path.exists():
        return None
    try:
        return Topology.load(path)
    except TopologyError as e:
        log.warning("cannot tell which interfaces are ours: %s", e)
        return None


def present_intfs(build_dir: Path, topo: Topology | None = None) -> list[str]:
    """The switch-side veths of the fabric in `build_dir` (or of `topo`) that still exist."""
    topo = topo or recorded_topology(build_dir)
    if topo is None:
        return []
    return [name for name in topo.switch_intfs() if Path("/sys/class/net", name).exists()]


def unimpair_switch_links(topo: Topology) -> None:
    """Delete the loss tables of the topology's switch ports, where there are any."""
    for intf in topo.switch_link_intfs():
        subprocess.run(["nft", "delete", "table", "netdev", switch_table(intf)], capture_output=True, check=False)


@contextmanager
def _uninterrupted() -> Iterator[None]:
    """A second Ctrl-C while stopping must not leave half a fabric behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _MininetTopo(Topo):
    """Our Topology in Mininet's terms: a switch's port N is `sN-ethN`, a host's link is its eth0."""

    def __init__(self, topo: Topology, options: FabricOptions) -> None:
        self.spec, self.options = topo, options
        super().__init__()

    def build(self) -> None:
        opts = self.options
        for h in self.spec.hosts.values():
            self.addHost(h.name, ip=h.ip, mac=h.mac)
        for s in self.spec.switches.values():
            self.addSwitch(s.name, grpc_addr=s.grpc_addr, device_id=s.device_id, thrift_port=s.thrift_port,
                           cpu_port=s.cpu_port, log_dir=opts.log_dir, run_dir=opts.run_dir,
                           pcap_dir=opts.pcap_dir, log_console=opts.log_console, slow=opts.slow)
        for link in self.spec.links:
            shaped = {"cls": TCLink, "delay": link.delay, "bw": link.bw} if link.delay or link.bw else {"cls": Link}
            self.addLink(link.a.node, link.b.node, port1=link.a.port or 0, port2=link.b.port or 0, **shaped)
