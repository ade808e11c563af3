"""Routing conversations to shards by rendezvous hashing (pure; no Ray), and the cluster
package staying an extra: importing it loads no Ray."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parlour.actors.cluster import shard_for, shard_names

IDS = st.text(min_size=1, max_size=40)


@given(st.lists(IDS, min_size=1, max_size=50), st.integers(min_value=1, max_value=12))
def test_adding_a_shard_moves_conversations_only_to_the_new_shard(
    ids: list[str], count: int
) -> None:
    before, after = shard_names("c", count), shard_names("c", count + 1)
    for cid in ids:
        moved_to = shard_for(cid, after)
        assert moved_to == shard_for(cid, before) or moved_to == after[-1]


@given(st.lists(IDS, min_size=1, max_size=50), st.integers(min_value=2, max_value=12), st.data())
def test_removing_a_shard_moves_only_the_conversations_it_held(
    ids: list[str], count: int, data: st.DataObject
) -> None:
    shards = shard_names("c", count)
    gone = data.draw(st.sampled_from(shards))
    rest = [s for s in shards if s != gone]
    for cid in ids:
        if shard_for(cid, shards) != gone:
            assert shard_for(cid, rest) == shard_for(cid, shards)


@given(st.lists(IDS, min_size=1, max_size=20), st.permutations(shard_names("c", 5)))
def test_the_route_depends_on_the_shard_names_not_their_order(
    ids: list[str], order: list[str]
) -> None:
    for cid in ids:
        assert shard_for(cid, order) == shard_for(cid, shard_names("c", 5))


@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_growing_by_one_shard_moves_about_one_in_n_plus_one(count: int) -> None:
    ids = [f"conv-{i}" for i in range(4000)]
    before, after = shard_names("c", count), shard_names("c", count + 1)
    moved = sum(shard_for(cid, before) != shard_for(cid, after) for cid in ids)
    expected = len(ids) / (count + 1)
    assert 0.8 * expected < moved < 1.2 * expected
    spread = [sum(shard_for(cid, after) == s for cid in ids) for s in after]
    assert min(spread) > 0.8 * len(ids) / (count + 1)


def test_the_route_is_the_same_in_every_process_and_run() -> None:
    # a fixed vector: the route may never change between versions or machines
    shards = shard_names("chat", 4)
    assert [shard_for(f"conv-{i}", shards)[-1] for i in range(12)] == list("232003131011")


def test_no_shards_or_a_count_below_one_is_refused_with_the_names() -> None:
    with pytest.raises(ValueError, match="Conversation c-1 cannot be routed"):
        shard_for("c-1", [])
    with pytest.raises(ValueError, match="Cluster chat needs at least one shard, not 0"):
        shard_names("chat", 0)


def test_the_cluster_package_and_the_cli_import_without_loading_ray(tmp_path: Path) -> None:
    code = (
        "import sys, parlour.actors.cluster, parlour.actors.app._cli\n"
        "sys.exit(1 if 'ray' in sys.modules else 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_cluster_package_all_lists_exactly_its_public_names() -> None:
    import parlour.actors.cluster as cluster

    public = {n for n in vars(cluster) if not n.startswith("_") and n != "annotations"}
    public = {n for n in public if not isinstance(getattr(cluster, n), type(cluster))}
    assert sorted(cluster.__all__) == cluster.__all__ and set(cluster.__all__) == public
