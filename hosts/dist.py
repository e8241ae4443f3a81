"""A torch.distributed-shaped API on numpy arrays over p4inc: `init_process_group`,
`all_reduce`, `reduce_scatter`, `all_gather`, `broadcast`, `barrier`, with rank and world
size from the variables torchrun and Open MPI set, so a worker script runs unchanged under
a launcher. Backends: "inc" (the switch sums), "ring" (host ring), "auto" (INC if the switch
answers at start-up, else the ring; and the ring from the call on which the switch stops
answering, that call redone whole: hosts/fallback.py; every fallback logged and counted).
With P4INC_POOL set, rank 0 first asks the controller's slot pool for the job's slots
(hosts/pool.py); a refusal (pool full, no switch can aggregate for these hosts, no service)
means the ring under "auto".

On "inc", and on "auto" while the switch answers, every collective is the switch's own
(hosts/agent.py, docs/protocol.md): the switch delivers reduce_scatter's parts to their
owners alone, broadcast and all_gather carry only the owners' data, barrier is one
header-only packet each. The ring (and "auto" to redo a call the switch did not finish,
hosts/fallback.py) builds them on its AllReduce: broadcast is an AllReduce where non-roots contribute zeros, all_gather an
AllReduce of each rank's array placed in its own disjoint slice, barrier a one-element
AllReduce. Broadcast and all_gather travel as int32 bit patterns on both backends (on the
ring x + 0 never overflows), so they are exact for any dtype.
The module-level functions act on one default group, as torch.distributed's do; the
`ProcessGroup` object carries all the state and can be used directly instead.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import logging
import math
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, TypeVar

import numpy as np

from hosts import numerics
from hosts.agent import IncError, IncTimeoutError, JobConfig, Worker
from hosts.fallback import FallbackAllReduce, FallbackEvent, ring_reduce
from hosts.engine import DEFAULT_SPIN, DEFAULT_SPIN_LARGE, ENGINES, spin_for
from hosts.inc import AGG_IP, INC_K, INC_PORT, check_elements_per_packet
from hosts.pool import Lease, PoolRefused, request_slots
from hosts.ring import RingConfig, RingWorker
from hosts.transport import UdpPeerTransport, UdpTransport

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKENDS = ("auto", "inc", "ring")
DEFAULT_JOB_ID = 1
RENDEZVOUS_TIMEOUT_S = 120.0


class DistError(RuntimeError):
    """The process group cannot be set up or used as asked; the message says why."""


class ReduceOp(enum.Enum):
    SUM = "sum"
    AVG = "avg"
    MIN = "min"
    MAX = "max"


@dataclass(frozen=True)
class LaunchEnv:
    """Who this process is, as a launcher describes it (torchrun, or mpirun with MASTER_ADDR)."""
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> LaunchEnv:
        """torchrun's RANK/WORLD_SIZE/LOCAL_RANK, else Open MPI's OMPI_COMM_WORLD_*, plus the
        rendezvous MASTER_ADDR/MASTER_PORT (export them through mpirun with -x).

        Under torchrun (TORCHELASTIC_RUN_ID is set) its agent's store holds MASTER_PORT, so the
        rendezvous takes MASTER_PORT + 1; P4INC_RENDEZVOUS_PORT overrides either."""
        env = os.environ if environ is None else environ

        def first(*names: str, default: str | None = None) -> str:
            for name in names:
                if env.get(name, "") != "":
                    return env[name]
            if default is None:
                raise DistError(f"{' or '.join(names)} is not set: start the worker with torchrun or mpirun, "
                                f"or export it")
            return default

        def number(*names: str, default: str | None = None) -> int:
            text = first(*names, default=default)
            try:
                return int(text)
            except ValueError:
                raise DistError(f"{names[0]} must be an integer, not {text!r}") from None

        launched = cls(rank=number("RANK", "OMPI_COMM_WORLD_RANK"),
                       world_size=number("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
                       local_rank=number("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", default="0"),
                       master_addr=first("MASTER_ADDR"), master_port=number("MASTER_PORT"))
        if env.get("P4INC_RENDEZVOUS_PORT"):
            launched = dataclasses.replace(launched, master_port=number("P4INC_RENDEZVOUS_PORT"))
        elif env.get("TORCHELASTIC_RUN_ID"):
            launched = dataclasses.replace(launched, master_port=launched.master_port + 1)
        if not 0 <= launched.rank < launched.world_size:
            raise DistError(f"rank {launched.rank} is not in 0..{launched.world_size - 1} (WORLD_SIZE)")
        return launched


@dataclass(frozen=True)
class Options:
    """How to reach the switch and tune the agents; each has a P4INC_* variable."""
    job_id: int = DEFAULT_JOB_ID                  # P4INC_JOB_ID: the job the controller installed
    aggregator: tuple[str, int] = (AGG_IP, INC_PORT)   # P4INC_AGGREGATOR=IP[:PORT]
    inc_port: int | None = None                   # P4INC_PORT; default INC_PORT + LOCAL_RANK
    interface: str | None = None                  # P4INC_INTERFACE: bind the sockets to it (root)
    window: int = 16                              # P4INC_WINDOW: slots / unacknowledged chunks in flight
    timeout: float = 0.02                         # P4INC_TIMEOUT_MS: the ring's retransmission timeout
    max_retries: int = 200                        # the ring's (INC measures its own timeout)
    give_up_after: float = 30.0                   # P4INC_GIVE_UP_S: INC's seconds without a result before IncTimeoutError
    probe_timeout: float = 1.0                    # P4INC_PROBE_TIMEOUT: "auto" waits this long for the switch
    max_rto: float = 2.0                          # P4INC_MAX_RTO_MS: INC's measured retransmission timeout's ceiling
    pool: str | None = None                       # P4INC_POOL=HOST:PORT|unix:PATH: ask the slot pool for a job
    elements_per_packet: int = INC_K              # P4INC_ELEMENTS_PER_PACKET: as the job's switch program was built
    engine: str = "c"                             # P4INC_ENGINE: c (compiled, where it builds) or python
    spin: float = DEFAULT_SPIN                    # P4INC_SPIN_US: a call of at most POLL_CHUNKS chunks reads this long
                                                  # before it sleeps; default spin_for(the launcher's ranks here)
    spin_large: float = DEFAULT_SPIN_LARGE        # P4INC_SPIN_LARGE_US: a larger call; default likewise

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Options:
        env = os.environ if environ is None else environ
        try:
            host, _, port = env.get("P4INC_AGGREGATOR", AGG_IP).partition(":")
            spin = spin_for(int(env.get("LOCAL_WORLD_SIZE") or env.get("OMPI_COMM_WORLD_LOCAL_SIZE") or 1))
            return cls(job_id=int(env.get("P4INC_JOB_ID", DEFAULT_JOB_ID)),
                       aggregator=(host, int(port) if port else INC_PORT),
                       inc_port=int(env["P4INC_PORT"]) if env.get("P4INC_PORT") else None,
                       interface=env.get("P4INC_INTERFACE") or None,
                       window=int(env.get("P4INC_WINDOW", cls.window)),
                       timeout=float(env.get("P4INC_TIMEOUT_MS", 1e3 * cls.timeout)) / 1e3,
                       give_up_after=float(env.get("P4INC_GIVE_UP_S", cls.give_up_after)),
                       probe_timeout=float(env.get("P4INC_PROBE_TIMEOUT", cls.probe_timeout)),
                       max_rto=float(env.get("P4INC_MAX_RTO_MS", 1e3 * cls.max_rto)) / 1e3,
                       pool=env.get("P4INC_POOL") or None,
                       elements_per_packet=int(env.get("P4INC_ELEMENTS_PER_PACKET", cls.elements_per_packet)),
                       engine=env.get("P4INC_ENGINE", cls.engine),
                       spin=float(env["P4INC_SPIN_US"]) / 1e6 if env.get("P4INC_SPIN_US") else spin.small,
                       spin_large=float(env["P4INC_SPIN_LARGE_US"]) / 1e6 if env.get("P4INC_SPIN_LARGE_US")
                       else spin.large)
        except ValueError as e:
            raise DistError(f"a P4INC_* variable is malformed: {e}") from None

    def __post_init__(self) -> None:
        try:
            check_elements_per_packet(self.elements_per_packet)
        except ValueError as e:
            raise DistError(f"P4INC_ELEMENTS_PER_PACKET: {e}") from None
        if self.engine not in ENGINES:
            raise DistError(f"P4INC_ENGINE must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        for name, value in (("P4INC_SPIN_US", self.spin), ("P4INC_SPIN_LARGE_US", self.spin_large)):
            if not 0 <= value < 1:
                raise DistError(f"{name} must be 0 to 999999 microseconds, not {1e6 * value:g}")


@dataclass
class Stats:
    """What the group did: its backend, whether it fell back, and calls and seconds per collective."""
    backend: str
    fallbacks: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, op: str, seconds: float) -> None:
        self.calls[op] = self.calls.get(op, 0) + 1
        self.seconds[op] = self.seconds.get(op, 0.0) + seconds


class ProcessGroup:
    """Every rank of a job; each collective must be called by all ranks in the same order."""

    def __init__(self, rank: int, world_size: int, agent: Worker | RingWorker | FallbackAllReduce, backend: str,
                 fallbacks: int = 0, lease: Lease | None = None) -> None:
        self.rank = rank
        self.world_size = world_size
        self._agent = agent
        self._lease = lease
        self.stats = Stats(backend, fallbacks)
        # Told of a call the switch did not finish before it is redone on the ring; it may raise
        # instead (hosts/torch_backend.py: the ranks called with different sizes, not a dead switch).
        self.on_switch_timeout: Callable[[IncTimeoutError], None] | None = None
        # Run first by close(): what was started on top of the group (hosts/torch_backend.py's threads).
        self.on_close: list[Callable[[], None]] = []
        if isinstance(agent, FallbackAllReduce):
            agent.on_fallback = self._fell_back

    @property
    def backend(self) -> str:
        return self.stats.backend

    @property
    def engine(self) -> str | None:
        """Which engine runs the group's calls now: "c" (hosts/engine) or "python" (P4INC_ENGINE,
        and "python" where the compiled one cannot be built); None on "auto" after a fallback
        until the ring's first call."""
        agent = self._agent
        if isinstance(agent, FallbackAllReduce):
            agent = agent.inc or agent.ring
        return None if agent is None else agent.engine

    def all_reduce(self, array: np.ndarray, op: ReduceOp = ReduceOp.SUM) -> np.ndarray:
        """The sum, mean (float), minimum or maximum over ranks, as a new array; the dtypes
        each op takes are numerics.REDUCE_DTYPES' (sum: int32, float32, float16, bfloat16)."""
        start = time.perf_counter()
        result = self._reduce(np.asarray(array), ReduceOp(op))
        self.stats.add("all_reduce", time.perf_counter() - start)
        return result

    def all_gather(self, array: np.ndarray) -> list[np.ndarray]:
        """Every rank's `array` (same shape and dtype on all ranks), in rank order, bit for bit."""
        array = np.ascontiguousarray(array)
        start = time.perf_counter()
        words = numerics.as_words(array)
        placed = np.zeros((self.world_size, words.size), np.int32)
        placed[self.rank] = words

        def on_ring(ring: RingWorker) -> list[np.ndarray]:
            gathered = ring.allreduce(placed.ravel()).reshape(self.world_size, -1)
            return [numerics.from_words(row, array) for row in gathered]

        result = self._collective(lambda inc: list(inc.all_gather(array)), on_ring)
        self.stats.add("all_gather", time.perf_counter() - start)
        return result

    def reduce_scatter(self, array: np.ndarray, op: ReduceOp = ReduceOp.SUM) -> np.ndarray:
        """Rank r's 1/N of the reduced `array` (its length a multiple of N): the rows r*L/N ..."""
        array = np.asarray(array)
        if len(array) % self.world_size:
            raise ValueError(f"reduce_scatter needs a length divisible by {self.world_size}, not {len(array)}")
        op = ReduceOp(op)
        _check_average(op, array.dtype)
        part = len(array) // self.world_size
        start = time.perf_counter()
        mine = array.copy()
        result = self._average(self._collective(
            lambda inc: inc.reduce_scatter(array, _engine_op(op)),
            lambda ring: ring_reduce(ring, mine, _engine_op(op))[self.rank * part:(self.rank + 1) * part]), op)
        self.stats.add("reduce_scatter", time.perf_counter() - start)
        return result

    def reduce(self, array: np.ndarray, dst: int, op: ReduceOp = ReduceOp.SUM) -> np.ndarray | None:
        """The reduction over ranks at rank `dst` alone, as a new array; None at the others."""
        self._check_rank(dst, "dst")
        array = np.asarray(array)
        op = ReduceOp(op)
        _check_average(op, array.dtype)
        start = time.perf_counter()
        mine = array.copy()
        result = self._collective(lambda inc: inc.reduce(array, dst, _engine_op(op)),
                                  lambda ring: ring_reduce(ring, mine, _engine_op(op)))
        self.stats.add("reduce", time.perf_counter() - start)
        return self._average(result, op) if self.rank == dst else None

    def broadcast(self, array: np.ndarray, src: int) -> np.ndarray:
        """Rank `src`'s array on every rank, bit for bit, as a new array."""
        self._check_rank(src, "src")
        source = np.ascontiguousarray(array)
        start = time.perf_counter()
        words = numerics.as_words(source)
        words = words if self.rank == src else np.zeros_like(words)
        result = self._collective(lambda inc: inc.broadcast(source, src),
                                  lambda ring: numerics.from_words(ring.allreduce(words), source))
        self.stats.add("broadcast", time.perf_counter() - start)
        return result

    def barrier(self) -> None:
        """Returns once every rank has called it: the switch's barrier, or a one-element AllReduce."""
        start = time.perf_counter()
        self._collective(lambda inc: inc.barrier(), lambda ring: ring.allreduce(np.zeros(1, np.int32)))
        self.stats.add("barrier", time.perf_counter() - start)

    def close(self) -> None:
        """Stop the agents (collective under "auto": every rank closes, hosts/fallback.py says
        why); rank 0 then gives the job's pool slots back."""
        for stop in self.on_close:
            stop()
        self._agent.close()
        if self._lease is not None:
            self._lease.release()

    def _check_rank(self, rank: int, name: str) -> None:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"{name} must be a rank in 0..{self.world_size - 1}, not {rank}")

    def _fell_back(self, _event: FallbackEvent) -> None:
        self.stats.fallbacks += 1
        self.stats.backend = "ring"

    def _collective(self, on_switch: Callable[[Worker], T], on_ring: Callable[[RingWorker], T]) -> T:
        """The switch's own collective on inc, the ring's way on the ring, and under auto the
        switch's with the ring's to finish a call the switch did not (hosts/fallback.py)."""
        def switch(inc: Worker) -> T:
            try:
                return on_switch(inc)
            except IncTimeoutError as e:
                if self.on_switch_timeout is not None:
                    self.on_switch_timeout(e)
                raise

        if isinstance(self._agent, Worker):
            return switch(self._agent)
        if isinstance(self._agent, FallbackAllReduce):
            return self._agent.run(switch, on_ring)
        return on_ring(self._agent)

    def _reduce(self, array: np.ndarray, op: ReduceOp) -> np.ndarray:
        _check_average(op, array.dtype)
        name = _engine_op(op)
        numerics.reduce_op(name, array.dtype)          # the same TypeError/ValueError on either path
        mine = array.copy() if isinstance(self._agent, FallbackAllReduce) else array   # a redo on the ring needs it
        return self._average(self._collective(lambda inc: inc.allreduce(array, name),
                                              lambda ring: ring_reduce(ring, mine, name)), op)

    def _average(self, result: np.ndarray, op: ReduceOp) -> np.ndarray:
        """The sum divided by N in float32, rounded once into the sum's dtype."""
        if op is ReduceOp.AVG:
            result = (result.astype(np.float32) / np.float32(self.world_size)).astype(result.dtype)
        return result


