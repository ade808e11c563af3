"""Every acknowledged save loads back, on every store: a value changed in place after it
entered a conversation (a PojoBlock's dict, a usage ledger entry) to something a load would
refuse, or nothing encodes, is refused at the save, naming the conversation and the message
or entry, and nothing is written; after a restart (a new store object on the same files or
database) every acknowledged save loads."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from parlour.actors import BasicThinker, ConversationService
from parlour.runtime import OutgoingMessage
from parlour.runtime.blocks import PojoBlock
from parlour.runtime.errors import CorruptSnapshotError
from parlour.stores import LmdbStore, MemorySessionCache, MemoryStore, PersistentStore
from parlour.stores._contract import HOSTILE, nested, with_a_value


@pytest.mark.parametrize("where", ["message", "ledger"])
@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_a_service_save_of_a_value_changed_in_place_is_refused_and_a_restart_loads(
    tmp_path: Path, where: str, hostile: str
) -> None:
    """The issue's reproduction: a PojoBlock value (or a ledger entry) changed in place to
    something no load reads is refused by the service's save, naming the conversation and
    the message, the session cache never holds it, and after a restart the conversation
    loads as its last acknowledged save left it."""
    store = LmdbStore(tmp_path / "db")
    session = MemorySessionCache()
    service = ConversationService(store, session, cleanup_interval_s=0, shutdown_grace_s=0.1)
    thinker = BasicThinker("alice")
    cid = thinker.mint_conversation_id()
    try:
        ctx = service.obtain_conversation(None, thinker).get(timeout=10)
        ctx.add_user_message("first")
        service.save_conversation(ctx, thinker)
        ctx.add_message(OutgoingMessage("", [PojoBlock(value={"k": 1})]))
        ctx.usage_ledger.append({"type": "model_call", "input_tokens": 1})
        if where == "message":
            ctx.messages[-1].blocks[0].value["k"] = HOSTILE[hostile]()  # type: ignore[union-attr]
            named = "message 1"
        else:
            ctx.usage_ledger[-1]["x"] = HOSTILE[hostile]()
            named = "usage ledger entry 0"
        for wait in (True, False):
            with pytest.raises(ValueError, match=rf"Conversation {cid} .*{named}\b"):
                service.save_conversation(ctx, thinker, wait=wait)
        cached = session.get(cid, "alice")
        assert cached is not None and len(cached.messages) == 1  # the acknowledged save's
        service.release(thinker)
    finally:
        service.stop()
        store.close()
    with LmdbStore(tmp_path / "db") as reopened:
        loaded = reopened.load(cid, "alice")
        assert loaded is not None and loaded.stored_version == 1
        assert [m.raw_content for m in loaded.messages] == ["first"]


# -- the property: a state machine on every store ---------------------------------------------

# mostly values no load reads back (the property's point), some that do
_values = st.one_of(
    st.sampled_from(sorted(HOSTILE)).map(lambda name: HOSTILE[name]()),
    st.builds(nested, st.integers(60, 70)),
    st.integers(-5, 5) | st.text(max_size=5),
)


class _Stores:
    """How a machine opens its store, and opens it again after a restart."""

    def __init__(self, kind: str, conninfo: str | None) -> None:
        self.kind, self.conninfo = kind, conninfo
        self.root = Path(tempfile.mkdtemp(prefix="parlour-round-trip-"))
        self.memory = MemoryStore()

    def open(self) -> PersistentStore:
        if self.kind == "lmdb":
            return LmdbStore(self.root / "db", sync=False)
        if self.kind == "postgres":
            from parlour.stores import PostgresStore

            assert self.conninfo is not None
            return PostgresStore(self.conninfo, max_connections=2)
        return self.memory  # its records are bytes: a load decodes them as a restart would

    def close(self, store: PersistentStore) -> None:
        if store is not self.memory:
            store.close()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _machine(kind: str, conninfo: str | None) -> type[RuleBasedStateMachine]:
    class RoundTrip(RuleBasedStateMachine):
        """Saves of one conversation whose PojoBlock values and ledger entries change in
        place with hostile values between saves; restarts between them."""

        def __init__(self) -> None:
            super().__init__()
            self.stores = _Stores(kind, conninfo)
            self.store = self.stores.open()
            self.cid = f"rt-{uuid.uuid4().hex[:12]}"
            self.context = with_a_value(self.cid)
            self.acknowledged = self.store.create_context(self.context.to_snapshot(), "alice")
            self.context.stored_version = self.acknowledged
            self.counts = (len(self.context.messages), len(self.context.usage_ledger))

        @rule(value=_values, where=st.sampled_from(["message", "ledger"]), then=st.booleans())
        def add(self, value: object, where: str, then: bool) -> None:
            """A message with a PojoBlock and a ledger entry, one of them then changed in
            place before any save encodes it (and, ``then``, saved at once)."""
            block = PojoBlock(value={"k": 1})
            self.context.add_message(OutgoingMessage("", [block]))
            self.context.usage_ledger.append({"type": "model_call", "input_tokens": 1})
            if where == "message":
                block.value["k"] = value
            else:
                self.context.usage_ledger[-1]["x"] = value
            if then:
                self.save(later=False)

        @rule(data=st.data(), value=_values)
        def change_a_value(self, data: st.DataObject, value: object) -> None:
            pojos = [b for m in self.context.messages for b in m.blocks if isinstance(b, PojoBlock)]
            block = data.draw(st.sampled_from(pojos))
            block.value["k"] = value

        @rule(data=st.data(), value=_values)
        def change_an_entry(self, data: st.DataObject, value: object) -> None:
            entry = data.draw(st.sampled_from(self.context.usage_ledger))
            entry["x"] = value

        @rule(later=st.booleans())
        def save(self, later: bool) -> None:
            snapshot = self.context.to_snapshot()
            try:
                if later:
                    version = self.store.save_context_later(snapshot, "alice")()
                else:
                    version = self.store.save_context(snapshot, "alice")
            except ValueError as exc:
                assert f"Conversation {self.cid} " in str(exc)
                assert any(w in str(exc) for w in ("message ", "ledger entry ", "body"))
                assert "nothing was written" in str(exc)
                assert self.store.version_of(self.cid, "alice") == self.acknowledged
                return
            self.context.stored_version = self.acknowledged = version
            self.counts = (len(snapshot.messages), len(snapshot.usage))

        @rule()
        def restart(self) -> None:
            self.stores.close(self.store)
            self.store = self.stores.open()
            self._loads()

        @invariant()
        def the_last_acknowledged_save_loads(self) -> None:
            self._loads()

        def _loads(self) -> None:
            try:
                loaded = self.store.load(self.cid, "alice")
            except CorruptSnapshotError as exc:  # an acknowledged save that never loads
                raise AssertionError(f"version {self.acknowledged} does not load: {exc}") from exc
            assert loaded is not None and loaded.stored_version == self.acknowledged
            assert (len(loaded.messages), len(loaded.usage)) == self.counts

        def teardown(self) -> None:
            try:
                self.restart()
            finally:
                self.stores.close(self.store)
                self.stores.remove()

    return RoundTrip


@pytest.fixture(params=["memory", "lmdb", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> Iterator[tuple[str, str | None]]:
    if request.param == "postgres":
        yield "postgres", request.getfixturevalue("postgres_conninfo")
    else:
        yield request.param, None


def test_every_acknowledged_save_loads_after_a_restart_and_every_refusal_names_it(
    store_kind: tuple[str, str | None],
) -> None:
    run_state_machine_as_test(
        _machine(*store_kind),
        settings=settings(max_examples=30, stateful_step_count=16, deadline=None),
    )


@pytest.mark.parametrize("kind", ["memory", "lmdb"])
def test_values_that_may_nest_are_decoded_back_and_those_that_load_are_saved_as_they_are(
    tmp_path: Path, kind: str
) -> None:
    """A PojoBlock value and a ledger entry holding containers (60 deep, under the limit)
    are read back as a load reads them before they are written, and saved; text made of
    brackets nests nothing."""
    store: PersistentStore = MemoryStore() if kind == "memory" else LmdbStore(tmp_path / "db")
    try:
        context = with_a_value()
        context.add_user_message("[{" * 500)
        context.add_message(OutgoingMessage("", [PojoBlock(value={"k": nested(60)})]))
        context.usage_ledger.append({"type": "tool", "said": "[[{{" * 100, "x": nested(60)})
        context.stored_version = store.create_context(context.to_snapshot(), "alice")
        assert store.load("c1", "alice") == context.to_snapshot()
    finally:
        store.close()
