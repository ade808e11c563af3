"""The body record (the snapshot less its messages and its stored version): a save that
leaves it as it was skips writing it (and encoding it: the store reuses the last save's
bytes only when the new body would encode to them), one that changes it writes it, and every
load, of the current record or of a kept version, gives the body its save had."""

from __future__ import annotations

import datetime as dt
import gc
import tempfile
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.runtime import Artifact, ConversationContext, tool_from_function, type_alias
from parlour.runtime.blocks import PojoBlock, SkillBlock, ToolDefinitionBlock
from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import LmdbStore
from parlour.stores._body import body_after, remembered
from parlour.stores._packed import unpacked_body
from parlour.stores._records import encode_body


def _raw_body(path: Path, cid: str) -> bytes:
    """The body record as stored (packed, from 1 KiB on, where that saves)."""
    env = lmdb.open(str(path), max_dbs=16, readonly=True, lock=False)
    with env.begin() as txn:
        raw = txn.get(cid.encode(), db=env.open_db(b"bodies", txn=txn, create=False))
    env.close()
    assert raw is not None
    return bytes(raw)


def _stored_body(path: Path, cid: str) -> bytes:
    return bytes(unpacked_body(_raw_body(path, cid), cid))


def test_every_body_change_is_written_and_read_back_and_the_rest_skip_it(tmp_path: Path) -> None:
    c = ConversationContext("c1", user_id="alice")
    c.add_user_message("first")
    objectives = {}
    with LmdbStore(tmp_path) as store:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        for turn in range(6):
            if turn % 2:
                c.put_main_objective("goal", f"objective {turn}")  # the body changes
            c.add_user_message(f"turn {turn}")
            c.stored_version = store.save_context(c.to_snapshot(), "alice")
            objectives[c.stored_version] = dict(c.to_snapshot().objective_slots())
        for version, expected in objectives.items():
            kept = store.load_version("c1", version, "alice")
            assert kept is not None and kept.stored_version == version
            assert {k: getattr(b, "text", b) for k, b in kept.objective_slots()} == {
                k: getattr(b, "text", b) for k, b in expected.items()
            }
    assert _stored_body(tmp_path, "c1") == encode_body(c.to_snapshot())
    with LmdbStore(tmp_path) as reopened:
        loaded = reopened.load("c1", "alice")
        assert loaded is not None and loaded.stored_version == c.stored_version == 7
        assert encode_body(loaded) == encode_body(c.to_snapshot())


def test_a_body_is_the_same_bytes_whatever_version_the_snapshot_was_loaded_at() -> None:
    c = ConversationContext("c1", user_id="alice")
    c.add_user_message("first")
    before = encode_body(c.to_snapshot())
    c.stored_version = 41
    assert encode_body(c.to_snapshot()) == before


# -- a body kept from the last save: reused only when it would encode to the same bytes -------


@type_alias("test:counted")
class _Counted(Artifact, kw_only=True):
    n: Any = 1


def _bool_in_an_artifact(c: ConversationContext) -> None:
    artifact = next(iter(c.artifact_registry.get_all_artifacts().values()))
    assert isinstance(artifact, _Counted)
    artifact.n = True  # equal to 1, encoded as true


def _bool_in_a_pojo_slot(c: ConversationContext) -> None:
    block = c.get_main_objective()["data"]
    assert isinstance(block, PojoBlock)
    block.value["n"] = True  # the frozen block's dict, changed in place: equal to 1


def _same_moment_elsewhere(c: ConversationContext) -> None:
    c.created_at = c.created_at.astimezone(dt.timezone(dt.timedelta(hours=2)))  # equal


