"""The whole collective x op x dtype matrix from one worker process (issue 12): every
combination in turn, on inputs every worker regenerates from a seed, each result checked
here against numpy's float64 reference (hosts.numerics: float sums within docs/protocol.md's
bound; int32, min, max and moved data exact). `python -m hosts.worker --matrix` runs it.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hosts import numerics
from hosts.agent import IncError, IncOverflowError, Worker
from hosts.inc import INC_K

log = logging.getLogger(__name__)

COLLECTIVES = ("allreduce", "reduce", "reduce-scatter", "broadcast", "all-gather", "barrier")
REDUCING = ("allreduce", "reduce", "reduce-scatter")
# Sums whose inputs fit but whose result cannot: the call must raise IncOverflowError.
OVERFLOWING = ("int32", "float16")


@dataclass(frozen=True)
class Combination:
    """One call of the matrix. `op` is None for collectives that move data without reducing."""
    collective: str
    dtype: str
    op: str | None = None
    root: int = 0
    overflow: bool = False

    @property
    def name(self) -> str:
        """e.g. reduce.min.int32.root2: also the key of its result in --output's .npz."""
        parts = [self.collective, *([self.op] if self.op else []), self.dtype]
        if self.collective in ("reduce", "broadcast"):
            parts.append(f"root{self.root}")
        return ".".join(parts + (["overflow"] if self.overflow else []))


@dataclass
class Outcome:
    """A combination's result at this worker against numpy. `error` and `bound` are taken at
    the element furthest past (or nearest to) its bound; the bound is 0 where the result must
    be exact."""
    combination: Combination
    passed: bool
    error: float = 0.0
    bound: float = 0.0
    detail: str = ""
    seconds: float = 0.0
    packets_sent: int = 0
    retransmits: int = 0
    result: np.ndarray | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        c = self.combination
        return {"name": c.name, "collective": c.collective, "op": c.op, "dtype": c.dtype, "root": c.root,
                "overflow": c.overflow, "passed": self.passed, "error": self.error, "bound": self.bound,
                "detail": self.detail, "seconds": self.seconds, "packets_sent": self.packets_sent,
                "retransmits": self.retransmits}


def combinations(n: int) -> list[Combination]:
    """Every collective x op x dtype (sum for every dtype; min and max where numerics allows
    them, only where the collective reduces), then one overflowing sum per OVERFLOWING dtype;
    roots vary with the combination's index (index mod n)."""
    shapes: list[tuple[str, str, str | None]] = []
    for collective in COLLECTIVES:
        if collective == "barrier":
            shapes.append((collective, "int32", None))
            continue
        for dtype in map(str, numerics.SUM_DTYPES):
            ops = [op for op, dtypes in numerics.REDUCE_DTYPES.items() if dtype in map(str, dtypes)]
            for op in ops if collective in REDUCING else [None]:
                shapes.append((collective, dtype, op))
    combos = [Combination(c, d, op, root=i % n) for i, (c, d, op) in enumerate(shapes)]
    return combos + [Combination("allreduce", d, "sum", overflow=True) for d in OVERFLOWING]