def _check_average(op: ReduceOp, dtype: np.dtype) -> None:
    if op is ReduceOp.AVG and dtype not in numerics.FLOAT_FORMATS:
        raise TypeError(f"ReduceOp.AVG takes {', '.join(map(str, numerics.FLOAT_FORMATS))} arrays, not {dtype}")


def _engine_op(op: ReduceOp) -> str:
    """The agent's name for `op`: a mean is a sum, divided afterwards."""
    return "sum" if op is ReduceOp.AVG else op.value


def new_group(backend: str = "auto", env: LaunchEnv | None = None, options: Options | None = None,
              rendezvous: Rendezvous | StoreRendezvous | None = None) -> ProcessGroup:
    """Rendezvous with the other ranks and set up the backend: through `rendezvous` if given
    (torch's store: `StoreRendezvous`), else a listener of rank 0 at MASTER_ADDR:MASTER_PORT.

    With `options.pool`, rank 0 asks the slot pool for the job's slots first. "auto" tries the
    switch with a one-element AllReduce; if the pool refuses or any rank gets no answer within
    `options.probe_timeout`, all ranks agree (through the rendezvous) to use the ring; later,
    a call the switch stops answering is redone on the ring (hosts/fallback.py).
    """
    if backend not in BACKENDS:
        raise DistError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    env = LaunchEnv.from_environ() if env is None else env
    options = Options.from_environ() if options is None else options
    rendezvous = Rendezvous(env) if rendezvous is None else rendezvous
    ring_transport = lease = None
    try:
        ring_transport, me = _ring_socket(rendezvous, options)
        ring_transport.peers = [tuple(p) for p in rendezvous.all_gather(me)]
        refusal, hint = None, ""
        if backend in ("auto", "inc") and options.pool:
            lease, answer = _pool_job(rendezvous, env, options)
            if isinstance(answer, str):
                refusal = answer
            else:
                options = dataclasses.replace(options, job_id=answer["job_id"],
                                              window=min(options.window, answer["num_slots"]))
        ring_config = RingConfig(options.job_id, env.rank, env.world_size, window=options.window,
                                 timeout=options.timeout, max_retries=options.max_retries,
                                 elements_per_packet=options.elements_per_packet, engine=options.engine,
                                 spin=options.spin, spin_large=options.spin_large)
        if backend in ("auto", "inc") and refusal is None:
            inc = _probe_inc(env, options, backend == "auto")
            if all(rendezvous.all_gather(inc is not None)):
                if backend == "auto":
                    # Ranks reach the ring apart (one gave up on the switch later, or computed
                    # longer before its next call): a stall there may last as long as the switch's.
                    patient = dataclasses.replace(ring_config, max_retries=max(
                        options.max_retries, math.ceil(options.give_up_after / options.timeout)))
                    agent = FallbackAllReduce(inc, patient, ring_transport)
                    return ProcessGroup(env.rank, env.world_size, agent, "inc", lease=lease)
                ring_transport.close()
                return ProcessGroup(env.rank, env.world_size, inc, "inc", lease=lease)
            if inc is not None:
                inc.close()
            refusal = f"no switch answered job {options.job_id} at {options.aggregator[0]} on every rank"
            hint = f"; is the job installed and are all {env.world_size} ranks on it?"
        if refusal is not None:
            if backend == "inc":
                raise DistError(refusal + hint)
            log.warning("rank %d: %s; falling back to the host ring", env.rank, refusal)
        if lease is not None:
            lease.release()
        return ProcessGroup(env.rank, env.world_size, RingWorker(ring_config, ring_transport), "ring",
                            fallbacks=int(backend == "auto"))
    except BaseException:
        if ring_transport is not None:
            ring_transport.close()
        if lease is not None:
            lease.release()
        raise
    finally:
        rendezvous.close()


