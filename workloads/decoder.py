"""A Megatron-style tensor-parallel decoder in numpy: rank r of N holds 1/N of every weight
matrix (attention heads and MLP columns split, then the row-parallel projections reduced by
one AllReduce each) and generates tokens greedily, one at a time, with a KV cache.

The weights are drawn in `DecoderConfig.blocks` seeded blocks per matrix, and a rank's shard
is a run of whole blocks, so N = 1 (the single-process reference), 2, 4 and 8 share one model.
Communication goes through a `Collectives` object, so the same code runs on INC, on the
host ring, or in process.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

# Matrix ids in the weight seeds; appending is fine, renumbering changes every model.
_MATRICES = {"embedding": 0, "q": 1, "k": 2, "v": 3, "out": 4, "up": 5, "down": 6, "head": 7}
_NORM_EPS = 1e-6


class Collectives(Protocol):
    """What the decoder needs from a process group (hosts.dist.ProcessGroup has it)."""

    def all_reduce(self, array: np.ndarray) -> np.ndarray:
        """The element-wise sum over all ranks."""

    def all_gather(self, array: np.ndarray) -> list[np.ndarray]:
        """Every rank's `array`, in rank order, bit for bit."""


@dataclass(frozen=True)
class DecoderConfig:
    layers: int = 4
    hidden: int = 1024
    heads: int = 16
    ffn: int = 4096
    vocab: int = 4096
    max_positions: int = 256
    seed: int = 0
    blocks: int = 8          # weight blocks per matrix: world sizes must divide it

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        for name in ("heads", "ffn", "vocab"):
            if getattr(self, name) % self.blocks:
                raise ValueError(f"{name} ({getattr(self, name)}) must be a multiple of blocks ({self.blocks})")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def check_world(self, world_size: int) -> None:
        if world_size < 1 or self.blocks % world_size:
            raise ValueError(f"world size {world_size} must divide the model's {self.blocks} weight blocks")


@dataclass(frozen=True)
class Layer:
    """One rank's shard of a transformer layer (pre-norm attention, then pre-norm MLP)."""
    q: np.ndarray        # (hidden, local_heads * head_dim): column-parallel
    k: np.ndarray
    v: np.ndarray
    out: np.ndarray      # (local_heads * head_dim, hidden): row-parallel
    up: np.ndarray       # (hidden, ffn / N): column-parallel
    down: np.ndarray     # (ffn / N, hidden): row-parallel


@dataclass(frozen=True)
class Shard:
    """Rank `rank`'s weights: its layers, and its rows of the vocabulary embedding and head."""
    config: DecoderConfig
    rank: int
    world_size: int
    embedding: np.ndarray   # (vocab / N, hidden), rows vocab_start ...
    head: np.ndarray        # (vocab / N, hidden): this rank's slice of the logits
    layers: tuple[Layer, ...]

    @property
    def vocab_start(self) -> int:
        return self.rank * self.config.vocab // self.world_size


