"""LmdbStore writes only what changed: whatever happens to the messages between saves, a
fresh store on the same directory loads exactly the conversation last saved."""

from __future__ import annotations

import tempfile
from pathlib import Path

import lmdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.runtime import ConversationContext, IncomingMessage, OutgoingMessage
from parlour.runtime.blocks import PojoBlock, TextBlock
from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import LmdbStore
from parlour.stores._records import plan_messages


def _conversation(n: int) -> ConversationContext:
    c = ConversationContext("c1", user_id="alice")
    for i in range(n):
        c.add_user_message(f"question {i}")
        c.add_message(IncomingMessage(f"answer {i}"))
    return c


def _reloaded(path: Path) -> ConversationContext:
    with LmdbStore(path) as fresh:  # a new instance: nothing remembered in memory
        snapshot = fresh.load("c1", "alice")
    assert snapshot is not None
    return snapshot.to_conversation()


def _same(a: ConversationContext, b: ConversationContext) -> bool:
    """Equal as stored: the encoded bytes (``==`` takes 1 for True and 0.0 for -0.0)."""
    return encode_snapshot(a.to_snapshot()) == encode_snapshot(b.to_snapshot())


def test_a_flag_set_on_a_saved_message_is_saved(tmp_path: Path) -> None:
    c = _conversation(3)
    with LmdbStore(tmp_path) as store:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        c.messages[1].set_cache(True)
        c.messages[2].blocks.append(TextBlock(text="appended in place"))
        c.messages[0].blocks[0] = TextBlock(text="replaced in place")
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
    reloaded = _reloaded(tmp_path)
    assert reloaded.messages[1].cache is True
    assert reloaded.messages[2].blocks[-1] == TextBlock(text="appended in place")
    assert reloaded.messages[0].blocks[0] == TextBlock(text="replaced in place")
    assert _same(reloaded, c)


def test_a_shortened_history_leaves_no_stale_messages(tmp_path: Path) -> None:
    c = _conversation(5)
    with LmdbStore(tmp_path) as store:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        c.messages = [OutgoingMessage("=== CONVERSATION SUMMARY === earlier"), *c.messages[-2:]]
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
    assert _same(_reloaded(tmp_path), c)


def test_a_deleted_then_recreated_conversation_has_only_its_new_messages(tmp_path: Path) -> None:
    with LmdbStore(tmp_path) as store:
        store.create_context(_conversation(4).to_snapshot(), "alice")
        assert store.delete("c1", "alice")
        fresh = _conversation(1)
        fresh.stored_version = store.create_context(fresh.to_snapshot(), "alice")
    assert _same(_reloaded(tmp_path), fresh)


def test_a_missing_message_record_is_a_clear_error(tmp_path: Path) -> None:
    with LmdbStore(tmp_path) as store:
        store.create_context(_conversation(2).to_snapshot(), "alice")
    env = lmdb.open(str(tmp_path), max_dbs=8)
    with env.begin(write=True) as txn:
        messages = env.open_db(b"messages", txn=txn)
        txn.delete(b"c1\x00" + (3).to_bytes(8, "big"), db=messages)
    env.close()
    with LmdbStore(tmp_path) as store, pytest.raises(CorruptSnapshotError, match="3 of its 4"):
        store.load("c1", "alice")


def test_an_id_holding_nul_is_refused(lmdb_store: LmdbStore) -> None:
    with pytest.raises(ValueError, match="NUL"):
        lmdb_store.create_context(ConversationContext("a\x00b").to_snapshot(), "alice")


@pytest.mark.parametrize(("before", "after"), [(1, True), (True, 1), (0.0, -0.0), (1, 1.0)])
def test_a_value_changed_to_an_equal_but_different_one_is_written(
    tmp_path: Path, before: object, after: object
) -> None:
    c = _conversation(2)
    c.messages[1].blocks.append(PojoBlock(value={"n": before}))
    with LmdbStore(tmp_path) as store:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        c.messages[1].blocks[-1] = PojoBlock(value={"n": after})
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
    [block] = _reloaded(tmp_path).messages[1].blocks
    assert isinstance(block, PojoBlock)
    assert repr(block.value["n"]) == repr(after)


def test_a_save_plans_only_the_messages_whose_bytes_changed() -> None:
    c = _conversation(3)
    base = c.to_snapshot().messages
    c.messages[0] = c.to_snapshot().to_conversation().messages[0]  # a new object, same bytes
    c.messages[2].set_cache(True)  # changed
    c.add_user_message("new")
    plan = plan_messages(base, c.to_snapshot().messages, "c1")
    assert [index for index, _ in plan.writes] == [2, 6]
    assert plan_messages(base, base, "c1").writes == []


# Each step: ("add", text) appends, ("flag", i) flags message i, ("edit", i) replaces
# message i, ("drop", i) removes message i, ("swap", i) replaces message i's first block in
# place; the conversation is saved after every step.
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.text(max_size=8)),
        st.tuples(st.sampled_from(["flag", "edit", "drop", "swap"]), st.integers(0, 30)),
        st.tuples(
            st.just("value"),
            st.tuples(st.integers(0, 30), st.sampled_from([0, 1, True, False, 0.0, -0.0, 1.0])),
        ),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps)
def test_any_sequence_of_edits_and_saves_reloads_as_last_saved(
    steps: list[tuple[str, object]],
) -> None:
    c = _conversation(2)
    with tempfile.TemporaryDirectory() as tmp:
        with LmdbStore(tmp) as store:
            c.stored_version = store.create_context(c.to_snapshot(), "alice")
            for op, arg in steps:
                if op == "add":
                    c.add_user_message(f"said {arg}")
                elif op == "value" and c.messages:  # equal under ==, not the same bytes
                    assert isinstance(arg, tuple)
                    index, value = arg
                    m = c.messages[int(index) % len(c.messages)]
                    if m.blocks and isinstance(m.blocks[-1], PojoBlock):
                        m.blocks[-1] = PojoBlock(value={"n": value})
                    else:
                        m.blocks.append(PojoBlock(value={"n": value}))
                elif c.messages:
                    i = int(str(arg)) % len(c.messages)
                    if op == "flag":
                        c.messages[i].set_cache(not c.messages[i].cache)
                    elif op == "edit":
                        c.messages[i] = OutgoingMessage(f"edited {i}")
                    elif op == "swap" and c.messages[i].blocks:  # a block replaced in place
                        c.messages[i].blocks[0] = TextBlock(text=f"swapped {arg}")
                    else:
                        del c.messages[i]
                c.stored_version = store.save_context(c.to_snapshot(), "alice")
        assert _same(_reloaded(Path(tmp)), c)