def _pool_job(rendezvous: Rendezvous, env: LaunchEnv, options: Options) -> tuple[Lease | None, dict | str]:
    """Rank 0 asks the pool for slots for every rank's INC address; every rank learns the
    grant ({"job_id", "num_slots"}) or why there is none (a message); rank 0 holds the lease."""
    addresses = rendezvous.all_gather([rendezvous.local_ip, _inc_port(env, options)])
    lease, answer = None, None
    if env.rank == 0:
        try:
            lease = request_slots(options.pool, [(ip, port) for ip, port in addresses], options.window)
            answer = {"job_id": lease.job_id, "num_slots": lease.num_slots}
            log.info("job %d: %d slots of %s from the pool at %s", lease.job_id, lease.num_slots, lease.switch,
                     options.pool)
        except PoolRefused as e:
            answer = f"the slot pool refused the job ({e.reason}: {e})"
    return lease, rendezvous.all_gather(answer)[0]


class Rendezvous:
    """All-gathers of small JSON values through a TCP listener on rank 0 at MASTER_ADDR:MASTER_PORT,
    like torch's TCPStore: only used at start-up, never on the data path."""

    def __init__(self, env: LaunchEnv, timeout: float = RENDEZVOUS_TIMEOUT_S) -> None:
        self.env = env
        self.timeout = timeout
        self.local_ip: str | None = None
        self._server: socket.socket | None = None
        if env.rank == 0 and env.world_size > 1:
            try:
                self._server = socket.create_server(("", env.master_port), reuse_port=False)
            except OSError as e:
                raise DistError(f"rank 0 cannot listen on MASTER_PORT {env.master_port}: {e.strerror}") from None
            self._server.settimeout(timeout)

    def all_gather(self, value: Any) -> list[Any]:
        """Every rank's `value`, in rank order."""
        if self.env.world_size == 1:
            self.local_ip = self.local_ip or socket.gethostbyname(self.env.master_addr)
            return [value]
        if self._server is not None:
            return self._serve(value)
        return self._ask(value)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    def _serve(self, value: Any) -> list[Any]:
        values: list[Any] = [None] * self.env.world_size
        values[0] = value
        conns = []
        try:
            while len(conns) < self.env.world_size - 1:
                try:
                    conn, _ = self._server.accept()
                except TimeoutError:
                    raise DistError(f"rendezvous: {self.env.world_size - 1 - len(conns)} rank(s) did not reach "
                                    f"port {self.env.master_port} within {self.timeout:.0f} s") from None
                conns.append(conn)
                self.local_ip = self.local_ip or conn.getsockname()[0]
                message = _read_line(conn, self.timeout)
                values[message["rank"]] = message["value"]
            reply = (json.dumps(values) + "\n").encode()
            for conn in conns:
                conn.sendall(reply)
        finally:
            for conn in conns:
                conn.close()
        return values

    def _ask(self, value: Any) -> list[Any]:
        deadline = time.monotonic() + self.timeout
        address = (self.env.master_addr, self.env.master_port)
        while True:
            try:
                conn = socket.create_connection(address, timeout=max(0.1, deadline - time.monotonic()))
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise DistError(f"rendezvous: cannot reach rank 0 at {address[0]}:{address[1]}: "
                                    f"{e.strerror or e}") from None
                time.sleep(0.1)      # rank 0 may not be listening yet
        with conn:
            self.local_ip = conn.getsockname()[0]
            conn.sendall((json.dumps({"rank": self.env.rank, "value": value}) + "\n").encode())
            return _read_line(conn, max(0.1, deadline - time.monotonic()))


