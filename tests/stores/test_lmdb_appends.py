"""LmdbStore's appends: a save that only adds writes the new records and the header, and
leaves the store exactly as the whole snapshot's save would have, every version included."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.runtime import ConversationContext, IncomingMessage, OutgoingMessage
from parlour.runtime.blocks import PojoBlock, TextBlock
from parlour.runtime.errors import ConversationNotFoundError, StaleVersionError
from parlour.runtime.snapshots import Appended, MessageSnapshot, OpenTurn, encode_snapshot
from parlour.stores import LmdbStore, MemoryStore

OPS = st.lists(
    st.sampled_from(
        ["answer", "user", "entry", "turn", "edit", "drop", "objective", "save", "later", "reopen"]
    ),
    max_size=40,
)


def _apply(context: ConversationContext, op: str, n: int) -> None:
    if op == "answer":
        context.add_message(IncomingMessage(f"answer {n}"))
    elif op == "user":
        context.add_user_message(f"question {n}")
    elif op == "entry":
        context.usage_ledger.append({"call": n, "input_tokens": 10 * n})
    elif op == "turn":
        context.open_turn = OpenTurn(id=f"t{n}", step="answer", start=n % 3)
    elif op == "edit" and context.messages:
        context.messages[n % len(context.messages)].blocks.append(TextBlock(text=f"edit {n}"))
    elif op == "drop" and len(context.messages) > 1:
        del context.messages[n % len(context.messages)]
    elif op == "objective":
        context.put_main_objective(f"rule {n}", "Answer briefly.")


def _save(store: LmdbStore, context: ConversationContext, later: bool) -> Callable[[], int] | None:
    """Save as the service does: an append where the conversation only added, else whole;
    ``later``: deferred (the handle returned), else waited (None)."""
    appended = context.changes_since_save()
    if appended is not None:
        if later:
            settle = store.append_context_later(appended, "alice")
        else:
            context.stored_version = store.append_context(appended, "alice")
            context.mark_saved(context.stored_version, appended=appended)
            return None
        context.stored_version = appended.version + 1
        context.mark_saved(context.stored_version, appended=appended)
        return settle
    snapshot = context.to_snapshot()
    later_settle = store.save_context_later(snapshot, "alice") if later else None
    if later_settle is None:
        context.stored_version = store.save_context(snapshot, "alice")
    else:
        context.stored_version = snapshot.stored_version + 1
    context.mark_saved(context.stored_version, snapshot.messages)
    return later_settle


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_any_mix_of_appends_and_whole_saves_stores_what_whole_saves_store(ops: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        whole = MemoryStore()  # the reference: every save whole
        context = ConversationContext("c1", user_id="alice")
        context.add_user_message("The first question")
        store = LmdbStore(path)
        try:
            context.stored_version = store.create_context(context.to_snapshot(), "alice")
            whole.create_context(context.to_snapshot(), "alice")
            context.mark_saved(context.stored_version, context.to_snapshot().messages)
            pending: list[Callable[[], int]] = []
            for n, op in enumerate(ops):
                if op in ("save", "later"):
                    reference = context.to_snapshot()
                    settle = _save(store, context, later=op == "later")
                    whole.save_context(reference, "alice")
                    if settle is None:
                        pending.clear()  # committed with it
                    else:
                        pending.append(settle)
                elif op == "reopen":
                    for settle in pending:
                        settle()
                    pending.clear()
                    store.close()
                    store = LmdbStore(path)  # remembers nothing it wrote
                else:
                    _apply(context, op, n)
            for settle in pending:
                settle()
            _same_everywhere(store, whole)
        finally:
            store.close()
        with LmdbStore(path) as fresh:
            _same_everywhere(fresh, whole)


def _same_everywhere(store: LmdbStore, whole: MemoryStore) -> None:
    """The current version and every kept one read back exactly as the whole saves'."""
    stored, expected = store.load("c1", "alice"), whole.load("c1", "alice")
    assert stored is not None and expected is not None
    assert encode_snapshot(stored) == encode_snapshot(expected)
    versions = [v.version for v in store.get_version_history("c1", "alice")]
    kept = [v.version for v in whole.get_version_history("c1", "alice")]
    assert versions[0] == stored.stored_version and set(versions) <= set(kept)
    for version in versions:
        ours = store.load_version("c1", version, "alice")
        theirs = whole.load_version("c1", version, "alice")
        assert ours is not None and theirs is not None
        if version != stored.stored_version:  # LMDB keeps the open-turn record for the
            theirs = msgspec.structs.replace(theirs, turn=None)  # current version alone
        assert encode_snapshot(ours) == encode_snapshot(theirs), version


