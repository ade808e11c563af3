"""PostgresStore against MemoryStore, the reference, over random runs of every operation by
several users on a few ids: the same answers, the same refusals, the same versions."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from parlour.runtime import ConversationContext
from parlour.runtime.errors import ConversationNotFoundError, StaleVersionError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores import MemoryStore, PersistentStore, PostgresStore

USERS = st.sampled_from(["alice", "bob"])
IDS = st.sampled_from(["c1", "c2", "c3"])
REFUSALS = (PermissionError, ConversationNotFoundError, StaleVersionError)


def _outcome(call: object) -> object:
    """What a call answered, or the kind of refusal (and its versions) it raised."""
    try:
        return call() if callable(call) else call
    except StaleVersionError as exc:
        return ("stale", exc.expected, exc.found)
    except REFUSALS as exc:
        return type(exc).__name__


class Versus(RuleBasedStateMachine):
    store: PostgresStore

    def __init__(self) -> None:
        super().__init__()
        self.model = MemoryStore()
        self.prefix = uuid.uuid4().hex[:8]  # one database for every run: fresh ids each
        self.texts = 0
        self.versions: dict[str, int] = {}  # the last version each id was given

    def _snapshot(self, cid: str, user: str, version: int) -> ConversationPersistenceSnapshot:
        self.texts += 1
        context = ConversationContext(f"{self.prefix}-{cid}", user_id=user)
        context.add_user_message(f"message {self.texts}")
        context.stored_version = version
        return context.to_snapshot()

    def _both(self, act: object) -> object:
        assert callable(act)
        ours, theirs = _outcome(lambda: act(self.store)), _outcome(lambda: act(self.model))
        assert ours == theirs
        return theirs

    def _write(self, cid: str, act: object) -> None:
        version = self._both(act)
        if isinstance(version, int):
            self.versions[cid] = version

    @rule(cid=IDS, user=USERS)
    def create(self, cid: str, user: str) -> None:
        snapshot = self._snapshot(cid, user, 0)
        self._write(cid, lambda s: s.create_context(snapshot, user))

    @rule(cid=IDS, user=USERS, behind=st.integers(0, 2))
    def save(self, cid: str, user: str, behind: int) -> None:
        snapshot = self._snapshot(cid, user, max(0, self.versions.get(cid, 0) - behind))
        self._write(cid, lambda s: s.save_context(snapshot, user))

    @rule(cid=IDS, user=USERS)
    def delete(self, cid: str, user: str) -> None:
        self._both(lambda s: s.delete(f"{self.prefix}-{cid}", user))

    @rule(cid=IDS, user=USERS)
    def read(self, cid: str, user: str) -> None:
        key = f"{self.prefix}-{cid}"
        self._both(lambda s: s.load(key, user))
        self._both(lambda s: (s.exists(key, user), s.version_of(key, user)))

    @rule(user=USERS)
    def listing(self, user: str) -> None:
        def ids(s: PersistentStore) -> list[str]:
            return sorted(
                c.conversation_id
                for c in s.list_conversations(user)
                if c.conversation_id.startswith(self.prefix)
            )

        self._both(ids)


def test_postgres_store_answers_every_run_of_operations_as_the_reference_store(
    postgres_conninfo: str,
) -> None:
    with PostgresStore(postgres_conninfo) as store:
        Versus.store = store
        run_state_machine_as_test(
            Versus,
            settings=settings(
                max_examples=30,
                stateful_step_count=25,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