class StoreRendezvous:
    """The same all-gathers through a key-value store that every rank reaches (torch.distributed's
    Store: `set(key, value)`, and `get(key)` that waits for the key within the store's timeout),
    so nothing listens on a port of its own: under torchrun or mpirun with torch.distributed
    initialised, torch's TCPStore already holds MASTER_PORT. `local_ip` is the address this rank
    reaches `master_addr` from (where the other ranks reach it)."""

    def __init__(self, store: Any, rank: int, world_size: int, master_addr: str | None, prefix: str = "p4inc") -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        # Each rank counts its own set-ups: ranks in step agree on it, and a group set up again
        # over the same store never reads the keys of the last one.
        self.prefix = f"{prefix}/{store.add(f'{prefix}/setups/{rank}', 1)}"
        self.local_ip = _route_source(master_addr)
        self._round = 0

    def all_gather(self, value: Any) -> list[Any]:
        round_, self._round = self._round, self._round + 1
        key = f"{self.prefix}/{round_}/"
        self.store.set(key + str(self.rank), json.dumps(value))
        try:
            return [json.loads(self.store.get(key + str(r))) for r in range(self.world_size)]
        except RuntimeError as e:          # torch's DistStoreError: a rank never came
            raise DistError(f"rendezvous through the store: {e}".splitlines()[0]) from None

    def close(self) -> None:
        """Nothing to release: the store belongs to its owner."""