@pytest.mark.parametrize(
    "change",
    [_bool_in_an_artifact, _bool_in_a_pojo_slot, _same_moment_elsewhere],
)
def test_a_body_that_compares_equal_to_the_last_but_encodes_otherwise_is_written(
    tmp_path: Path, change: Callable[[ConversationContext], None]
) -> None:
    """Values that are equal and still encode apart (``1`` and ``True``, one moment in two
    offsets, a PojoBlock's value changed in place) get the new body into the store."""
    c = ConversationContext("c1", user_id="alice")
    if change is _bool_in_a_pojo_slot:  # otherwise none: a body holding one is never kept
        c.put_main_objective("data", {"n": 1})
    c.artifact_registry.register(_Counted(n=1))
    c.add_user_message("first")
    with LmdbStore(tmp_path / "db") as store:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        c.add_user_message("second")
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        before = encode_body(c.to_snapshot())
        change(c)
        c.add_user_message("third")
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        assert encode_body(c.to_snapshot()) != before
        loaded = store.load("c1", "alice")
        assert loaded is not None and encode_body(loaded) == encode_body(c.to_snapshot())
    assert _stored_body(tmp_path / "db", "c1") == encode_body(c.to_snapshot())


def test_changing_a_saved_snapshots_lists_afterwards_does_not_decide_the_next_body(
    tmp_path: Path,
) -> None:
    """A store keeps copies of what a body was encoded from, so a caller changing the lists
    of a snapshot it saved cannot make the next save's new body look like the last one."""
    c = ConversationContext("c1", user_id="alice")
    c.add_user_message("first")
    late = ToolDefinitionBlock(name="late", description="declared after the save")
    with LmdbStore(tmp_path / "db") as store:
        saved = c.to_snapshot()
        c.stored_version = store.create_context(saved, "alice")
        saved.declared_tools.append(late)  # the caller's own snapshot, changed after the save
        c.add_tool(late)
        c.add_user_message("second")
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        loaded = store.load("c1", "alice")
        assert loaded is not None and [t.name for t in loaded.declared_tools] == ["late"]


def _lookup(city: str) -> str:
    """Look a city up."""
    return city


_BODY_CHANGES: dict[str, Callable[[ConversationContext, int], object]] = {
    "a message": lambda c, i: c.add_user_message(f"message {i}"),
    "an objective slot": lambda c, i: c.put_main_objective(f"slot {i % 3}", f"objective {i}"),
    "a pojo slot": lambda c, i: c.put_main_objective("pojo", {"n": i % 2 == 0}),
    "a tool definition": lambda c, i: c.add_tool(
        ToolDefinitionBlock(name=f"tool_{i % 4}", description=f"tool {i}")
    ),
    "a function tool": lambda c, i: c.add_tool(tool_from_function(_lookup)),
    "a skill": lambda c, i: c.admit_skill(SkillBlock(name=f"skill_{i % 3}", body=f"do {i}")),
    "an artifact": lambda c, i: c.artifact_registry.register(_Counted(n=i if i % 2 else True)),
    "a flag": lambda c, i: setattr(c, "compactable", i % 2 == 0),
    "a render": lambda c, i: c.prepare_messages_for_llm(),
}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(sorted(_BODY_CHANGES)), min_size=1, max_size=12))
def test_after_any_changes_and_saves_the_stored_body_is_the_one_the_context_encodes(
    changes: list[str],
) -> None:
    """Whatever a conversation goes through (objective puts before and after the freeze,
    tools, skills, artifacts, flags, renders), each save leaves the body its snapshot
    encodes, read back as such."""
    with tempfile.TemporaryDirectory() as tmp, LmdbStore(Path(tmp) / "db") as store:
        c = ConversationContext("c1", user_id="alice")
        c.add_user_message("first")
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        for i, change in enumerate(changes):
            _BODY_CHANGES[change](c, i)
            snapshot = c.to_snapshot()
            c.stored_version = store.save_context(snapshot, "alice")
            loaded = store.load("c1", "alice")
            assert loaded is not None and encode_body(loaded) == encode_body(snapshot)


def test_a_body_that_would_not_read_back_is_refused_and_the_stored_record_still_loads(
    tmp_path: Path,
) -> None:
    """A flag set to ``1`` where a bool belongs encodes, and then never decodes: the save
    is refused at once, and the conversation loads as its last save left it."""
    c = ConversationContext("c1", user_id="alice")
    c.add_user_message("first")
    with LmdbStore(tmp_path / "db") as store:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        kept = encode_snapshot(c.to_snapshot())
        c.interactive = 1  # type: ignore[assignment]
        c.add_user_message("second")
        with pytest.raises(ValueError, match=r"c1 would not read back .*interactive"):
            store.save_context(c.to_snapshot(), "alice")
        fresh = ConversationContext("c2", user_id="alice", created_at=c.created_at)
        fresh.interactive = 1  # type: ignore[assignment]
        with pytest.raises(ValueError, match="nothing was written"):
            store.create_context(fresh.to_snapshot(), "alice")
        loaded = store.load("c1", "alice")
        assert loaded is not None and encode_snapshot(loaded) == kept
        assert store.load("c2", "alice") is None


