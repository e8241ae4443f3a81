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
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, TypeVar

import numpy as np

from hosts import numerics
from hosts.agent import IncError, IncTimeoutError, JobConfig, Worker
from hosts.fallback import FallbackAllReduce, FallbackEvent, ring_reduce
from hosts.inc import AGG_IP, INC_PORT
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
    give_up_after: float = 30.0                   # INC: seconds without a result before IncTimeoutError
    probe_timeout: float = 1.0                    # P4INC_PROBE_TIMEOUT: "auto" waits this long for the switch
    pool: str | None = None                       # P4INC_POOL=HOST:PORT|unix:PATH: ask the slot pool for a job

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Options:
        env = os.environ if environ is None else environ
        try:
            host, _, port = env.get("P4INC_AGGREGATOR", AGG_IP).partition(":")
            return cls(job_id=int(env.get("P4INC_JOB_ID", DEFAULT_JOB_ID)),
                       aggregator=(host, int(port) if port else INC_PORT),
                       inc_port=int(env["P4INC_PORT"]) if env.get("P4INC_PORT") else None,
                       interface=env.get("P4INC_INTERFACE") or None,
                       window=int(env.get("P4INC_WINDOW", cls.window)),
                       timeout=float(env.get("P4INC_TIMEOUT_MS", 1e3 * cls.timeout)) / 1e3,
                       probe_timeout=float(env.get("P4INC_PROBE_TIMEOUT", cls.probe_timeout)),
                       pool=env.get("P4INC_POOL") or None)
        except ValueError as e:
            raise DistError(f"a P4INC_* variable is malformed: {e}") from None


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
        if isinstance(agent, FallbackAllReduce):
            agent.on_fallback = self._fell_back

    @property
    def backend(self) -> str:
        return self.stats.backend

    def all_reduce(self, array: np.ndarray, op: ReduceOp = ReduceOp.SUM) -> np.ndarray:
        """The sum (or mean) over ranks, of int32 or float32, as a new array."""
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
        part = len(array) // self.world_size
        start = time.perf_counter()
        mine = array.copy()
        result = self._average(self._collective(
            lambda inc: inc.reduce_scatter(array),
            lambda ring: ring_reduce(ring, mine, "sum")[self.rank * part:(self.rank + 1) * part]), ReduceOp(op))
        self.stats.add("reduce_scatter", time.perf_counter() - start)
        return result

    def broadcast(self, array: np.ndarray, src: int) -> np.ndarray:
        """Rank `src`'s array on every rank, bit for bit, as a new array."""
        if not 0 <= src < self.world_size:
            raise ValueError(f"src must be a rank in 0..{self.world_size - 1}, not {src}")
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
        self._agent.close()
        if self._lease is not None:
            self._lease.release()

    def _fell_back(self, _event: FallbackEvent) -> None:
        self.stats.fallbacks += 1
        self.stats.backend = "ring"

    def _collective(self, on_switch: Callable[[Worker], T], on_ring: Callable[[RingWorker], T]) -> T:
        """The switch's own collective on inc, the ring's way on the ring, and under auto the
        switch's with the ring's to finish a call the switch did not (hosts/fallback.py)."""
        if isinstance(self._agent, Worker):
            return on_switch(self._agent)
        if isinstance(self._agent, FallbackAllReduce):
            return self._agent.run(on_switch, on_ring)
        return on_ring(self._agent)

    def _reduce(self, array: np.ndarray, op: ReduceOp) -> np.ndarray:
        return self._average(self._agent.allreduce(array), op)

    def _average(self, result: np.ndarray, op: ReduceOp) -> np.ndarray:
        if op is ReduceOp.AVG:
            if result.dtype != np.float32:
                raise TypeError("ReduceOp.AVG needs float32 arrays")
            result = result / np.float32(self.world_size)
        return result


def new_group(backend: str = "auto", env: LaunchEnv | None = None, options: Options | None = None) -> ProcessGroup:
    """Rendezvous with the other ranks at MASTER_ADDR:MASTER_PORT and set up the backend.

    With `options.pool`, rank 0 asks the slot pool for the job's slots first. "auto" tries the
    switch with a one-element AllReduce; if the pool refuses or any rank gets no answer within
    `options.probe_timeout`, all ranks agree (through the rendezvous) to use the ring; later,
    a call the switch stops answering is redone on the ring (hosts/fallback.py).
    """
    if backend not in BACKENDS:
        raise DistError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    env = LaunchEnv.from_environ() if env is None else env
    options = Options.from_environ() if options is None else options
    rendezvous = Rendezvous(env)
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
                                 timeout=options.timeout, max_retries=options.max_retries)
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


# The default group of the torch.distributed-shaped functions, as torch keeps one.
_groups: dict[str, ProcessGroup] = {}


def init_process_group(backend: str = "auto", **_: Any) -> ProcessGroup:
    """Set up the default group from the launcher's environment (torch's keyword arguments
    such as init_method are accepted and ignored: the environment says everything)."""
    if "default" in _groups:
        raise DistError("the default process group is already initialised")
    _groups["default"] = new_group(backend)
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


def all_reduce(array: np.ndarray, op: ReduceOp = ReduceOp.SUM) -> np.ndarray:
    """In place, as torch's: `array` (a writable ndarray) becomes the reduction; also returned."""
    return _fill(array, _default().all_reduce(array, op))


def all_gather(output: list[np.ndarray], array: np.ndarray) -> None:
    """torch's signature: fills `output` (a list of world_size arrays) in place."""
    if len(output) != _default().world_size:
        raise ValueError(f"all_gather needs an output list of {_default().world_size} arrays, not {len(output)}")
    for out, got in zip(output, _default().all_gather(array)):
        out[...] = got


def reduce_scatter(output: np.ndarray, inputs: list[np.ndarray], op: ReduceOp = ReduceOp.SUM) -> None:
    """torch's signature: `output` becomes the reduction over ranks of `inputs[rank]`."""
    output[...] = _default().reduce_scatter(np.concatenate([np.asarray(i).ravel() for i in inputs]),
                                            op).reshape(output.shape)


def broadcast(array: np.ndarray, src: int) -> np.ndarray:
    """In place, as torch's: `array` becomes rank `src`'s; also returned."""
    return _fill(array, _default().broadcast(array, src))


def barrier() -> None:
    _default().barrier()


def ddp_comm_hook(group: ProcessGroup) -> Callable[[Any, Any], Any]:
    """A PyTorch DDP communication hook averaging gradients through `group`, for
    `model.register_comm_hook(None, ddp_comm_hook(group))`; needs torch (not a dependency
    here) and float32 gradients. DDP still needs torch's own process group for set-up."""
    try:
        import torch      # optional: only this function needs it
    except ImportError:
        raise DistError("ddp_comm_hook needs PyTorch, which p4inc does not install (pip install torch)") from None

    def hook(_state: Any, bucket: Any) -> Any:
        buffer = bucket.buffer()
        mean = group.all_reduce(buffer.detach().to("cpu", torch.float32).numpy(), ReduceOp.AVG)
        future = torch.futures.Future()
        future.set_result(torch.from_numpy(mean).to(buffer.device, buffer.dtype))
        return future

    return hook


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
                       give_up_after=options.give_up_after)
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


def _fill(target: Any, result: np.ndarray) -> np.ndarray:
    if isinstance(target, np.ndarray) and target.flags.writeable:
        target[...] = result
    return result