def _route_source(address: str | None) -> str:
    """The local address the kernel sends from towards `address` (a UDP connect sends nothing)."""
    if not address:
        return socket.gethostbyname(socket.gethostname())
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((socket.gethostbyname(address), 9))
        except OSError as e:
            raise DistError(f"cannot find a route to MASTER_ADDR {address}: {e.strerror or e}") from None
        return s.getsockname()[0]


# The default group of the torch.distributed-shaped functions, as torch keeps one.
_groups: dict[str, ProcessGroup] = {}


def init_process_group(backend: str = "auto", **_: Any) -> ProcessGroup:
    """Set up the default group from the launcher's environment (torch's keyword arguments
    such as init_method are accepted and ignored: the environment says everything). Where
    torch.distributed is initialised in this process, the rendezvous goes through its store:
    torch's TCPStore already listens on MASTER_PORT."""
    if "default" in _groups:
        raise DistError("the default process group is already initialised")
    env = LaunchEnv.from_environ()
    store = _torch_store()
    rendezvous = None if store is None else StoreRendezvous(store, env.rank, env.world_size, env.master_addr,
                                                            prefix="p4inc/hosts.dist")
    _groups["default"] = new_group(backend, env, rendezvous=rendezvous)
    return _groups["default"]


def is_initialized() -> bool:
    return "default" in _groups


