"""The tensor-parallel decoder against its single-process reference: shards for N = 2, 4, 8
(ranks as threads, exact numpy sums) generate the reference's tokens and logits, and the
check catches a lost contribution."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from workloads.decoder import Alone, Decoder, DecoderConfig, compare, load_shard, prompt_tokens, reference_generate

SMALL = DecoderConfig(layers=2, hidden=256, heads=8, ffn=512, vocab=512, seed=3)


class ThreadGroup:
    """Collectives for N ranks running as threads; `drop` leaves one rank's AllReduce input out."""

    def __init__(self, n: int, drop: int | None = None) -> None:
        self.n, self.drop = n, drop
        self.barrier = threading.Barrier(n)
        self.inputs: list[np.ndarray | None] = [None] * n

    def member(self, rank: int) -> "ThreadGroup.Member":
        return ThreadGroup.Member(self, rank)

    class Member:
        def __init__(self, group: "ThreadGroup", rank: int) -> None:
            self.group, self.rank = group, rank

        def _exchange(self, array: np.ndarray) -> list[np.ndarray]:
            g = self.group
            g.inputs[self.rank] = array.copy()
            g.barrier.wait()
            got = list(g.inputs)
            g.barrier.wait()
            return got

        def all_reduce(self, array: np.ndarray) -> np.ndarray:
            got = self._exchange(array)
            return np.sum([a for r, a in enumerate(got) if r != self.group.drop], axis=0, dtype=np.float32)

        def all_gather(self, array: np.ndarray) -> list[np.ndarray]:
            return self._exchange(array)


def generate_sharded(config: DecoderConfig, n: int, tokens: int, drop: int | None = None):
    group = ThreadGroup(n, drop)
    outs = [None] * n

    def run(rank: int) -> None:
        outs[rank] = Decoder(load_shard(config, rank, n), group.member(rank)).generate(prompt_tokens(config, 3), tokens)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    logits = np.concatenate([np.array(o.logits) for o in outs], axis=1)
    return outs, logits


@pytest.mark.parametrize("n", [2, 4, 8])
def test_shards_generate_the_reference_tokens_and_logits(n):
    reference = reference_generate(SMALL, prompt_tokens(SMALL, 3), 6)
    outs, logits = generate_sharded(SMALL, n, 6)
    assert all(o.tokens == outs[0].tokens for o in outs)
    result = compare(outs[0].tokens, logits, reference)
    assert result.ok, result
    assert result.max_error > 0                    # really another summation order, not the reference itself
    assert len(set(reference.tokens)) > 1          # the model does not just repeat one token


def test_a_lost_contribution_fails_the_check():
    reference = reference_generate(SMALL, prompt_tokens(SMALL, 3), 4)
    outs, logits = generate_sharded(SMALL, 2, 4, drop=1)
    assert not compare(outs[0].tokens, logits, reference).ok


def test_every_rank_holds_its_share_of_every_matrix():
    full, half = load_shard(SMALL, 0, 1), load_shard(SMALL, 1, 2)
    np.testing.assert_array_equal(half.layers[0].q, full.layers[0].q[:, SMALL.hidden // 2:])
    np.testing.assert_array_equal(half.layers[1].down, full.layers[1].down[SMALL.ffn // 2:])
    np.testing.assert_array_equal(half.head, full.head[SMALL.vocab // 2:])
    assert half.vocab_start == SMALL.vocab // 2


def test_a_world_size_that_does_not_divide_the_blocks_is_refused():
    with pytest.raises(ValueError, match="must divide"):
        load_shard(SMALL, 0, 3)


def test_alone_gives_every_rank_its_own_data_at_once():
    x = np.arange(4, dtype=np.float32)
    alone = Alone(3)
    assert alone.all_reduce(x) is x
    assert [a is x for a in alone.all_gather(x)] == [True, True, True]
