"""Traffic for measuring and testing a switch's data plane over veths (traffic.c): veth pairs
whose far ends live in a network namespace, a batched generator and sink (sendmmsg/recvmmsg,
so they do not measure themselves), a one-frame round-trip timer, and a stub pipeline that
forwards by a port map. bench/dataplane.py and tests/p4sim/test_dataplane*.py use them (root).
"""
from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import time
from dataclasses import dataclass
from typing import Iterator

from .. import cbuild
from .c import HERE, INCLUDE_DIR

CDEF = """
typedef struct tg_result {
    uint64_t sent, received, mismatched, reordered;
    int64_t first_sent_ns, last_received_ns;
} tg_result;
typedef struct tg_sock tg_sock;
tg_sock *tg_open(const char *netns, const char *iface, int receive, int *err);
void tg_close(tg_sock *s);
int tg_recv(tg_sock *s, char *buf, uint32_t cap, int timeout_ms);
int tg_blast(tg_sock *tx, tg_sock *rx, const char *frame, uint32_t len, const char *expect, uint32_t expect_len,
             uint32_t seq_offset, uint64_t count, uint32_t window, int quiet_ms, tg_result *r);
int tg_replay(tg_sock **tx, uint32_t ntx, tg_sock **rx, uint32_t nrx, const char *data, const uint64_t *offsets,
              const uint32_t *lens, const uint8_t *via, uint64_t n, uint64_t expected, uint32_t chunk,
              uint32_t window, int quiet_ms, tg_result *r);
int tg_rtt(tg_sock *tx, tg_sock *rx, const char *frame, uint32_t len, uint32_t seq_offset, uint32_t count,
           int timeout_ms, int64_t *samples_ns);
typedef struct stub_pipeline {
    uint32_t out_port[16];
    uint32_t cpu_port;
    uint16_t cpu_ethertype;
    uint64_t processed;
} stub_pipeline;
int stub_process(void *pipeline, uint32_t port, const char *data, uint32_t len, void *out);
"""
STUB_DROP = 0xFFFFFFFF
RING_FRAME = 16 << 10      # traffic.c's: the biggest frame a TrafficSocket receives whole
SEQ_BYTES = 8
LINK_WAIT_S = 30.0


@functools.cache
def library() -> cbuild.Built:
    """traffic.c, built once; raises cbuild.BuildError."""
    return cbuild.build("p4sim-traffic", {"traffic.c": (HERE / "traffic.c").read_text()}, CDEF,
                        include_dirs=(INCLUDE_DIR,))


class StubPipeline:
    """A compiled pipeline without a program: port p forwards to `ports[p]` (missing: dropped);
    frames of EtherType `cpu_ethertype` go to `cpu_port`. `pipeline` is what
    CDataplane.set_pipeline takes; keep this object alive while a data plane uses it."""

    def __init__(self, ports: dict[int, int], cpu_port: int = 0, cpu_ethertype: int = 0) -> None:
        built = library()
        self._ffi = built.ffi
        self._ctx = built.ffi.new("stub_pipeline *")
        for p in range(16):
            self._ctx.out_port[p] = ports.get(p, STUB_DROP)
        self._ctx.cpu_port, self._ctx.cpu_ethertype = cpu_port, cpu_ethertype
        self.pipeline = (int(built.ffi.cast("uintptr_t", built.lib.stub_process)),
                         int(built.ffi.cast("uintptr_t", self._ctx)))

    @property
    def processed(self) -> int:
        return self._ctx.processed


@dataclass(frozen=True)
class Blast:
    """What came back of a burst: frames sent and received, received with other bytes than
    expected or out of order, and the time from the first sent to the last received."""
    sent: int
    received: int
    mismatched: int
    reordered: int
    seconds: float

    @property
    def pps(self) -> float:
        return self.received / self.seconds if self.seconds > 0 else 0.0