def destroy_process_group() -> None:
    group = _groups.pop("default", None)
    if group is not None:
        group.close()


def get_rank() -> int:
    return _default().rank


def get_world_size() -> int:
    return _default().world_size


def all_reduce(array: Any, op: ReduceOp = ReduceOp.SUM) -> Any:
    """In place, as torch's: `array` (a writable ndarray, or a CPU torch tensor) becomes the
    reduction; also returned."""
    _check_in_place(array)
    return _fill(array, _default().all_reduce(_readable(array), op))


def all_gather(output: list[Any], array: Any) -> None:
    """torch's signature: fills `output` (a list of world_size arrays or tensors) in place."""
    if len(output) != _default().world_size:
        raise ValueError(f"all_gather needs an output list of {_default().world_size} arrays, not {len(output)}")
    for out in output:
        _check_in_place(out)
    for out, got in zip(output, _default().all_gather(_readable(array))):
        _fill(out, got)


def reduce_scatter(output: Any, inputs: list[Any], op: ReduceOp = ReduceOp.SUM) -> None:
    """torch's signature: `output` becomes the reduction over ranks of `inputs[rank]`."""
    if len(inputs) != _default().world_size:
        raise ValueError(f"reduce_scatter needs {_default().world_size} inputs, not {len(inputs)}")
    _check_in_place(output)
    got = _default().reduce_scatter(np.concatenate([_readable(i).ravel() for i in inputs]), op)
    _fill(output, got.reshape(np.shape(output)))


