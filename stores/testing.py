"""The ``PersistentStore`` conformance suite: what every store promises, as pytest tests.

A store runs it by subclassing ``StoreContract`` in a test module and giving it a ``store``
fixture (pytest collects the subclass; the suite needs pytest, a test dependency)::

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store(self, clock): return MyStore(now=clock)

``clock`` is a wall clock that moves one second per reading: a store that stamps its
saves with it lists and dates versions deterministically. Override ``damage`` to let the
corrupt-record test break a stored record; without it that test is skipped. The suite
closes the store in one test (``close`` twice): a fixture that closes it again afterwards
is fine, since ``close`` is idempotent.

``SessionStoreContract`` is the same for a session cache, with a ``session`` fixture.

Thread-safety: the concurrent-writer tests call the store from several threads at once.

Why this module is long: it is the one suite every store must pass, one test per promise.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

from parlour.runtime import ConversationContext, IncomingMessage, OutgoingMessage
from parlour.runtime.blocks import PojoBlock
from parlour.runtime.errors import (
    ConversationNotFoundError,
    CorruptSnapshotError,
    StaleVersionError,
)
from parlour.runtime.snapshots import encode_snapshot

from ._contract import (
    HOSTILE,
    CountingGate,
    Ticks,
    change_in_place,
    every_call,
    foreign_calls,
    nested,
    raising,
    run_all,
    said,
    save_ledger_edits,
    snapshot,
    stamped,
    with_a_value,
)
from ._protocols import PersistentStore
from ._session_contract import SessionStoreContract
from ._waiting import held_gate, hold

__all__ = ["SessionStoreContract", "StoreContract", "Ticks", "snapshot"]

REFUSED = "User mallory does not own conversation c1"


class StoreContract:
    """The suite. Subclass it with a ``store`` fixture; override ``damage`` if you can."""

    @pytest.fixture
    def clock(self) -> Ticks:
        return Ticks()

    @pytest.fixture
    def store(self, clock: Ticks) -> Iterator[PersistentStore]:
        raise NotImplementedError("A StoreContract subclass provides the store fixture.")

    def damage(self, store: PersistentStore, conversation_id: str) -> None:
        """Make the stored record of ``conversation_id`` undecodable (a store's hook)."""
        pytest.skip(f"{type(self).__name__} has no damage hook")

    # -- declared capabilities ---------------------------------------------------------------

    def test_every_capability_is_declared_as_a_bool_and_the_store_is_a_persistent_store(
        self, store: PersistentStore
    ) -> None:
        declared = (store.shared, store.lets_go_while_waiting, store.defers_saves, store.appends)
        assert [type(flag) for flag in declared] == [bool, bool, bool, bool]
        assert isinstance(store, PersistentStore)  # every member the protocol names

    def test_an_append_loads_back_as_the_whole_save_would_or_is_refused_as_not_taken(
        self, store: PersistentStore
    ) -> None:
        context = ConversationContext("c1", user_id="alice")
        context.add_user_message("Are you working?")
        context.stored_version = store.create_context(context.to_snapshot(), "alice")
        context.mark_saved(context.stored_version, context.to_snapshot().messages)
        context.add_message(IncomingMessage("Yes."))
        context.usage_ledger.append({"input_tokens": 5})
        appended = context.changes_since_save()
        assert appended is not None
        if not store.appends:
            with pytest.raises(NotImplementedError):
                store.append_context(appended, "alice")
            with pytest.raises(NotImplementedError):
                store.append_context_later(appended, "alice")
            with pytest.raises(NotImplementedError):
                asyncio.run(_awaited(store.append_context_async, appended))
            assert store.version_of("c1", "alice") == 1
            return
        whole = context.to_snapshot()
        assert store.append_context(appended, "alice") == 2
        loaded = store.load("c1", "alice")
        whole.stored_version = 2
        assert loaded is not None and encode_snapshot(loaded) == encode_snapshot(whole)
        with pytest.raises(StaleVersionError):
            store.append_context(appended, "alice")
        with pytest.raises(PermissionError):
            store.append_context(appended._replace(version=2), "bob")
        context.stored_version = 2
        context.mark_saved(2, appended=appended)
        context.add_message(IncomingMessage("Still here."))
        again = context.changes_since_save()
        assert again is not None
        assert asyncio.run(_awaited(store.append_context_async, again)) == 3
        assert said(store) == ["Are you working?", "Yes.", "Still here."]

    def test_a_save_made_later_is_answered_by_its_handle_and_loads_back(
        self, store: PersistentStore
    ) -> None:
        store.create_context(snapshot(), "alice")
        settle = store.save_context_later(snapshot(text="second", version=1), "alice")
        if not store.defers_saves:  # saved at once: the handle is settled already
            assert said(store) == ["second"]
        assert settle() == 2
        assert settle() == 2  # asking again answers alike
        assert said(store) == ["second"]
        assert store.version_of("c1", "alice") == 2

    def test_the_async_saves_answer_on_the_loop_as_the_sync_ones_and_refuse_alike(
        self, store: PersistentStore
    ) -> None:
        async def main() -> None:
            assert await store.create_context_async(snapshot(), "alice") == 1
            saving = store.save_context_async(snapshot(text="second", version=1), "alice")
            assert saving.cancel() is False  # the awaiting task's cancel never cancels a save
            assert await saving == 2
            with pytest.raises(StaleVersionError):
                await store.save_context_async(snapshot(text="stale", version=1), "alice")
            with pytest.raises(ConversationNotFoundError):
                await store.save_context_async(snapshot("c2", version=1), "alice")

        asyncio.run(main())
        assert said(store) == ["second"]
        assert store.version_of("c1", "alice") == 2

    def test_a_save_after_one_made_later_commits_after_it_and_both_are_versions(
        self, store: PersistentStore
    ) -> None:
        store.create_context(snapshot(), "alice")
        settle = store.save_context_later(snapshot(text="second", version=1), "alice")
        assert store.save_context(snapshot(text="third", version=2), "alice") == 3
        assert settle() == 2
        assert said(store) == ["third"]
        assert [v.version for v in store.get_version_history("c1", "alice")] == [3, 2, 1]
        kept = store.load_version("c1", 2, "alice")
        assert kept is not None and [m.raw_content for m in kept.messages] == ["second"]

    def test_a_save_made_later_refuses_bad_ids_and_another_users_snapshot_at_once(
        self, store: PersistentStore
    ) -> None:
        store.create_context(snapshot(), "alice")
        with pytest.raises(PermissionError):
            store.save_context_later(snapshot(text="hijacked", version=1, user="bob"), "alice")
        with pytest.raises(ValueError):
            store.save_context_later(snapshot(cid="", version=1, user=None), "alice")
        with pytest.raises(ValueError, match="user id"):
            store.save_context_later(snapshot(version=1, user=None), "al\x00ice")
        assert said(store) == ["Are you working?"]
        assert store.version_of("c1", "alice") == 1

    def test_a_stale_foreign_or_missing_save_made_later_is_refused_by_its_handle(
        self, store: PersistentStore
    ) -> None:
        store.create_context(snapshot(), "alice")
        store.save_context(snapshot(text="second", version=1), "alice")
        stale = store.save_context_later(snapshot(text="stale", version=1), "alice")
        foreign = store.save_context_later(snapshot(text="x", version=2, user="mallory"), "mallory")
        missing = store.save_context_later(snapshot("c2", version=1), "alice")
        with pytest.raises(StaleVersionError):
            stale()
        with pytest.raises(PermissionError, match=REFUSED):
            foreign()
        with pytest.raises(ConversationNotFoundError):
            missing()
        with pytest.raises(StaleVersionError):
            stale()  # again, alike
        assert said(store) == ["second"]
        assert store.version_of("c1", "alice") == 2 and not store.exists("c2", "alice")

    def test_close_keeps_a_save_made_later_before_it_and_may_be_called_again(
        self, store: PersistentStore
    ) -> None:
        store.create_context(snapshot(), "alice")
        settle = store.save_context_later(snapshot(text="second", version=1), "alice")
        store.close()
        store.close()
        assert settle() == 2

    def test_a_store_that_lets_go_while_waiting_gives_the_callers_gate_back_every_time(
        self, store: PersistentStore
    ) -> None:
        """What a gated turn does with the store, done holding a gate: every let-go is
        matched by a take-back, and the thread holds its gate after each call."""
        if not store.lets_go_while_waiting:
            pytest.skip(f"{type(store).__name__} keeps the gate while it waits")
        gate = CountingGate()
        hold(gate)
        try:
            store.create_context(snapshot(), "alice")
            settle = store.save_context_later(snapshot(text="second", version=1), "alice")
            assert store.save_context(snapshot(text="third", version=2), "alice") == 3
            assert settle() == 2
            assert store.load("c1", "alice") is not None
            assert held_gate() is gate
        finally:
            hold(None)
        assert gate.let_go_count == gate.take_back_count

    # -- create, update, missing records ---------------------------------------------------

    def test_a_created_conversation_loads_back_equal_at_its_version(
        self, store: PersistentStore
    ) -> None:
        saved = snapshot()
        assert store.create_context(saved, "alice") == 1
        assert store.load("c1", "alice") == stamped(saved, 1)
        assert store.exists("c1", "alice")
        assert store.version_of("c1", "alice") == 1

    def test_an_update_replaces_the_snapshot_but_keeps_the_title(
        self, store: PersistentStore
    ) -> None:
        store.create_context(snapshot(text="First question"), "alice")
        assert store.save_context(snapshot(text="Retitled question", version=1), "alice") == 2
        assert said(store) == ["Retitled question"]
        [summary] = store.list_conversations("alice")
        assert summary.title == "First question"

    def test_a_second_create_of_ones_own_record_keeps_title_and_creation_time(
        self, store: PersistentStore
    ) -> None:
        store.create_context(snapshot(text="First question"), "alice")
        [before] = store.list_conversations("alice")
        assert store.create_context(snapshot(text="Another question"), "alice") == 2
        [after] = store.list_conversations("alice")
        assert (after.title, after.created_at) == (before.title, before.created_at)
        assert said(store) == ["Another question"]

    def test_an_update_of_a_missing_record_fails_and_creates_nothing(
        self, store: PersistentStore
    ) -> None:
        with pytest.raises(ConversationNotFoundError, match="Conversation c1 has no stored record"):
            store.save_context(snapshot(), "alice")
        assert store.load("c1", "alice") is None
        assert not store.exists("c1", "alice")
        assert store.list_conversations("alice") == []

    def test_unknown_ids_load_none_and_delete_reports_once(self, store: PersistentStore) -> None:
        assert store.load("nope", "alice") is None
        assert store.version_of("nope", "alice") is None
        assert store.get_version_history("nope", "alice") == []
        assert store.load_version("nope", 1, "alice") is None
        store.create_context(snapshot(), "alice")
        assert store.delete("c1", "alice") is True
        assert store.delete("c1", "alice") is False

    def test_a_snapshot_without_an_id_is_refused(self, store: PersistentStore) -> None:
        with pytest.raises(ValueError, match="conversation_id is None"):
            store.create_context(snapshot(cid=None), "alice")
        with pytest.raises(ValueError, match="conversation_id is None"):
            store.save_context(snapshot(cid=None), "alice")

    @pytest.mark.parametrize("bad", ["", "c\x001"])
    def test_an_empty_id_or_one_holding_nul_is_refused_by_every_operation(
        self, store: PersistentStore, bad: str
    ) -> None:
        for attempt in every_call(store, bad, "alice"):
            with pytest.raises(ValueError):
                attempt()
        assert store.list_conversations("alice") == []

    def test_a_user_id_holding_nul_is_refused_by_every_operation(
        self, store: PersistentStore
    ) -> None:
        store.create_context(snapshot(), "alice")
        bad = "al\x00ice"
        listing: Callable[[], object] = lambda: store.list_conversations(bad)  # noqa: E731
        for attempt in [*every_call(store, "c1", bad), listing]:
            with pytest.raises(ValueError, match="user id"):
                attempt()
        assert store.version_of("c1", "alice") == 1

    # -- ownership and isolation -----------------------------------------------------------

    def test_another_user_is_refused_alike_by_every_operation_and_changes_nothing(
        self, store: PersistentStore
    ) -> None:
        saved = snapshot()
        store.create_context(saved, "alice")
        for attempt in foreign_calls(store):
            with pytest.raises(PermissionError) as caught:
                attempt()
            assert str(caught.value) == REFUSED, caught.value
        for alices in (snapshot(text="overwritten", version=1), snapshot(text="overwritten")):
            with pytest.raises(PermissionError):  # a snapshot of alice's, saved by mallory
                (store.save_context if alices.stored_version else store.create_context)(
                    alices, "mallory"
                )
        assert not store.exists("c1", "mallory")
        assert store.list_conversations("mallory") == []
        assert store.load("c1", "alice") == stamped(saved, 1)
        assert said(store) == ["Are you working?"]
        assert store.version_of("c1", "alice") == 1
        assert [v.version for v in store.get_version_history("c1", "alice")] == [1]

    def test_a_snapshot_naming_another_user_is_refused_before_anything_is_written(
        self, store: PersistentStore
    ) -> None:
        with pytest.raises(PermissionError, match="User alice cannot store conversation c1"):
            store.create_context(snapshot(user="bob"), "alice")
        assert not store.exists("c1", "alice") and not store.exists("c1", "bob")
        assert store.load("c1", "alice") is None
        assert store.load("c1", "bob") is None
        store.create_context(snapshot(), "alice")
        with pytest.raises(PermissionError, match="the snapshot belongs to another user"):
            store.save_context(snapshot(text="hijacked", version=1, user="bob"), "alice")
        assert said(store) == ["Are you working?"]
        assert store.version_of("c1", "alice") == 1

    def test_a_snapshot_without_a_user_is_stored_for_the_acting_user(
        self, store: PersistentStore
    ) -> None:
        assert store.create_context(snapshot(user=None), "alice") == 1
        assert store.exists("c1", "alice")
        assert not store.exists("c1", "bob")

    # -- listing and paging ----------------------------------------------------------------

    def test_a_listing_shows_only_the_users_own_conversations_newest_first(
        self, store: PersistentStore
    ) -> None:
        for cid in ("a1", "a2", "a3"):
            store.create_context(snapshot(cid), "alice")
        store.create_context(snapshot("b1", user="bob"), "bob")
        store.save_context(snapshot("a1", "again", version=1), "alice")
        listed = store.list_conversations("alice")
        assert [s.conversation_id for s in listed] == ["a1", "a3", "a2"]
        assert [s.updated_at for s in listed] == sorted(
            (s.updated_at for s in listed), reverse=True
        )
        assert [s.conversation_id for s in store.list_conversations("bob")] == ["b1"]
        assert all(isinstance(s.updated_at, dt.datetime) for s in listed)

    def test_a_deleted_conversation_leaves_the_listing(self, store: PersistentStore) -> None:
        store.create_context(snapshot("a1"), "alice")
        store.create_context(snapshot("a2"), "alice")
        store.delete("a1", "alice")
        assert [s.conversation_id for s in store.list_conversations("alice")] == ["a2"]

    def test_a_listing_is_newest_first_and_pages_cover_it_exactly_once(
        self, store: PersistentStore
    ) -> None:
        for n in range(7):
            store.create_context(snapshot(f"a{n}"), "alice")
        store.save_context(snapshot("a2", text="again", version=1), "alice")  # now newest
        store.create_context(snapshot("b0", user="bob"), "bob")
        whole = store.list_conversations("alice")
        assert [s.conversation_id for s in whole] == ["a2", "a6", "a5", "a4", "a3", "a1", "a0"]
        pages: list[list[str]] = []
        page = store.list_conversations("alice", limit=3)
        walked = []
        while True:
            assert len(page) <= 3
            pages.append([s.conversation_id for s in page])
            walked.extend(page)
            if not page:
                break
            page = store.list_conversations("alice", limit=3, after=page[-1])
        assert pages == [["a2", "a6", "a5"], ["a4", "a3", "a1"], ["a0"], []]
        assert walked == whole
        assert store.list_conversations("alice", limit=0) == []
        with pytest.raises(ValueError, match="cannot be negative"):
            store.list_conversations("alice", limit=-1)

    # -- fencing -----------------------------------------------------------------------------

    def test_a_save_from_a_stale_version_is_refused_and_writes_nothing(
        self, store: PersistentStore
    ) -> None:
        store.create_context(snapshot(), "alice")
        store.save_context(snapshot(text="second", version=1), "alice")
        with pytest.raises(StaleVersionError) as refused:
            store.save_context(snapshot(text="stale", version=1), "alice")
        assert (refused.value.expected, refused.value.found) == (1, 2)
        with pytest.raises(StaleVersionError):
            store.save_context(snapshot(text="from the future", version=3), "alice")
        assert said(store) == ["second"]
        loaded = store.load("c1", "alice")
        assert loaded is not None and loaded.stored_version == 2
        assert store.version_of("c1", "alice") == 2
        assert [v.version for v in store.get_version_history("c1", "alice")] == [2, 1]

    def test_a_snapshot_that_would_not_read_back_is_refused_and_writes_nothing(
        self, store: PersistentStore
    ) -> None:
        """A field holding a value that encodes but never decodes (``1`` for a bool) is
        refused at the save, and the record stays as its last save left it."""
        store.create_context(snapshot(), "alice")
        broken = snapshot(text="second", version=1)
        broken.interactive = 1  # type: ignore[assignment]
        for save in (store.save_context, store.create_context):
            with pytest.raises(ValueError, match="would not read back"):
                save(broken, "alice")
        with pytest.raises(ValueError, match="would not read back"):
            store.create_context(msgspec.structs.replace(broken, conversation_id="c2"), "alice")
        assert said(store) == ["Are you working?"]
        assert store.version_of("c1", "alice") == 1 and not store.exists("c2", "alice")

    # -- the round-trip rule: every acknowledged save loads back ---------------------------

    @pytest.mark.parametrize("where", ["message", "ledger"])
    @pytest.mark.parametrize("hostile", sorted(HOSTILE))
    def test_a_value_changed_in_place_that_would_not_load_is_refused_naming_it(
        self, store: PersistentStore, where: str, hostile: str
    ) -> None:
        """A PojoBlock's value and a ledger entry are the application's own dicts: changed
        in place after they entered, to something a load would refuse or nothing encodes,
        every way of saving refuses them, naming the conversation and the message (or
        entry), and writes nothing; put right, the conversation saves on."""
        context = with_a_value()
        context.stored_version = store.create_context(context.to_snapshot(), "alice")
        kept = msgspec.json.encode(store.load("c1", "alice"))
        context.add_message(OutgoingMessage("", [PojoBlock(value={"k": 1})]))
        context.usage_ledger.append({"type": "model_call", "input_tokens": 2})
        named = change_in_place(context, where, HOSTILE[hostile]())
        refusal = rf"[Cc]onversation c1\b.*{named}\b"
        for save in (store.save_context, store.create_context, store.save_context_later):
            with pytest.raises(ValueError, match=refusal):
                settle = save(context.to_snapshot(), "alice")
                if callable(settle):
                    settle()
        assert store.version_of("c1", "alice") == 1
        assert msgspec.json.encode(store.load("c1", "alice")) == kept
        assert [v.version for v in store.get_version_history("c1", "alice")] == [1]
        change_in_place(context, where, 1)
        context.stored_version = store.save_context(context.to_snapshot(), "alice")
        assert store.load("c1", "alice") == context.to_snapshot()

    @pytest.mark.parametrize("where", ["message", "ledger"])
    def test_a_create_that_would_not_load_is_refused_and_creates_nothing(
        self, store: PersistentStore, where: str
    ) -> None:
        context = with_a_value()
        named = change_in_place(context, where, nested(65))
        with pytest.raises(ValueError, match=rf"[Cc]onversation c1\b.*{named}\b"):
            store.create_context(context.to_snapshot(), "alice")
        assert not store.exists("c1", "alice") and store.list_conversations("alice") == []

    @pytest.mark.parametrize("where", ["message", "ledger"])
    def test_a_value_nested_as_deep_as_a_load_reads_is_saved_and_loads_back(
        self, store: PersistentStore, where: str
    ) -> None:
        """The limit is the load's: a PojoBlock value (or ledger entry) nested exactly 64
        deep is acknowledged and loads back equal, at its version and as the current one."""
        context = with_a_value()
        context.stored_version = store.create_context(context.to_snapshot(), "alice")
        context.add_message(OutgoingMessage("", [PojoBlock(value={"k": 1})]))
        context.usage_ledger.append({"type": "model_call", "input_tokens": 2})
        change_in_place(context, where, nested(63))  # {"k": ...} or {"x": ...}: 64 deep
        context.stored_version = store.save_context(context.to_snapshot(), "alice")
        assert store.load("c1", "alice") == context.to_snapshot()
        kept = store.load_version("c1", 2, "alice")
        assert kept is not None and kept.messages == context.to_snapshot().messages

    def test_a_body_equal_to_the_last_but_encoded_otherwise_is_stored_as_it_is(
        self, store: PersistentStore
    ) -> None:
        """A store that skips re-encoding an unchanged body must not take equal for same:
        a PojoBlock's dict changed in place (``True`` where ``1`` was) and one moment in
        another offset both reach the store."""
        context = ConversationContext("c1", user_id="alice")
        context.put_main_objective("data", {"n": 1})
        context.add_user_message("first")
        context.stored_version = store.create_context(context.to_snapshot(), "alice")
        context.stored_version = store.save_context(context.to_snapshot(), "alice")
        block = context.get_main_objective()["data"]
        block.value["n"] = True  # type: ignore[union-attr]  # the frozen block's own dict
        context.stored_version = store.save_context(context.to_snapshot(), "alice")
        loaded = store.load("c1", "alice")
        assert loaded is not None
        value = loaded.objective_slots()[0][1].value  # type: ignore[union-attr]
        assert msgspec.json.encode(value) == b'{"n":true}'  # equal to {"n": 1}, as it must be
        plain = ConversationContext("c2", user_id="alice")  # no PojoBlock: its body is kept
        plain.add_user_message("first")
        plain.stored_version = store.create_context(plain.to_snapshot(), "alice")
        plain.stored_version = store.save_context(plain.to_snapshot(), "alice")
        plain.created_at = plain.created_at.astimezone(dt.timezone(dt.timedelta(hours=2)))
        plain.stored_version = store.save_context(plain.to_snapshot(), "alice")
        loaded = store.load("c2", "alice")
        assert loaded is not None and loaded.created_at.utcoffset() == dt.timedelta(hours=2)

    def test_a_snapshot_edited_in_place_after_its_save_is_stored_as_edited(
        self, store: PersistentStore
    ) -> None:
        context = ConversationContext("c1", user_id="alice")
        context.add_user_message("First question")
        context.usage_ledger.append({"type": "model_call", "input_tokens": 1})
        saved = context.to_snapshot()
        saved.stored_version = store.create_context(saved, "alice")
        saved.messages[0] = snapshot(text="edited").messages[0]  # the very lists the save had
        saved.messages.append(snapshot(text="added").messages[0])
        saved.usage[0] = {"type": "model_call", "input_tokens": 2}
        saved.stored_version = store.save_context(saved, "alice")
        assert store.load("c1", "alice") == saved
        assert said(store) == ["edited", "added"]

    def test_a_snapshot_saved_without_a_ledger_then_given_one_in_place_is_stored_with_it(
        self, store: PersistentStore
    ) -> None:
        context = ConversationContext("c1", user_id="alice")
        context.add_user_message("First question")
        saved = context.to_snapshot()
        saved.stored_version = store.create_context(saved, "alice")
        saved.stored_version = store.save_context(saved, "alice")  # no ledger before or now
        saved.usage.append({"type": "model_call", "input_tokens": 1})  # the very list saved
        saved.stored_version = store.save_context(saved, "alice")
        assert store.load("c1", "alice") == saved

    def test_versions_continue_across_delete_and_recreate(self, store: PersistentStore) -> None:
        store.create_context(snapshot(), "alice")
        store.save_context(snapshot(text="second", version=1), "alice")
        store.delete("c1", "alice")
        assert store.version_of("c1", "alice") is None
        assert store.create_context(snapshot(text="reborn"), "alice") == 3
        with pytest.raises(StaleVersionError):  # a copy loaded before the delete
            store.save_context(snapshot(text="stale", version=2), "alice")
        assert said(store) == ["reborn"]
        assert store.save_context(snapshot(text="on", version=3), "alice") == 4

    def test_a_deleted_id_can_be_taken_by_another_user_at_a_fresh_version(
        self, store: PersistentStore
    ) -> None:
        store.create_context(snapshot(), "alice")
        store.delete("c1", "alice")
        assert store.create_context(snapshot(user="bob"), "bob") == 2
        assert not store.exists("c1", "alice")
        assert store.list_conversations("alice") == []
        with pytest.raises(PermissionError):
            store.load("c1", "alice")

    def test_a_reserved_id_refuses_another_users_create_while_its_holder_lives(
        self, store: PersistentStore
    ) -> None:
        class Holder:  # anything a weak reference can point at
            pass

        holder = Holder()
        store.reserve("c1", "alice", holder)
        store.reserve("c1", "alice", holder)  # again, by its owner: fine
        with pytest.raises(PermissionError, match=r"^User bob does not own conversation c1$"):
            store.create_context(snapshot(user="bob"), "bob")
        with pytest.raises(PermissionError):
            store.reserve("c1", "bob", Holder())
        assert store.list_conversations("bob") == [] and not store.exists("c1", "bob")
        assert store.create_context(snapshot(), "alice") == 1
        store.delete("c1", "alice")
        del holder  # the reservation is held weakly: it goes with its holder
        assert store.create_context(snapshot(user="bob"), "bob") == 2

    # -- history -----------------------------------------------------------------------------

    def test_every_save_is_a_version_that_loads_back_exactly_by_number_or_time(
        self, store: PersistentStore
    ) -> None:
        context = ConversationContext("c1", user_id="alice")
        context.add_user_message("First question")
        saved = [context.to_snapshot()]
        context.stored_version = store.create_context(saved[0], "alice")
        for text in ("Second", "Third"):
            context.add_user_message(text)
            saved.append(context.to_snapshot())
            context.stored_version = store.save_context(saved[-1], "alice")
        history = store.get_version_history("c1", "alice")
        assert [v.version for v in history] == [3, 2, 1]
        assert history[0].saved_at > history[1].saved_at > history[2].saved_at
        for entry in history:
            expected = stamped(saved[entry.version - 1], entry.version)
            assert store.load_version("c1", entry.version, "alice") == expected
            assert store.load_version("c1", entry.saved_at, "alice") == expected
        assert store.load_version("c1", 4, "alice") is None
        assert store.load_version("c1", history[-1].saved_at - dt.timedelta(1), "alice") is None

    def test_the_usage_ledger_of_every_version_loads_back_exactly(
        self, store: PersistentStore
    ) -> None:
        saved = save_ledger_edits(store)
        for version, ledger in saved.items():
            kept = store.load_version("c1", version, "alice")
            assert kept is not None and msgspec.json.encode(kept.usage) == ledger, version
        current = store.load("c1", "alice")
        assert current is not None and current.usage == []

    def test_a_delete_removes_the_history_with_the_conversation(
        self, store: PersistentStore
    ) -> None:
        store.create_context(snapshot(), "alice")
        store.save_context(snapshot(text="second", version=1), "alice")
        store.delete("c1", "alice")
        assert store.get_version_history("c1", "alice") == []
        store.create_context(snapshot(text="reborn"), "alice")
        assert [v.version for v in store.get_version_history("c1", "alice")] == [3]
        assert store.load_version("c1", 2, "alice") is None

    # -- delete listeners ------------------------------------------------------------------

    def test_a_delete_is_heard_by_every_delete_listener(self, store: PersistentStore) -> None:
        heard: list[str] = []
        store.add_delete_listener(heard.append)
        store.add_delete_listener(raising)  # one that fails does not fail the delete
        also: list[str] = []
        store.add_delete_listener(also.append)
        store.create_context(snapshot(), "alice")
        assert store.delete("c1", "alice")
        store.delete("c1", "alice")
        assert heard == also == ["c1"]
        assert not store.exists("c1", "alice")

    def test_a_removed_delete_listener_hears_no_more_deletes(self, store: PersistentStore) -> None:
        heard: list[str] = []
        kept: list[str] = []
        store.add_delete_listener(heard.append)
        store.add_delete_listener(kept.append)
        for cid in ("c1", "c2"):
            store.create_context(snapshot(cid), "alice")
        assert store.delete("c1", "alice")
        store.remove_delete_listener(heard.append)  # an equal bound method: removed
        store.remove_delete_listener(print)  # never added: ignored
        assert store.delete("c2", "alice")
        assert (heard, kept) == (["c1"], ["c1", "c2"])

    # -- corrupt records ---------------------------------------------------------------------

    def test_a_damaged_record_is_a_corrupt_snapshot_naming_it_and_others_still_load(
        self, store: PersistentStore
    ) -> None:
        store.create_context(snapshot("bad"), "alice")
        store.create_context(snapshot("good"), "alice")
        store.create_context(snapshot("theirs", user="bob"), "bob")
        self.damage(store, "bad")
        with pytest.raises(CorruptSnapshotError, match="bad"):
            store.load("bad", "alice")
        assert said(store, "good") == ["Are you working?"]
        assert said(store, "theirs", "bob") == ["Are you working?"]
        assert [s.conversation_id for s in store.list_conversations("bob")] == ["theirs"]

    # -- concurrent writers ----------------------------------------------------------------

    def test_concurrent_writers_of_their_own_conversations_lose_no_acknowledged_save(
        self, store: PersistentStore
    ) -> None:
        acknowledged: dict[str, tuple[int, int]] = {}

        def writer(n: int) -> None:
            c = ConversationContext(f"w{n}", user_id="alice")
            c.add_user_message("0")
            c.stored_version = store.create_context(c.to_snapshot(), "alice")
            for i in range(1, 10):
                c.add_user_message(str(i))
                c.stored_version = store.save_context(c.to_snapshot(), "alice")
            acknowledged[f"w{n}"] = (c.stored_version, len(c.messages))

        run_all([functools.partial(writer, n) for n in range(8)])
        assert len(acknowledged) == 8
        for cid, (version, count) in acknowledged.items():
            assert store.version_of(cid, "alice") == version == 10
            assert said(store, cid) == [str(i) for i in range(count)]
        assert len(store.list_conversations("alice")) == 8

    def test_of_writers_racing_from_one_version_exactly_one_wins(
        self, store: PersistentStore
    ) -> None:
        store.create_context(snapshot(), "alice")
        outcomes: list[str] = []
        lock = threading.Lock()

        def racer(n: int) -> None:
            try:
                store.save_context(snapshot(text=f"racer {n}", version=1), "alice")
                outcome = f"racer {n}"
            except StaleVersionError:
                outcome = "stale"
            with lock:
                outcomes.append(outcome)

        run_all([functools.partial(racer, n) for n in range(8)])
        winners = [o for o in outcomes if o != "stale"]
        assert len(outcomes) == 8 and len(winners) == 1
        assert said(store) == winners
        assert store.version_of("c1", "alice") == 2


async def _awaited(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args, "alice")`` on a running loop, its answer awaited."""
    return await call(*args, "alice")