def load_shard(config: DecoderConfig, rank: int, world_size: int) -> Shard:
    """Generate rank `rank`'s 1/world_size of every matrix from the seed (float32)."""
    config.check_world(world_size)
    per_rank = config.blocks // world_size
    mine = range(rank * per_rank, (rank + 1) * per_rank)
    c = config

    def matrix(layer: int, name: str, shape: tuple[int, int], axis: int, fan_in: int) -> np.ndarray:
        parts = []
        for b in mine:
            rng = np.random.default_rng([c.seed, layer, _MATRICES[name], b])   # layer 0: embedding
            parts.append(rng.standard_normal(shape, dtype=np.float32) * np.float32(fan_in ** -0.5))
        return np.concatenate(parts, axis=axis)

    hd = c.heads // c.blocks * c.head_dim        # attention width of one block
    fb = c.ffn // c.blocks
    layers = tuple(Layer(q=matrix(i, "q", (c.hidden, hd), 1, c.hidden),
                         k=matrix(i, "k", (c.hidden, hd), 1, c.hidden),
                         v=matrix(i, "v", (c.hidden, hd), 1, c.hidden),
                         out=matrix(i, "out", (hd, c.hidden), 0, c.hidden),
                         up=matrix(i, "up", (c.hidden, fb), 1, c.hidden),
                         down=matrix(i, "down", (fb, c.hidden), 0, c.ffn))
                   for i in range(1, c.layers + 1))
    embedding = matrix(0, "embedding", (c.vocab // c.blocks, c.hidden), 0, 1)
    head = matrix(0, "head", (c.vocab // c.blocks, c.hidden), 0, c.hidden)
    return Shard(c, rank, world_size, embedding, head, layers)


def prompt_tokens(config: DecoderConfig, length: int) -> list[int]:
    """A seeded prompt, the same on every rank."""
    return np.random.default_rng([config.seed, 1 << 20]).integers(0, config.vocab, length).tolist()


@dataclass
class StepTiming:
    """Seconds of one decoding step, and how many of them were spent in collectives."""
    total: float
    comm: float


@dataclass
class Generation:
    """What a rank generated: the new tokens, its slice of every step's logits, and timings."""
    tokens: list[int] = field(default_factory=list)
    logits: list[np.ndarray] = field(default_factory=list)     # per generated token: (vocab / N,)
    steps: list[StepTiming] = field(default_factory=list)      # per generated token


class _Timed:
    """Wraps a Collectives and adds up the time spent in it."""

    def __init__(self, inner: Collectives) -> None:
        self.inner = inner
        self.seconds = 0.0

    def all_reduce(self, array: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        try:
            return self.inner.all_reduce(array)
        finally:
            self.seconds += time.perf_counter() - start

    def all_gather(self, array: np.ndarray) -> list[np.ndarray]:
        start = time.perf_counter()
        try:
            return self.inner.all_gather(array)
        finally:
            self.seconds += time.perf_counter() - start


class Decoder:
    """Greedy decoding on one rank's shard; every rank must make the same calls."""

    def __init__(self, shard: Shard, comm: Collectives) -> None:
        self.shard = shard
        self.comm = _Timed(comm)
        c = shard.config
        local_heads = c.heads // shard.world_size
        self._cache_k = np.zeros((c.layers, c.max_positions, local_heads, c.head_dim), np.float32)
        self._cache_v = np.zeros_like(self._cache_k)
        self._position = 0
        self._positions = _sinusoids(c.max_positions, c.hidden)

    def generate(self, prompt: list[int], new_tokens: int,
                 progress: Callable[[int, int, float], None] | None = None) -> Generation:
        """Feed the prompt, then append `new_tokens` greedy tokens; times only the latter.
        `progress(i, token, seconds)` is called after each new token."""
        if not prompt:
            raise ValueError("the prompt needs at least one token")
        if len(prompt) + new_tokens > self.shard.config.max_positions:
            raise ValueError(f"prompt and new tokens exceed max_positions ({self.shard.config.max_positions})")
        for token in prompt[:-1]:
            self.step(token)
        out = Generation()
        token = prompt[-1]
        for _ in range(new_tokens):
            start, comm_before = time.perf_counter(), self.comm.seconds
            token, logits = self.step(token)
            out.steps.append(StepTiming(time.perf_counter() - start, self.comm.seconds - comm_before))
            out.tokens.append(token)
            out.logits.append(logits)
            if progress is not None:
                progress(len(out.tokens), token, out.steps[-1].total)
        return out

    def step(self, token: int) -> tuple[int, np.ndarray]:
        """One position: the next (greedy) token and this rank's slice of the logits."""
        s = self.shard
        c = s.config
        p = self._position
        self._position += 1
        # Vocabulary-parallel embedding: only the rank owning the row contributes it.
        local = token - s.vocab_start
        row = s.embedding[local] if 0 <= local < len(s.embedding) else np.zeros(c.hidden, np.float32)
        h = self.comm.all_reduce(row) + self._positions[p]
        for i, layer in enumerate(s.layers):
            h = h + self.comm.all_reduce(self._attention(i, layer, _rms_norm(h), p))
            h = h + self.comm.all_reduce(_gelu(_rms_norm(h) @ layer.up) @ layer.down)
        logits = s.head @ _rms_norm(h)
        return self._argmax(logits), logits

    def _attention(self, i: int, layer: Layer, x: np.ndarray, p: int) -> np.ndarray:
        c = self.shard.config
        shape = (-1, c.head_dim)
        q = (x @ layer.q).reshape(shape)
        self._cache_k[i, p] = (x @ layer.k).reshape(shape)
        self._cache_v[i, p] = (x @ layer.v).reshape(shape)
        keys, values = self._cache_k[i, :p + 1], self._cache_v[i, :p + 1]      # (p+1, heads, dim)
        scores = np.einsum("hd,phd->hp", q, keys) * np.float32(c.head_dim ** -0.5)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        context = np.einsum("hp,phd->hd", weights, values).reshape(-1)
        return context @ layer.out

    def _argmax(self, logits: np.ndarray) -> int:
        """Greedy choice across the vocabulary slices: gather each rank's best (value, index)
        bit-exactly, take the largest value, the lowest index on a tie (as np.argmax does)."""
        best = int(np.argmax(logits))
        mine = np.array([logits[best], 0], np.float32).view(np.int32)
        mine[1] = self.shard.vocab_start + best
        candidates = np.stack(self.comm.all_gather(mine))
        values = candidates[:, 0].view(np.float32)
        winner = int(np.flatnonzero(values == values.max())[0])      # ranks hold ascending slices
        return int(candidates[winner, 1])


def reference_generate(config: DecoderConfig, prompt: list[int], new_tokens: int) -> Generation:
    """The single-process reference: every weight on one rank, no communication."""
    return Decoder(load_shard(config, 0, 1), Alone()).generate(prompt, new_tokens)


@dataclass(frozen=True)
class Alone:
    """No communication: each collective returns this rank's own data at once. For a group of one
    these are the collectives; for `world_size` ranks it is the decoder's compute alone on its
    shard (the demo's floor: what free collectives would reach), whose tokens are not the model's."""
    world_size: int = 1

    def all_reduce(self, array: np.ndarray) -> np.ndarray:
        return array

    def all_gather(self, array: np.ndarray) -> list[np.ndarray]:
        return [array] * self.world_size


def _rms_norm(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x) + np.float32(_NORM_EPS))


def _gelu(x: np.ndarray) -> np.ndarray:
    """tanh-approximate GELU, in float32."""
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(np.float32(0.7978845608) * (x + np.float32(0.044715) * x ** 3)))


def _sinusoids(positions: int, width: int) -> np.ndarray:
    """Fixed sinusoidal position encodings (no weights to shard)."""
    freqs = np.exp(-np.log(10000.0) * np.arange(0, width, 2) / width)
    angles = np.arange(positions)[:, None] * freqs[None, :]
    enc = np.zeros((positions, width), np.float32)
    enc[:, 0::2], enc[:, 1::2] = np.sin(angles), np.cos(angles)
    return enc


# Logits may differ from the reference by this much, relative to the largest reference logit:
# INC carries float32 as block floating point (about 20 significant bits of each 32-element
# block's largest value, docs/protocol.md) and the ring adds in another order than one matmul
# does; over 2 * layers + 1 AllReduces that stays near 1e-6 (measured), so 1e-4 leaves room
# without hiding a wrong shard or a lost contribution (those move logits by O(1)).
LOGIT_RTOL = 1e-4


@dataclass(frozen=True)
class Comparison:
    """A run's tokens and full logits (ranks' slices joined) against the reference's."""
    tokens_equal: bool
    max_error: float          # max |logit - reference logit|
    tolerance: float          # LOGIT_RTOL * max(1, max |reference logit|)
    min_margin: float         # the reference's smallest top-1 minus top-2 logit: flips below it are ties

    @property
    def ok(self) -> bool:
        return self.tokens_equal and self.max_error <= self.tolerance


def compare(tokens: list[int], logits: np.ndarray, reference: Generation) -> Comparison:
    """`logits` is (tokens, vocab): every generated token's logits over the whole vocabulary."""
    ref = np.array(reference.logits, np.float64)
    top2 = np.sort(ref, axis=1)[:, -2:]
    same_shape = np.shape(logits) == ref.shape
    error = float(np.max(np.abs(np.asarray(logits, np.float64) - ref))) if same_shape else float("inf")
    return Comparison(tokens_equal=list(tokens) == list(reference.tokens), max_error=error,
                      tolerance=LOGIT_RTOL * max(1.0, float(np.max(np.abs(ref)))),
                      min_margin=float(np.min(top2[:, 1] - top2[:, 0])))