def reduce(array: Any, dst: int, op: ReduceOp = ReduceOp.SUM) -> Any:
    """In place at rank `dst`, as torch's: `array` there becomes the reduction (elsewhere it
    is left as it was); returned."""
    _check_in_place(array)
    got = _default().reduce(_readable(array), dst, op)
    return array if got is None else _fill(array, got)


def broadcast(array: Any, src: int) -> Any:
    """In place, as torch's: `array` becomes rank `src`'s; also returned."""
    _check_in_place(array)
    return _fill(array, _default().broadcast(_readable(array), src))


def barrier() -> None:
    _default().barrier()


def ddp_comm_hook(group: ProcessGroup) -> Callable[[Any, Any], Any]:
    """A PyTorch DDP communication hook averaging gradient buckets through `group`, for
    `model.register_comm_hook(None, ddp_comm_hook(group))`: each bucket goes to the group's
    collective thread as it becomes ready and its future completes when the switch answers
    (hosts/torch_backend.py). Needs torch; a DDP on the `p4inc` backend needs no hook."""
    try:
        from hosts import torch_backend      # optional: only this function needs torch
    except ImportError:
        raise DistError("ddp_comm_hook needs PyTorch, which p4inc installs only when asked "
                        "(make setup TORCH=1, or pip install -r requirements-torch.txt)") from None
    return torch_backend.averaging_hook(group)


