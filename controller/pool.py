"""The shared pool of aggregator slots, handed to jobs on request and given back: `SlotPool`
(which ranges of one switch are free), `JobPool` (a grant installs the job on every switch of
its tree over P4Runtime: the root, the leaves below it, the switches that pass it on; a
release removes it) and `PoolServer`, the small JSON-lines service hosts reach over TCP or a
Unix socket (docs/protocol.md, "The slot pool service").
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable

from topologies.spec import Topology

from protocol import MAX_WORKERS

from .allreduce import Job, JobForward, JobTree, candidate_trees, tree_forwards, tree_jobs
from .errors import ControllerError
from .install import install_job, install_job_forward, install_jobs, program_sizes, remove_job, remove_job_forward
from .switch import Switch

log = logging.getLogger(__name__)

# Why a request is refused, as the wire format names it.
NO_ROOM, UNREACHABLE, CANNOT_AGGREGATE, BAD_REQUEST = "no_room", "unreachable", "cannot_aggregate", "bad_request"
FIRST_JOB_ID = 100              # pool jobs get ids from here up, clear of a topology's own jobs
MAX_JOBS = 64                   # inc_job's size: every job, pool or topology, takes one entry
MAX_LINE = 64 * 1024            # longest request line the service reads


class PoolRefused(ControllerError):
    """A request the pool cannot grant; `reason` is one of the wire format's reasons."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class SlotPool:
    """Slot ranges of one switch's pool (slots `first .. first + capacity - 1`), first fit."""
    capacity: int
    first: int = 0
    taken: dict[int, tuple[int, int]] = field(default_factory=dict)    # job id -> (base, count)

    @property
    def free(self) -> int:
        return self.capacity - sum(n for _, n in self.taken.values())

    def allocate(self, job_id: int, count: int) -> int:
        """The base of `count` contiguous free slots, now the job's; PoolRefused(NO_ROOM) if none."""
        start = self.first
        for base, n in sorted(self.taken.values()):
            if base - start >= count:
                break
            start = base + n
        if start + count > self.first + self.capacity:
            raise PoolRefused(NO_ROOM, f"no room: {count} slots asked, {self.free} of {self.capacity} free"
                                       f"{' (not contiguous)' if self.free >= count else ''}")
        self.taken[job_id] = (start, count)
        return start

    def release(self, job_id: int) -> None:
        self.taken.pop(job_id, None)


@dataclass(frozen=True)
class Grant:
    """A job admitted from the pool: its id, the switch that sums it (its tree's root), its slot
    range there and the elements per packet (K) of the program that switch runs; `jobs` what
    each summing switch holds (the root's first, then the leaves'), `forwards` the switches
    passing it on."""
    job_id: int
    switch: str
    slot_base: int
    num_slots: int
    elements_per_packet: int
    tree: JobTree = field(repr=False)
    jobs: tuple[tuple[str, Job], ...] = field(repr=False)
    forwards: tuple[tuple[str, JobForward], ...] = field(default=(), repr=False)

    @property
    def job(self) -> Job:
        """What the root holds."""
        return self.jobs[0][1]

    @property
    def slot_bases(self) -> dict[str, int]:
        """Each summing switch's first slot of the job."""
        return {s: job.slot_base for s, job in self.jobs}