class TrafficSocket:
    """A raw socket on `iface` in namespace `netns` (None: this one); one that receives reads
    through a ring (PACKET_MMAP). Close it (or use it as a context manager)."""

    def __init__(self, iface: str, netns: str | None = None, receive: bool = True) -> None:
        built = library()
        self._ffi, self._lib = built.ffi, built.lib
        err = built.ffi.new("int *")
        self.handle = built.lib.tg_open(f"/run/netns/{netns}".encode() if netns else built.ffi.NULL,
                                        iface.encode(), int(receive), err)
        if self.handle == built.ffi.NULL:
            raise OSError(err[0], f"cannot open a raw socket on {iface}: {os.strerror(err[0])}")

    def receive(self, timeout_s: float = 1.0) -> bytes | None:
        """The next frame received within timeout_s, or None."""
        buf = self._ffi.new("char[]", RING_FRAME)
        n = self._lib.tg_recv(self.handle, buf, RING_FRAME, int(timeout_s * 1000))
        return self._ffi.buffer(buf, n)[:] if n else None

    def close(self) -> None:
        if self.handle is not None:
            self._lib.tg_close(self.handle)
            self.handle = None

    def __enter__(self) -> TrafficSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def blast(tx: TrafficSocket, rx: TrafficSocket, frame: bytes, count: int, expect: bytes | None = None,
          window: int = 256, quiet_s: float = 1.0) -> Blast:
    """Send `count` numbered copies of `frame` (the number in its last 8 bytes), at most `window`
    ahead of what comes back on rx, each checked against `expect` (default: `frame`) with the
    same number at the same offset from its start."""
    built = library()
    expect = frame if expect is None else expect
    r = built.ffi.new("tg_result *")
    seq_offset = len(frame) - SEQ_BYTES
    rc = built.lib.tg_blast(tx.handle, rx.handle, frame, len(frame), expect, len(expect), seq_offset, count, window,
                            int(quiet_s * 1000), r)
    if rc < 0:
        raise OSError(-rc, f"traffic failed: {os.strerror(-rc)}")
    seconds = (r.last_received_ns - r.first_sent_ns) / 1e9 if r.received else 0.0
    return Blast(r.sent, r.received, r.mismatched, r.reordered, seconds)


def replay(tx: list[TrafficSocket], rx: list[TrafficSocket], frames: list[tuple[int, bytes]], expected: int,
           chunk: int = 32, window: int = 64, quiet_s: float = 1.0) -> Blast:
    """Send `frames` ((index into tx, bytes), in order per socket; a chunk of up to `chunk` is
    sent socket by socket) at most `window` ahead of what comes back on any of `rx`, until
    `expected` frames came back. Counts only: `mismatched` and `reordered` are 0."""
    built = library()
    ffi = built.ffi
    data = b"".join(f for _, f in frames)
    offsets = ffi.new("uint64_t[]", len(frames))
    lens = ffi.new("uint32_t[]", [len(f) for _, f in frames])
    via = ffi.new("uint8_t[]", [i for i, _ in frames])
    at = 0
    for i, (_, f) in enumerate(frames):
        offsets[i] = at
        at += len(f)
    tx_handles = ffi.new("tg_sock *[]", [s.handle for s in tx])
    rx_handles = ffi.new("tg_sock *[]", [s.handle for s in rx])
    r = ffi.new("tg_result *")
    rc = built.lib.tg_replay(tx_handles, len(tx), rx_handles, len(rx), data, offsets, lens, via, len(frames), expected,
                             chunk, window, int(quiet_s * 1000), r)
    if rc < 0:
        raise OSError(-rc, f"replay failed: {os.strerror(-rc)}")
    seconds = (r.last_received_ns - r.first_sent_ns) / 1e9 if r.received else 0.0
    return Blast(r.sent, r.received, r.mismatched, r.reordered, seconds)


