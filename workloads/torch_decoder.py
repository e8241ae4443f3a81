"""The tensor-parallel decoder of workloads/decoder.py in PyTorch, as a PyTorch user writes it:
nn.Module layers, column-parallel linears (each rank its slice of the output features) and
row-parallel ones that end in `torch.distributed.all_reduce` on the group, a vocabulary-parallel
embedding and head. Same weights (`load_shard`), same float32 arithmetic step for step, so it
generates the numpy decoder's tokens on any backend: "p4inc" (hosts/torch_backend.py) or gloo.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch
import torch.distributed as tdist
from torch import nn

from workloads.decoder import _NORM_EPS, Generation, Shard, StepTiming, _sinusoids


class Comm:
    """The group the layers reduce over, and the seconds spent in its collectives."""

    def __init__(self, group: tdist.ProcessGroup | None) -> None:
        self.group = group
        self.seconds = 0.0

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        tdist.all_reduce(x, group=self.group)
        self.seconds += time.perf_counter() - start
        return x

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        out = torch.empty(tdist.get_world_size(self.group) * x.numel(), dtype=x.dtype)
        tdist.all_gather_single(out, x, group=self.group)
        self.seconds += time.perf_counter() - start
        return out.reshape(-1, *x.shape)


class ColumnParallelLinear(nn.Module):
    """y = x W[:, this rank's columns]: no communication."""

    def __init__(self, weight: np.ndarray) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.from_numpy(weight), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


class RowParallelLinear(nn.Module):
    """y = sum over ranks of x[this rank's rows] W[this rank's rows, :]: one all_reduce."""

    def __init__(self, weight: np.ndarray, comm: Comm) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.from_numpy(weight), requires_grad=False)
        self.comm = comm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.comm.all_reduce(x @ self.weight)


class Attention(nn.Module):
    """This rank's heads, with their key/value cache."""

    def __init__(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, head_dim: int,
                 max_positions: int, comm: Comm) -> None:
        super().__init__()
        self.q, self.k, self.v = ColumnParallelLinear(q), ColumnParallelLinear(k), ColumnParallelLinear(v)
        self.out = RowParallelLinear(out, comm)
        self.head_dim = head_dim
        heads = q.shape[1] // head_dim
        self.register_buffer("cache_k", torch.zeros(max_positions, heads, head_dim))
        self.register_buffer("cache_v", torch.zeros(max_positions, heads, head_dim))

    def forward(self, x: torch.Tensor, p: int) -> torch.Tensor:
        shape = (-1, self.head_dim)
        q = self.q(x).reshape(shape)
        self.cache_k[p] = self.k(x).reshape(shape)
        self.cache_v[p] = self.v(x).reshape(shape)
        keys, values = self.cache_k[:p + 1], self.cache_v[:p + 1]
        scores = torch.einsum("hd,phd->hp", q, keys) * torch.tensor(self.head_dim ** -0.5, dtype=torch.float32)
        weights = torch.exp(scores - scores.max(dim=1, keepdim=True).values)
        weights = weights / weights.sum(dim=1, keepdim=True)
        return self.out(torch.einsum("hp,phd->hd", weights, values).reshape(-1))


class Mlp(nn.Module):
    def __init__(self, up: np.ndarray, down: np.ndarray, comm: Comm) -> None:
        super().__init__()
        self.up = ColumnParallelLinear(up)
        self.down = RowParallelLinear(down, comm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(_gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm attention, then pre-norm MLP, each added to the residual stream."""

    def __init__(self, attention: Attention, mlp: Mlp) -> None:
        super().__init__()
        self.attention = attention
        self.mlp = mlp

    def forward(self, h: torch.Tensor, p: int) -> torch.Tensor:
        h = h + self.attention(_rms_norm(h), p)
        return h + self.mlp(_rms_norm(h))


class TorchDecoder(nn.Module):
    """Greedy decoding on one rank's shard over `group` (None: the default group)."""

    def __init__(self, shard: Shard, group: tdist.ProcessGroup | None = None) -> None:
        super().__init__()
        c = shard.config
        self.shard = shard
        self.comm = Comm(group)
        self.embedding = nn.Parameter(torch.from_numpy(shard.embedding), requires_grad=False)
        self.head = nn.Parameter(torch.from_numpy(shard.head), requires_grad=False)
        self.blocks = nn.ModuleList(
            Block(Attention(layer.q, layer.k, layer.v, layer.out, c.head_dim, c.max_positions, self.comm),
                  Mlp(layer.up, layer.down, self.comm)) for layer in shard.layers)
        self.register_buffer("positions", torch.from_numpy(_sinusoids(c.max_positions, c.hidden)))
        self._position = 0

    @torch.no_grad()
    def step(self, token: int) -> tuple[int, torch.Tensor]:
        """One position: the next (greedy) token and this rank's slice of the logits."""
        p = self._position
        self._position += 1
        local = token - self.shard.vocab_start
        row = self.embedding[local].clone() if 0 <= local < len(self.embedding) \
            else torch.zeros(self.shard.config.hidden)
        h = self.comm.all_reduce(row) + self.positions[p]
        for block in self.blocks:
            h = block(h, p)
        logits = self.head @ _rms_norm(h)
        return self._argmax(logits), logits

    def generate(self, prompt: list[int], new_tokens: int,
                 progress: Callable[[int, int, float], None] | None = None) -> Generation:
        """As workloads.decoder.Decoder.generate: feed the prompt, time the new tokens."""
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
            out.logits.append(logits.numpy().copy())
            if progress is not None:
                progress(len(out.tokens), token, out.steps[-1].total)
        return out

    def _argmax(self, logits: torch.Tensor) -> int:
        """Each rank's best (value, vocabulary index) gathered bit for bit; the largest value
        wins, the lowest index on a tie (the numpy decoder's rule)."""
        best = int(torch.argmax(logits))
        mine = torch.tensor([float(logits[best]), 0.0], dtype=torch.float32).view(torch.int32)
        mine[1] = self.shard.vocab_start + best
        candidates = self.comm.all_gather(mine)
        values = candidates[:, 0].view(torch.float32)
        winner = int(torch.nonzero(values == values.max())[0])
        return int(candidates[winner, 1])


def _rms_norm(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt(torch.mean(x * x) + torch.tensor(_NORM_EPS, dtype=torch.float32))


def _gelu(x: torch.Tensor) -> torch.Tensor:
    """tanh-approximate GELU in float32, as the numpy decoder computes it."""
    return 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))