def test_the_store_keeps_no_copy_of_the_bodies_it_wrote(tmp_path: Path) -> None:
    """An agent's body holds its objective and tool definitions (tens of KiB a conversation):
    once written, the store remembers what proves the next body the same, not its bytes,
    and a later save still skips an unchanged body, writes a changed one, and loads back."""
    goal = "Answer from the survey, citing the station. " * 500  # 22 KiB, shared
    with LmdbStore(tmp_path) as store:
        saved = []
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for n in range(40):
            c = ConversationContext(f"c{n}", user_id="alice")
            c.put_main_objective("goal", goal)
            c.add_user_message("first")
            c.stored_version = store.create_context(c.to_snapshot(), "alice")
            c.add_user_message("second")  # a whole save proving the body the same
            c.stored_version = store.save_context(c.to_snapshot(), "alice")
            saved.append((c.conversation_id, c.stored_version))
            del c
        gc.collect()
        kept = tracemalloc.take_snapshot().compare_to(before, "filename")
        tracemalloc.stop()
        per_conversation = sum(s.size_diff for s in kept) / 40
        assert per_conversation < len(goal) / 4, per_conversation  # not the body's bytes
        c = store.load("c7", "alice").to_conversation()  # type: ignore[union-attr]
        c.add_user_message("third")
        c.stored_version = store.save_context(c.to_snapshot(), "alice")  # body unchanged
        c.put_main_objective("goal", "A new goal.")
        c.stored_version = store.save_context(c.to_snapshot(), "alice")  # body changed
        c.put_main_objective("goal", goal)
        c.stored_version = store.save_context(c.to_snapshot(), "alice")  # and back
        loaded = store.load("c7", "alice")
        assert loaded is not None and encode_body(loaded) == encode_body(c.to_snapshot())
        assert [v.version for v in store.get_version_history("c7", "alice")] == [5, 4, 3, 2, 1]
        earlier = store.load_version("c7", 4, "alice")
        assert earlier is not None
        assert "A new goal." in encode_body(earlier).decode() and goal not in str(earlier)
    assert _stored_body(tmp_path, "c7") == encode_body(c.to_snapshot())


def _agent_like(cid: str) -> ConversationContext:
    """A conversation carrying what an agent's does: an objective and twenty tools."""
    c = ConversationContext(cid, user_id="alice")
    c.put_main_objective("goal", "Answer from the survey, citing the station. " * 20)

    def forecast(city: str, days: int = 3, units: str = "metric", hourly: bool = False) -> str:
        """The weather forecast for a city: the next days, in metric or imperial units."""
        return city

    for n in range(20):
        forecast.__name__ = f"forecast_{n}"
        c.add_tools([tool_from_function(forecast)])
    c.add_user_message("hello")
    return c