def matrix_inputs(combo: Combination, index: int, n: int, size: int, seed: int) -> list[np.ndarray]:
    """Every worker's input to combination `index` (all workers compute all n): `size`
    elements (reduce-scatter: n equal parts of size // n, at least 1). int32 sums stay small
    enough that 8 of them fit; min, max and moved int32 take the whole range; floats are
    normal with magnitudes 2^-6..2^6 (float16's subnormals included); overflowing inputs
    fit their dtype, their sum does not."""
    length = n * max(1, size // n) if combo.collective == "reduce-scatter" else size
    out = []
    for w in range(n):
        rng = np.random.default_rng([seed, index, w])
        if combo.overflow:
            x = (rng.integers(2**30, 2**31 - 1, length, dtype=np.int32) if combo.dtype == "int32"
                 else rng.uniform(40_000, 65_000, length))
        elif combo.dtype == "int32":
            x = (rng.integers(-2**24, 2**24, length, dtype=np.int32) if combo.op == "sum"
                 else rng.integers(-2**31, 2**31 - 1, length, dtype=np.int32, endpoint=True))
        else:
            x = rng.standard_normal(length) * 2.0 ** rng.integers(-6, 7, length)
        out.append(np.asarray(x).astype(dtype_of(combo.dtype)))
    return out


def run_matrix(worker: Worker, size: int, seed: int) -> list[Outcome]:
    """Run every combination in order (every worker of the job must, with the same size and
    seed) and check each result. A call that gives up (IncTimeoutError) ends the run: the
    rest are reported not run, since the workers' chunk sequence is no longer shared."""
    n, me = worker.config.num_workers, worker.config.worker_id
    combos = combinations(n)
    outcomes: list[Outcome] = []
    for index, combo in enumerate(combos):
        inputs = matrix_inputs(combo, index, n, size, seed)
        start, stats_before = time.perf_counter(), worker.last_stats
        try:
            got: np.ndarray | None | Exception = call(worker, combo, inputs[me])
        except (IncOverflowError, TypeError, ValueError) as e:
            got = e
        except IncError as e:
            outcomes.append(Outcome(combo, False, detail=f"{type(e).__name__}: {e}"))
            outcomes += [Outcome(c, False, detail="not run: an earlier call failed") for c in combos[index + 1:]]
            log.error("%s: %s; stopping the matrix", combo.name, e)
            break
        outcome = check(combo, inputs, me, got, worker.config.elements_per_packet)
        outcome.seconds = time.perf_counter() - start
        if worker.last_stats is not None and worker.last_stats is not stats_before:
            outcome.packets_sent, outcome.retransmits = worker.last_stats.packets_sent, worker.last_stats.retransmits
        if not outcome.passed:
            log.error("%s failed: %s", combo.name, outcome.detail)
        outcomes.append(outcome)
    return outcomes


def call(worker: Worker, combo: Combination, tensor: np.ndarray) -> np.ndarray | None:
    """`combo`'s collective on this worker's `tensor`: its result, None where it gives this
    worker nothing (reduce at a non-root, barrier)."""
    return call_collective(worker, combo.collective, tensor, combo.op or "sum", combo.root)


def call_collective(worker: Worker, collective: str, tensor: np.ndarray, op: str, root: int) -> np.ndarray | None:
    """One call of the Worker API named as in COLLECTIVES."""
    if collective == "allreduce":
        return worker.allreduce(tensor, op)
    if collective == "reduce":
        return worker.reduce(tensor, root, op)
    if collective == "reduce-scatter":
        return worker.reduce_scatter(tensor, op)
    if collective == "broadcast":
        return worker.broadcast(tensor, root)
    if collective == "all-gather":
        return worker.all_gather(tensor)
    if collective == "barrier":
        worker.barrier()
        return None
    raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, not {collective!r}")


def check(combo: Combination, inputs: list[np.ndarray], me: int, got: np.ndarray | None | Exception,
          k: int = INC_K) -> Outcome:
    """What worker `me` got (a result, None, or the exception the call raised) against what
    numpy says it should get from every worker's `inputs` (`k` elements per packet)."""
    if combo.overflow:
        if isinstance(got, IncOverflowError):
            return Outcome(combo, True, detail=f"reported: {got}")
        return Outcome(combo, False, detail=f"an overflowing sum gave {describe(got)}, not IncOverflowError")
    if isinstance(got, Exception):
        return Outcome(combo, False, detail=f"{type(got).__name__}: {got}")
    expected = expected_result(combo, inputs, me)
    if expected is None:
        return Outcome(combo, got is None, detail="" if got is None else f"expected nothing, got {describe(got)}")
    if got is None or got.dtype != expected.dtype or got.shape != expected.shape:
        return Outcome(combo, False, detail=f"expected {describe(expected)}, got {describe(got)}")
    if combo.collective not in REDUCING:
        differ = got.tobytes() != expected.tobytes()
        error = float(np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64)), initial=0.0))
        return Outcome(combo, not differ, error, 0.0, "not bit for bit the inputs" if differ else "", result=got)
    parts = [x.reshape(len(inputs), -1)[me] for x in inputs] if combo.collective == "reduce-scatter" else inputs
    errors = numerics.result_errors(got, parts, op=combo.op or "sum", k=k)
    assert errors is not None        # shapes were checked above
    error, bound = worst(*errors)
    passed = bool(np.all(errors[0] <= errors[1]))
    return Outcome(combo, passed, error, bound, "" if passed else f"off by {error:g}, bound {bound:g}", result=got)


def expected_result(combo: Combination, inputs: list[np.ndarray], me: int) -> np.ndarray | None:
    """The shape and dtype worker `me` should get (the values for moved data), or None for nothing."""
    if combo.collective == "barrier" or (combo.collective == "reduce" and me != combo.root):
        return None
    if combo.collective == "broadcast":
        return inputs[combo.root]
    if combo.collective == "all-gather":
        return np.stack(inputs)
    if combo.collective == "reduce-scatter":
        return inputs[0].reshape(len(inputs), -1)[me]
    return inputs[0]


def worst(error: np.ndarray, bound: np.ndarray) -> tuple[float, float]:
    """(error, bound) at the element with the largest error / bound (0 / 0 counts as 0)."""
    if error.size == 0:
        return 0.0, 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(error == 0, 0.0, error / bound)
    i = int(np.argmax(np.nan_to_num(ratio, nan=np.inf)))
    return float(error.flat[i]), float(bound.flat[i])


def dtype_of(name: str) -> np.dtype:
    return next(d for d in numerics.SUM_DTYPES if str(d) == name)


def describe(got: object) -> str:
    if isinstance(got, np.ndarray):
        return f"a {got.dtype} array of shape {got.shape}"
    return "nothing" if got is None else f"{type(got).__name__}: {got}"