class JobPool:
    """Slots of the `switches` (connected, running allreduce.p4) for jobs that ask for them.

    Each switch offers `slots` slots (default: its whole pool) starting at `first_slot`;
    keep a topology's own jobs below `first_slot`. Thread-safe: one request at a time.
    """

    def __init__(self, topo: Topology, switches: Iterable[Switch], slots: int | None = None,
                 first_slot: int = 0, first_job_id: int = FIRST_JOB_ID) -> None:
        self.topo = topo
        self.switches = {sw.name: sw for sw in switches}
        self.pools: dict[str, SlotPool] = {}
        self.sizes = {name: program_sizes(sw.context.p4info) for name, sw in self.switches.items()}
        for name in self.switches:
            size = self.sizes[name].pool_size
            capacity = size - first_slot if slots is None else slots
            if not 0 < capacity <= size - first_slot:
                raise ControllerError(f"{name}: a pool of {capacity} slots from slot {first_slot} does not fit "
                                      f"its {size} slots")
            self.pools[name] = SlotPool(capacity, first_slot)
        self.first_job_id = first_job_id
        self.grants: dict[int, Grant] = {}
        self._by_ip = {spec.address: name for name, spec in topo.hosts.items()}
        self._lock = threading.Lock()

    def request(self, workers: list[tuple[str, int]], num_slots: int, hierarchical: bool = True) -> Grant:
        """Admit a job of these workers ((ip, udp_port) in worker-id order) with `num_slots`
        slots on every switch that sums it (on two levels where its workers sit under several
        switches, unless not `hierarchical`); PoolRefused says why not."""
        if not 1 <= len(workers) <= MAX_WORKERS:
            raise PoolRefused(BAD_REQUEST, f"a job has 1..{MAX_WORKERS} workers, not {len(workers)}")
        if not 1 <= num_slots:
            raise PoolRefused(BAD_REQUEST, f"a job needs at least one slot, not {num_slots}")
        hosts = []
        for ip, _ in workers:
            if ip not in self._by_ip:
                raise PoolRefused(CANNOT_AGGREGATE, f"no host has IP {ip} in the topology: no switch of "
                                                    f"this pool aggregates for it")
            hosts.append(self._by_ip[ip])
        with self._lock:
            job_id = self._free_job_id()
            trees = candidate_trees(self.topo, job_id, hosts, set(self.switches), hierarchical)
            if not trees:
                under = ", ".join(f"{h} (under {self.topo.host_port(h)[0]})" for h in hosts)
                raise PoolRefused(CANNOT_AGGREGATE, f"no switch of this pool ({', '.join(sorted(self.switches))}) "
                                                    f"can aggregate for workers {under}")
            # Several roots qualify (spines): the one with the most free slots, so jobs spread.
            trees.sort(key=lambda t: -self.pools[t.root].free)
            tree, bases = self._allocate(trees, job_id, num_slots)
            jobs = tree_jobs(self.topo, tree, bases, num_slots, {s: self.sizes[s].pool_size for s in bases},
                             workers)
            grant = Grant(job_id, tree.root, bases[tree.root], num_slots, self.sizes[tree.root].elements_per_packet,
                          tree, tuple(jobs.items()), tuple(tree_forwards(tree)))
            installs = [(s, install_job_forward, fwd) for s, fwd in grant.forwards]
            installs += [(s, install_job, job) for s, job in grant.jobs]
            for s, install, what in installs:
                try:
                    install(self.switches[s], what)
                except ControllerError as e:
                    self._free(grant)
                    self._remove(grant)
                    raise PoolRefused(UNREACHABLE, f"{s}: cannot install job {job_id}: {e}") from None
            self.grants[job_id] = grant
            log.info("pool: job %d granted slots %s (root %s: %d of %d free)", job_id,
                     ", ".join(f"{base}..{base + num_slots - 1} of {s}" for s, base in bases.items()),
                     tree.root, self.pools[tree.root].free, self.pools[tree.root].capacity)
            return grant

    def release(self, job_id: int) -> None:
        """Remove the job from its switches and give its slots back (a job not held: nothing)."""
        with self._lock:
            grant = self.grants.pop(job_id, None)
            if grant is None:
                return
            self._free(grant)
            self._remove(grant)
            log.info("pool: job %d released its %d slots of %s", job_id, grant.num_slots,
                     ", ".join(s for s, _ in grant.jobs))

    def reinstall(self, sw: Switch) -> None:
        """Install every granted job's entries on `sw` again: a restarted switch came back with
        the topology's state only (`watch`). Its slots start cleared; the workers send again
        what it lost, so calls in flight finish on the switch if it is back in time."""
        with self._lock:
            jobs = [job for g in self.grants.values() for s, job in g.jobs if s == sw.name]
            forwards = [fwd for g in self.grants.values() for s, fwd in g.forwards if s == sw.name]
            if jobs or forwards:
                install_jobs(sw, jobs, forwards)
                log.info("pool: %s: jobs %s reinstalled", sw.name,
                         " ".join(str(j) for j in sorted({j.job_id for j in jobs} | {f.job_id for f in forwards})))

    def _allocate(self, trees: list[JobTree], job_id: int, num_slots: int) -> tuple[JobTree, dict[str, int]]:
        """The first tree with `num_slots` free on every switch that sums it, and the slot base
        each gives the job; PoolRefused(NO_ROOM) naming the full switch if none has room."""
        refusal = None
        for tree in trees:
            bases: dict[str, int] = {}
            try:
                for s in tree.summing:
                    bases[s] = self.pools[s].allocate(job_id, num_slots)
                return tree, bases
            except PoolRefused as e:
                refusal = refusal or PoolRefused(NO_ROOM, f"{s}: {e}")
                for taken in bases:
                    self.pools[taken].release(job_id)
        raise refusal

    def _free(self, grant: Grant) -> None:
        for s, _ in grant.jobs:
            self.pools[s].release(grant.job_id)

    def close(self) -> None:
        for job_id in list(self.grants):
            self.release(job_id)

    def _free_job_id(self) -> int:
        used = set(self.grants) | {j.job_id for j in self.topo.jobs}
        if len(used) >= MAX_JOBS:
            raise PoolRefused(NO_ROOM, f"no room: the switches hold {MAX_JOBS} jobs, their most")
        job_id = self.first_job_id
        while job_id in used:
            job_id += 1
        return job_id

    def _remove(self, grant: Grant) -> None:
        """Best effort: a switch that is gone has lost the job's entries anyway."""
        for s, job in reversed(grant.jobs):       # the leaves before the root
            try:
                remove_job(self.switches[s], job)
            except ControllerError as e:
                log.warning("pool: job %d: could not remove its entries from %s: %s", grant.job_id, s, e)
        for s, fwd in grant.forwards:
            try:
                remove_job_forward(self.switches[s], fwd)
            except ControllerError as e:
                log.warning("pool: job %d: could not remove its forward from %s: %s", grant.job_id, s, e)