def test_a_large_body_is_stored_packed_and_reads_back_now_and_at_every_version(
    tmp_path: Path,
) -> None:
    """From 1 KiB on a body is stored compressed (an agent's objective and tools shrink
    to a fraction); a small one stays plain JSON; both read back, current and kept."""
    big, small = _agent_like("big"), ConversationContext("small", user_id="alice")
    small.add_user_message("hello")
    with LmdbStore(tmp_path) as store:
        for c in (big, small):
            c.stored_version = store.create_context(c.to_snapshot(), "alice")
        big.put_main_objective("goal", "A shorter goal.")  # a body change: a new record
        big.add_user_message("again")
        big.stored_version = store.save_context(big.to_snapshot(), "alice")
        first = store.load_version("big", 1, "alice")
    raw, plain = _raw_body(tmp_path, "big"), encode_body(big.to_snapshot())
    assert raw[:3] == b"\x00z1" and len(raw) < len(plain) / 3
    assert _raw_body(tmp_path, "small") == encode_body(small.to_snapshot())  # plain JSON
    assert first is not None and "Answer from the survey" in encode_body(first).decode()
    with LmdbStore(tmp_path) as reopened:
        loaded = reopened.load("big", "alice")
        assert loaded is not None and encode_body(loaded) == plain
        assert len(loaded.declared_tools) == 20


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[: len(raw) // 2],  # cut short
        lambda raw: raw[:3] + b"not zlib at all",
        lambda raw: raw[:40] + bytes([raw[40] ^ 0xFF]) + raw[41:],
        lambda raw: b"\x00z1" + _bomb(),  # would unpack past 256 MiB
    ],
    ids=["cut", "garbage", "flipped", "bomb"],
)
def test_a_damaged_packed_body_is_a_clear_error_naming_it_and_the_rest_still_loads(
    tmp_path: Path, damage: Callable[[bytes], bytes]
) -> None:
    with LmdbStore(tmp_path) as store:
        for cid in ("hurt", "fine"):
            c = _agent_like(cid)
            store.create_context(c.to_snapshot(), "alice")
    env = lmdb.open(str(tmp_path), max_dbs=16)
    with env.begin(write=True) as txn:
        bodies = env.open_db(b"bodies", txn=txn)
        raw = txn.get(b"hurt", db=bodies)
        assert raw is not None and bytes(raw)[:3] == b"\x00z1"  # packed: what is damaged
        txn.put(b"hurt", damage(bytes(raw)), db=bodies)
    env.close()
    with LmdbStore(tmp_path) as store:
        with pytest.raises(CorruptSnapshotError, match="hurt"):
            store.load("hurt", "alice")
        fine = store.load("fine", "alice")
        assert fine is not None and len(fine.declared_tools) == 20
        assert [cid for cid, _ in store.undecodable()] == ["hurt"]


def _bomb() -> bytes:
    """zlib of 300 MiB of spaces (about 300 KiB), made a MiB at a time."""
    deflate = zlib.compressobj(6)
    chunk = b" " * (1 << 20)
    return b"".join(deflate.compress(chunk) for _ in range(300)) + deflate.flush()


def test_a_body_is_remembered_by_a_digest_and_proves_the_next_one_the_same_or_not() -> None:
    """The body is the very bytes ``encode_body`` writes (no block lists: its scalar fields'
    bytes); what a store remembers of it holds no copy of them, only a 32-byte digest of its
    scalars and its lists, and that proves the next body the same (reused, nothing
    encoded) or tells a changed one (encoded anew), a scalar or a list changed."""
    c = ConversationContext("c-plain", user_id="alice")
    c.add_user_message("hello")
    body = body_after(c.to_snapshot(), None)
    assert body.data == encode_body(c.to_snapshot())
    kept = remembered(body)
    assert kept.data is None and len(kept.digest) == 32 and kept.digest == body.digest
    c.add_user_message("more")  # the body is unchanged
    assert body_after(c.to_snapshot(), kept) is kept
    c.interactive = True  # a scalar changed
    renamed = body_after(c.to_snapshot(), kept)
    assert renamed is not kept and renamed.data == encode_body(c.to_snapshot())
    assert b'"interactive":true' in renamed.data and renamed.digest != kept.digest
    c.put_main_objective("goal", "a goal")  # a block list: the body is encoded whole
    with_goal = body_after(c.to_snapshot(), remembered(renamed))
    assert with_goal.digest == renamed.digest and with_goal.data == encode_body(c.to_snapshot())


def test_a_scalar_changed_in_a_bare_conversation_is_written_and_loads_changed(
    tmp_path: Path,
) -> None:
    """A body with no block lists is remembered without its bytes too: a later change of a
    scalar is still written (and its earlier version keeps the old value)."""
    c = ConversationContext("c-bare", user_id="alice")
    c.add_user_message("hello")
    with LmdbStore(tmp_path) as store:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        c.interactive = True
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        c.add_user_message("again")
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        loaded = store.load("c-bare", "alice")
        assert loaded is not None and loaded.interactive is True
        first = store.load_version("c-bare", 1, "alice")
        assert first is not None and first.interactive is False
    assert _stored_body(tmp_path, "c-bare") == encode_body(c.to_snapshot())