def _default() -> ProcessGroup:
    if "default" not in _groups:
        raise DistError("call init_process_group() first")
    return _groups["default"]


def _ring_socket(rendezvous: Rendezvous, options: Options) -> tuple[UdpPeerTransport, list]:
    """The ring's socket, bound now to a free port on this rank's rendezvous address."""
    rendezvous.all_gather(None)        # learns the local address the other ranks reach
    transport = UdpPeerTransport([], (rendezvous.local_ip, 0), options.interface)
    return transport, list(transport.address)


def _probe_inc(env: LaunchEnv, options: Options, quick: bool) -> Worker | None:
    """An INC worker that has seen the switch answer a one-element AllReduce, or None (quick)
    when it did not answer within the probe timeout."""
    transport = UdpTransport(options.aggregator, ("0.0.0.0", _inc_port(env, options)), options.interface)
    config = JobConfig(options.job_id, env.rank, env.world_size, window=options.window,
                       give_up_after=options.give_up_after, max_rto=options.max_rto,
                       min_rto=min(JobConfig.min_rto, options.max_rto),
                       elements_per_packet=options.elements_per_packet, engine=options.engine,
                       spin=options.spin, spin_large=options.spin_large)
    try:
        probe = Worker(dataclasses.replace(config, timeout=min(config.timeout, options.probe_timeout / 4),
                                           give_up_after=options.probe_timeout) if quick else config, transport)
        probe.allreduce(np.zeros(1, np.int32))
    except IncTimeoutError:
        transport.close()
        if not quick:
            raise DistError(f"rank {env.rank}: the switch did not answer job {options.job_id} at "
                            f"{options.aggregator[0]}") from None
        return None
    except (IncError, ValueError):
        transport.close()
        raise
    return Worker(config, transport, next_seq=probe.next_seq) if quick else probe


def _inc_port(env: LaunchEnv, options: Options) -> int:
    return INC_PORT + env.local_rank if options.inc_port is None else options.inc_port


def _read_line(conn: socket.socket, timeout: float) -> Any:
    conn.settimeout(timeout)
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            raise DistError("rendezvous: a rank stopped answering") from None
        if not chunk:
            raise DistError("rendezvous: a rank closed the connection early")
        data += chunk
    return json.loads(data)


def _readable(array: Any) -> np.ndarray:
    """An ndarray of `array`'s values: torch tensors through hosts/torch_backend.py (no copy
    for contiguous CPU tensors; bfloat16 as ml_dtypes')."""
    if _is_torch_tensor(array):
        from hosts.torch_backend import to_numpy
        return to_numpy(array)
    return np.asarray(array)


def _check_in_place(target: Any) -> None:
    """Only a writable ndarray or a torch tensor can change in place: refuse anything else before
    the collective, rather than return with it unchanged."""
    if _is_torch_tensor(target) or isinstance(target, np.ndarray) and target.flags.writeable:
        return
    raise TypeError(f"in place needs a writable numpy array or a torch tensor, not "
                    f"{'a read-only array' if isinstance(target, np.ndarray) else type(target).__name__}; "
                    f"the group's method returns the result instead")


def _fill(target: Any, result: np.ndarray) -> Any:
    """Write `result` into `target` (checked by `_check_in_place`) in place."""
    if _is_torch_tensor(target):
        from hosts.torch_backend import copy_into
        copy_into(target, result)
    else:
        target[...] = result
    return target


def _is_torch_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")          # a tensor exists only if torch was imported
    return torch is not None and isinstance(value, torch.Tensor)


def _torch_store() -> Any:
    """torch.distributed's default store where it is initialised in this process, else None."""
    torch_dist = sys.modules.get("torch.distributed")
    if torch_dist is None or not torch_dist.is_available() or not torch_dist.is_initialized():
        return None
    return torch_dist.distributed_c10d._get_default_store()
