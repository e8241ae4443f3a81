"""Issue 12, item 5, on the leaf-spine: the whole collective x op x dtype matrix
(test_matrix.py's `assert_matrix`) with 5% loss on every host link, on 2 leaves of 2 and of 4
hosts under one spine, summed on both levels (each leaf its hosts, the spine the leaves'
partials), and once with the spine summing every worker's packets (flat) on 2 x 4. One fabric
at a time, each started by this module's fixture.
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.mininet.conftest import IncStar, inc_fabric
from tests.mininet.test_matrix import assert_matrix

pytestmark = [pytest.mark.mininet, pytest.mark.impairment]
SHAPES = [(2, False), (4, False), (4, True)]     # (hosts per leaf, flat)


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: f"2x{s[0]}-{'flat' if s[1] else 'hierarchical'}")
def leaf_spine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
               switch_target: str) -> Iterator[IncStar]:
    hosts, flat = request.param
    with inc_fabric(tmp_path_factory.mktemp(f"matrix_leaf_spine{hosts}"), hosts, switch_target, leaves=2,
                    flat=flat) as net:
        yield net


def test_every_collective_op_and_dtype_equals_numpy_across_the_leaves_under_5pct_loss(leaf_spine: IncStar) -> None:
    assert_matrix(leaf_spine, seed=2000 + leaf_spine.n)
