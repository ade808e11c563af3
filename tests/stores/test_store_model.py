"""Several users doing every store operation, foreign ones included, against a model: each
user sees exactly their own conversations, a foreign user only ever gets PermissionError or
False/absent and changes nothing, and an id's versions only ever go up."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from parlour.runtime import ConversationContext
from parlour.runtime.errors import ConversationNotFoundError, StaleVersionError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores import LmdbStore, MemoryStore, PersistentStore

USERS = st.sampled_from(["alice", "bob", "carol"])
IDS = st.sampled_from(["c1", "c2", "c3", "c4"])
TEXTS = st.text(min_size=1, max_size=6)


@dataclass
class _Record:
    owner: str
    version: int
    text: str


def _snapshot(cid: str, user: str, text: str, version: int) -> ConversationPersistenceSnapshot:
    context = ConversationContext(cid, user_id=user)
    context.add_user_message(text)
    context.stored_version = version
    return context.to_snapshot()


class _StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = self.open_store()
        self.records: dict[str, _Record] = {}
        self.highest: dict[str, int] = {}  # every version an id has had: never reached again

    def open_store(self) -> PersistentStore:
        raise NotImplementedError

    def _advance(self, cid: str, version: int) -> None:
        assert version > self.highest.get(cid, 0), "an id's versions only go up"
        self.highest[cid] = version

    @rule(user=USERS, cid=IDS, text=TEXTS)
    def create(self, user: str, cid: str, text: str) -> None:
        record = self.records.get(cid)
        if record is not None and record.owner != user:
            with pytest.raises(PermissionError):
                self.store.create_context(_snapshot(cid, user, text, 0), user)
            return
        version = self.store.create_context(_snapshot(cid, user, text, 0), user)
        self._advance(cid, version)
        self.records[cid] = _Record(user, version, text)

    @rule(user=USERS, cid=IDS, text=TEXTS, offset=st.sampled_from([0, 0, -1, 1, -5]))
    def save(self, user: str, cid: str, text: str, offset: int) -> None:
        record = self.records.get(cid)
        at = (record.version if record else self.highest.get(cid, 0)) + offset

        def call() -> int:
            return self.store.save_context(_snapshot(cid, user, text, at), user)

        if record is None:
            with pytest.raises(ConversationNotFoundError):
                call()
        elif record.owner != user:
            with pytest.raises(PermissionError):
                call()
        elif offset:
            with pytest.raises(StaleVersionError):
                call()
        else:
            version = call()
            self._advance(cid, version)
            self.records[cid] = _Record(user, version, text)

    @rule(user=USERS, other=USERS, cid=IDS, text=TEXTS)
    def write_a_snapshot_naming_another_user(
        self, user: str, other: str, cid: str, text: str
    ) -> None:
        if other == user:
            return
        with pytest.raises(PermissionError):
            self.store.create_context(_snapshot(cid, other, text, 0), user)
        record = self.records.get(cid)
        with pytest.raises(PermissionError):
            self.store.save_context(
                _snapshot(cid, other, text, record.version if record else 0), user
            )

    @rule(user=USERS, cid=IDS)
    def delete(self, user: str, cid: str) -> None:
        record = self.records.get(cid)
        if record is not None and record.owner != user:
            with pytest.raises(PermissionError):
                self.store.delete(cid, user)
            return
        assert self.store.delete(cid, user) is (record is not None)
        self.records.pop(cid, None)

    @rule(user=USERS, cid=IDS)
    def read(self, user: str, cid: str) -> None:
        record = self.records.get(cid)
        if record is not None and record.owner != user:
            for call in (self.store.load, self.store.version_of):
                with pytest.raises(PermissionError):
                    call(cid, user)
            assert self.store.exists(cid, user) is False
            return
        loaded = self.store.load(cid, user)
        assert self.store.exists(cid, user) is (record is not None)
        if record is None:
            assert loaded is None and self.store.version_of(cid, user) is None
        else:
            assert loaded is not None and loaded.messages[0].raw_content == record.text
            assert loaded.stored_version == record.version == self.store.version_of(cid, user)

    @invariant()
    def each_user_lists_exactly_their_own_newest_first(self) -> None:
        for user in ("alice", "bob", "carol"):
            listed = self.store.list_conversations(user)
            ids = sorted(s.conversation_id for s in listed)
            assert ids == sorted(c for c, r in self.records.items() if r.owner == user)
            times = [s.updated_at for s in listed]
            assert times == sorted(times, reverse=True)
            assert listed == [
                *self.store.list_conversations(user, limit=2),
                *self._rest(user, listed),
            ]

    def _rest(self, user: str, listed: list) -> list:  # type: ignore[type-arg]
        return [] if len(listed) <= 2 else self.store.list_conversations(user, after=listed[1])


class _MemoryModel(_StoreModel):
    def open_store(self) -> PersistentStore:
        return MemoryStore()


class _LmdbModel(_StoreModel):
    def open_store(self) -> PersistentStore:
        self.directory = tempfile.mkdtemp()
        return LmdbStore(self.directory, sync=False)

    def teardown(self) -> None:
        assert isinstance(self.store, LmdbStore)
        self.store.close()
        shutil.rmtree(self.directory)


_settings = settings(
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMemoryStoreAgainstTheModel = _MemoryModel.TestCase
TestMemoryStoreAgainstTheModel.settings = _settings
TestLmdbStoreAgainstTheModel = _LmdbModel.TestCase
TestLmdbStoreAgainstTheModel.settings = _settings