class PoolServer:
    """The pool's request service at `address` ("HOST:PORT", or "unix:PATH"): one JSON object
    per line each way. A job holds its slots as long as the connection that asked for them
    stays open (or until it releases them), so a job that dies gives them back."""

    def __init__(self, pool: JobPool, address: str) -> None:
        self.pool = pool
        self._listener = _listen(address)
        self.address = (f"unix:{self._listener.getsockname()}" if self._listener.family == socket.AF_UNIX
                        else "%s:%d" % self._listener.getsockname()[:2])
        self._stop = threading.Event()
        self._conns: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._accepter = threading.Thread(target=self._accept, name="pool-accept", daemon=True)
        self._accepter.start()
        log.info("pool: serving slot requests at %s", self.address)

    def close(self) -> None:
        self._stop.set()
        self._accepter.join()
        with self._lock:
            for conn in self._conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)     # ends its reader's readline
                except OSError:
                    pass
            threads = list(self._threads)
        for t in threads:
            t.join()
        self._listener.close()
        if self._listener.family == socket.AF_UNIX:
            _unlink(self.address[len("unix:"):])

    def __enter__(self) -> PoolServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            t = threading.Thread(target=self._serve, args=(conn,), name="pool-conn", daemon=True)
            with self._lock:
                self._conns.add(conn)
                self._threads = [x for x in self._threads if x.is_alive()] + [t]
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        held: set[int] = set()
        try:
            with conn, conn.makefile("rb") as lines:
                for line in iter(lambda: lines.readline(MAX_LINE), b""):
                    reply = self._answer(line, held)
                    conn.sendall((json.dumps(reply) + "\n").encode())
        except OSError:
            pass          # the client went away: release below
        finally:
            with self._lock:
                self._conns.discard(conn)
            for job_id in held:
                self.pool.release(job_id)

    def _answer(self, line: bytes, held: set[int]) -> dict[str, Any]:
        try:
            message = json.loads(line)
            op = message["op"]
            if op == "request":
                workers = [(str(ip), int(port)) for ip, port in message["workers"]]
                hierarchical = message.get("hierarchical", True)
                if not isinstance(hierarchical, bool):
                    raise PoolRefused(BAD_REQUEST, f"hierarchical is true or false, not {hierarchical!r}")
                grant = self.pool.request(workers, int(message["slots"]), hierarchical)
                held.add(grant.job_id)
                return {"ok": True, "job_id": grant.job_id, "switch": grant.switch,
                        "slot_base": grant.slot_base, "num_slots": grant.num_slots,
                        "elements_per_packet": grant.elements_per_packet, "slot_bases": grant.slot_bases}
            if op == "release":
                job_id = int(message["job_id"])
                if job_id not in held:
                    raise PoolRefused(BAD_REQUEST, f"this connection holds no job {job_id}")
                held.discard(job_id)
                self.pool.release(job_id)
                return {"ok": True}
            raise PoolRefused(BAD_REQUEST, f"unknown op {op!r} (request or release)")
        except PoolRefused as e:
            log.info("pool: refused (%s): %s", e.reason, e)
            return {"ok": False, "reason": e.reason, "error": str(e)}
        except ControllerError as e:
            return {"ok": False, "reason": UNREACHABLE, "error": str(e)}
        except (ValueError, KeyError, TypeError) as e:
            return {"ok": False, "reason": BAD_REQUEST,
                    "error": f"malformed request (docs/protocol.md, the slot pool service): {e!r}"}


def _listen(address: str) -> socket.socket:
    try:
        if address.startswith("unix:"):
            path = address[len("unix:"):]
            _unlink(path)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)
        else:
            host, _, port = address.rpartition(":")
            s = socket.create_server((host or "0.0.0.0", int(port)))
    except (OSError, ValueError) as e:
        raise ControllerError(f"pool service cannot listen at {address!r} (HOST:PORT or unix:PATH): {e}") from None
    s.listen()
    return s


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