def round_trips(tx: TrafficSocket, rx: TrafficSocket, frame: bytes, count: int, timeout_s: float = 1.0) -> list[float]:
    """Seconds each of `count` frames sent one at a time took to come back (fewer if one did
    not come back within timeout_s)."""
    built = library()
    samples = built.ffi.new("int64_t[]", count)
    done = built.lib.tg_rtt(tx.handle, rx.handle, frame, len(frame), len(frame) - SEQ_BYTES, count,
                            int(timeout_s * 1000), samples)
    if done < 0:
        raise OSError(-done, f"round trip failed: {os.strerror(-done)}")
    return [samples[i] / 1e9 for i in range(done)]


@dataclass(frozen=True)
class VethLab:
    """Switch-side interfaces `switch[i]` in this namespace; `peer[i]` is the other end of
    each, in namespace `netns`."""
    netns: str
    switch: tuple[str, ...]
    peer: tuple[str, ...]

    def wait_until_links_pass(self, timeout_s: float = LINK_WAIT_S) -> None:
        """Block until every pair carries frames. Once the switch brings its side up, the
        peer's carrier comes on, but the kernel's linkwatch work (late on a busy machine) still
        has to replace the peer's "noop" qdisc, which drops what it sends."""
        deadline = time.monotonic() + timeout_s
        while True:
            shown = ([_run("ip", "-o", "link", "show", "dev", i) for i in self.switch]
                     + [_run("ip", "-n", self.netns, "-o", "link", "show", "dev", i) for i in self.peer])
            if all("state UP" in s and "qdisc noop" not in s for s in shown):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"veths not passing frames after {timeout_s:g} s: {shown}")
            time.sleep(0.05)


LAB_NETNS = "p4simdp"      # a veth lab's namespace: this and its tag


def lab_tag(pid: int | None = None) -> str:
    """The tag a process puts in its veth lab's names: its pid mod 100000 (so that a name fits
    the 15 characters of an interface's)."""
    return str((os.getpid() if pid is None else pid) % 100000)


def remove_stale_labs() -> list[str]:
    """Delete the namespaces (and with them the veth pairs) of labs whose process is gone, killed
    before veth_lab's cleanup ran: no running process has their tag. Returns their names."""
    live = {lab_tag(int(p)) for p in os.listdir("/proc") if p.isdigit()}
    stale = [name for line in _run("ip", "netns", "list").splitlines() if (name := line.split(" ")[0])
             .startswith(LAB_NETNS) and name[len(LAB_NETNS):].isdigit() and name[len(LAB_NETNS):] not in live]
    for name in stale:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return stale


@contextlib.contextmanager
def veth_lab(tag: str, pairs: int = 2, mtu: int | None = None) -> Iterator[VethLab]:
    """`pairs` veth pairs named after `tag` (lab_tag()), peers in namespace p4simdp<tag> and up,
    switch sides left down (the data plane must bring them up), IPv6 off (the only frames are the
    caller's); all removed on exit, and by remove_stale_labs if the process is killed first."""
    netns = f"{LAB_NETNS}{tag}"
    lab = VethLab(netns, tuple(f"p4s{chr(97 + i)}{tag}" for i in range(pairs)),
                  tuple(f"p4s{chr(97 + i)}{tag}p" for i in range(pairs)))
    _sh("ip", "netns", "add", netns)
    try:
        for side, peer in zip(lab.switch, lab.peer):
            _sh("ip", "link", "add", side, *(["mtu", str(mtu)] if mtu else []), "type", "veth", "peer", "name", peer,
                *(["mtu", str(mtu)] if mtu else []))
            _sh("ip", "link", "set", peer, "netns", netns)
            _sh("sysctl", "-q", f"net.ipv6.conf.{side}.disable_ipv6=1")
            _sh("ip", "netns", "exec", netns, "sysctl", "-q", f"net.ipv6.conf.{peer}.disable_ipv6=1")
            _sh("ip", "-n", netns, "link", "set", peer, "up")
        yield lab
    finally:
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)     # removes the pairs too
        for side in lab.switch:
            subprocess.run(["ip", "link", "del", side], capture_output=True)


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True).stdout
