"""A save is stored exactly as its snapshot held it, however the snapshot's message list
and usage ledger came about: taken from a conversation (whose kept snapshots, and ledger
entries, a store recognizes by their origin instead of comparing them one by one), taken
earlier and saved after a newer one, or changed in place by hand (an edit, an append, any
list operation) after another save.

Every store, under a state machine of such snapshots and saves; each acknowledged save
loads back byte for byte."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from parlour.runtime import ConversationContext, OutgoingMessage
from parlour.runtime.snapshots import (
    ConversationPersistenceSnapshot,
    MessageSnapshot,
    encode_snapshot,
)
from parlour.stores import LmdbStore, MemoryStore, PersistentStore, PostgresStore
from tests.runtime._list_changes import APPENDS, EVERY_CHANGE, LIST_CHANGES

SETTINGS = settings(
    max_examples=40,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _snapshot_of(text: str) -> MessageSnapshot:
    return MessageSnapshot.of(OutgoingMessage(text))


def _stored_form(snapshot: ConversationPersistenceSnapshot) -> bytes:
    return encode_snapshot(msgspec.structs.replace(snapshot, stored_version=0))


class HeldSnapshots(RuleBasedStateMachine):
    """Over the store ``opened`` gives (a subclass says which)."""

    def opened(self) -> AbstractContextManager[PersistentStore]:
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        self._opened = self.opened()
        self.store = self._opened.__enter__()
        self.context = ConversationContext(f"held-{uuid.uuid4().hex[:8]}", user_id="alice")
        self.context.add_user_message("first")
        first = self.context.to_snapshot()
        self.version = self.store.create_context(first, "alice")
        self.held = [first]
        self.saved = _stored_form(first)
        self.made = 0

    def teardown(self) -> None:
        self._opened.__exit__(None, None, None)

    def _new(self) -> MessageSnapshot:
        self.made += 1
        return _snapshot_of(f"by hand {self.made}")

    def _entry(self) -> dict[str, object]:
        self.made += 1
        return {"type": "model_call", "input_tokens": self.made}

    @rule(text=st.text(max_size=6))
    def the_conversation_says_more(self, text: str) -> None:
        self.context.add_user_message(f"said {text}")

    @rule(change=st.sampled_from(sorted(LIST_CHANGES)), at=st.integers(0, 9))
    def the_conversation_is_rewritten(self, change: str, at: int) -> None:
        if self.context.messages:
            LIST_CHANGES[change](self.context.messages, at, OutgoingMessage(f"new {at}"))

    @rule(change=st.sampled_from(sorted(EVERY_CHANGE)), at=st.integers(0, 9))
    def the_ledger_changes(self, change: str, at: int) -> None:
        ledger = self.context.usage_ledger
        if ledger or change in APPENDS:
            EVERY_CHANGE[change](ledger, at, self._entry())

    @rule()
    def a_snapshot_is_taken(self) -> None:
        self.held = [*self.held[-3:], self.context.to_snapshot()]

    @rule(
        which=st.integers(0, 3),
        ledger=st.booleans(),
        change=st.sampled_from(sorted(EVERY_CHANGE)),
        at=st.integers(0, 9),
    )
    def a_held_snapshot_is_changed_by_hand(
        self, which: int, ledger: bool, change: str, at: int
    ) -> None:
        held = self.held[which % len(self.held)]
        items: list[Any] = held.usage if ledger else held.messages
        if items or change in APPENDS:
            EVERY_CHANGE[change](items, at, self._entry() if ledger else self._new())

    @rule(which=st.integers(0, 3))
    def a_held_snapshot_is_saved(self, which: int) -> None:
        snapshot = self.held[which % len(self.held)]
        snapshot.stored_version = self.version
        self.version = self.store.save_context(snapshot, "alice")
        self.saved = _stored_form(snapshot)

    @invariant()
    def the_store_holds_the_last_save_as_it_was(self) -> None:
        loaded = self.store.load(str(self.context.conversation_id), "alice")
        assert loaded is not None and loaded.stored_version == self.version
        assert _stored_form(loaded) == self.saved


@contextmanager
def _lmdb() -> Iterator[LmdbStore]:
    with tempfile.TemporaryDirectory() as tmp, LmdbStore(Path(tmp), sync=False) as store:
        yield store


class InLmdb(HeldSnapshots):
    def opened(self) -> AbstractContextManager[PersistentStore]:
        return _lmdb()


class InMemory(HeldSnapshots):
    def opened(self) -> AbstractContextManager[PersistentStore]:
        return nullcontext(MemoryStore())


def test_every_save_of_any_held_snapshot_is_stored_as_it_was_in_lmdb() -> None:
    run_state_machine_as_test(InLmdb, settings=SETTINGS)


def test_every_save_of_any_held_snapshot_is_stored_as_it_was_in_memory() -> None:
    run_state_machine_as_test(InMemory, settings=SETTINGS)


def test_every_save_of_any_held_snapshot_is_stored_as_it_was_in_postgres(
    postgres_conninfo: str,
) -> None:
    class InPostgres(HeldSnapshots):
        def opened(self) -> AbstractContextManager[PersistentStore]:
            return PostgresStore(postgres_conninfo)

    run_state_machine_as_test(InPostgres, settings=SETTINGS)


def test_an_older_snapshot_extended_by_hand_after_a_newer_save_is_stored_as_extended() -> None:
    with _lmdb() as store:
        c = ConversationContext("older", user_id="alice")
        c.add_user_message("first")
        older = c.to_snapshot()
        version = store.create_context(older, "alice")
        c.add_user_message("second")  # the newer snapshot's second message: not the older's
        newer = c.to_snapshot()
        newer.stored_version = version
        version = store.save_context(newer, "alice")
        older.messages.append(_snapshot_of("by hand"))
        older.stored_version = version
        version = store.save_context(older, "alice")
        loaded = store.load("older", "alice")
        assert loaded is not None and _stored_form(loaded) == _stored_form(older)


@pytest.mark.parametrize("change", sorted(LIST_CHANGES))
@pytest.mark.parametrize("kind", ["lmdb", "memory"])
def test_every_change_in_place_to_a_conversations_ledger_reaches_its_next_save(
    change: str, kind: str
) -> None:
    """The ledger's copies in two snapshots share their leading entries only until the
    ledger is changed in place: after any such change the next save stores the ledger as
    it now is."""
    with _lmdb() if kind == "lmdb" else nullcontext(MemoryStore()) as store:
        c = ConversationContext("ledger", user_id="alice")
        c.add_user_message("first")
        c.usage_ledger.extend({"type": "model_call", "input_tokens": n} for n in range(3))
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        LIST_CHANGES[change](c.usage_ledger, 1, {"type": "model_call", "input_tokens": 9})
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        loaded = store.load("ledger", "alice")
        assert loaded is not None and loaded.usage == list(c.usage_ledger)