def test_hundreds_of_appends_read_back_at_every_version(tmp_path: Path) -> None:
    context = ConversationContext("c1", user_id="alice")
    context.add_user_message("start")
    whole = MemoryStore(keep_versions=None)
    with LmdbStore(tmp_path) as store:
        context.stored_version = store.create_context(context.to_snapshot(), "alice")
        whole.create_context(context.to_snapshot(), "alice")
        context.mark_saved(context.stored_version, context.to_snapshot().messages)
        for n in range(600):  # past the chain's length and bytes: checkpoints among appends
            context.add_message(IncomingMessage(f"answer {n} " + "x" * (n % 50)))
            reference = context.to_snapshot()
            assert _save(store, context, later=False) is None
            whole.save_context(reference, "alice")
        _same_everywhere(store, whole)


def _stored(tmp_path: Path) -> tuple[LmdbStore, ConversationContext]:
    store = LmdbStore(tmp_path)
    context = ConversationContext("c1", user_id="alice")
    context.add_user_message("Where is my order?")
    context.stored_version = store.create_context(context.to_snapshot(), "alice")
    context.mark_saved(context.stored_version, context.to_snapshot().messages)
    context.add_message(IncomingMessage("It shipped."))
    return store, context


def test_an_append_from_an_old_version_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    store, context = _stored(tmp_path)
    with store:
        appended = context.changes_since_save()
        assert appended is not None
        store.append_context(appended, "alice")
        with pytest.raises(StaleVersionError):
            store.append_context(appended, "alice")  # version 1 again: the record is at 2
        settle = store.append_context_later(appended, "alice")
        with pytest.raises(StaleVersionError):
            settle()
        assert store.version_of("c1", "alice") == 2


def test_another_users_append_is_refused_as_their_save_is(tmp_path: Path) -> None:
    store, context = _stored(tmp_path)
    with store:
        appended = context.changes_since_save()
        assert appended is not None
        with pytest.raises(PermissionError):
            store.append_context(appended, "mallory")
        store.delete("c1", "alice")
        with pytest.raises(ConversationNotFoundError):
            store.append_context(appended, "alice")
        assert not store.exists("c1", "alice")


def test_an_append_that_does_not_start_where_its_version_ends_is_refused(tmp_path: Path) -> None:
    store, context = _stored(tmp_path)
    with store:
        appended = context.changes_since_save()
        assert appended is not None
        for wrong in (appended._replace(start=0), appended._replace(usage_start=3)):
            with pytest.raises(ValueError, match="does not follow its version 1"):
                store.append_context(wrong, "alice")
        loaded = store.load("c1", "alice")
        assert loaded is not None and len(loaded.messages) == 1 and loaded.stored_version == 1


def test_a_new_message_that_would_not_read_back_is_refused_by_its_index(tmp_path: Path) -> None:
    store, context = _stored(tmp_path)
    with store:
        value: dict[str, object] = {"when": "now"}
        bad = OutgoingMessage(blocks=[PojoBlock(value=value)])
        value["when"] = object()  # changed in place after it entered
        appended = context.changes_since_save()
        assert appended is not None
        broken = appended._replace(messages=[*appended.messages, MessageSnapshot.of(bad)])
        with pytest.raises(ValueError, match="message 2 would not read back"):
            store.append_context(broken, "alice")
        with pytest.raises(ValueError, match="message 2 would not read back"):
            store.append_context_later(broken, "alice")  # at once, nothing queued
        assert store.version_of("c1", "alice") == 1


@pytest.mark.parametrize("store", [MemoryStore()], ids=["memory"])
def test_a_store_that_takes_no_appends_says_so_and_refuses_them(store: MemoryStore) -> None:
    assert store.appends is False
    appended = Appended("c1", 1, 1, [], 0, [], None)
    with pytest.raises(NotImplementedError, match="takes no appends"):
        store.append_context(appended, "alice")
    with pytest.raises(NotImplementedError, match="takes no appends"):
        store.append_context_later(appended, "alice")


def test_an_append_over_a_missing_body_record_leaves_its_versions_reading_as_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append reads no body: over a damaged record (its body gone) it is acknowledged,
    and the conversation and the checkpoint it recorded (which refers to the stored body)
    are corrupt snapshots naming it, never a body from elsewhere."""
    from parlour.runtime.errors import CorruptSnapshotError
    from parlour.stores.lmdb import _versions

    monkeypatch.setattr(_versions, "MAX_CHAIN", 0)  # every version a checkpoint
    store, context = _stored(tmp_path)
    with store:
        with store._directory.env.begin(write=True) as txn:  # damage: the body record gone
            txn.delete(b"c1", db=store._dbs.bodies)
        appended = context.changes_since_save()
        assert appended is not None
        assert store.append_context(appended, "alice") == 2
        with pytest.raises(CorruptSnapshotError, match="c1"):
            store.load("c1", "alice")
        for version in (1, 2):
            with pytest.raises(CorruptSnapshotError, match=r"Version \d of stored conversation c1"):
                store.load_version("c1", version, "alice")
