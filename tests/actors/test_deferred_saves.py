"""Deferred saves (``save_conversation(..., wait=False)``): the conversation is captured at
the boundary and written with the next commit; the owner's next waited save, its release,
or ``stop`` waits for it, and its failure is raised (or, at release, logged) with the
conversation dropped from memory and the session cache, never lost silently."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from parlour.actors import BasicThinker, ConversationService
from parlour.runtime import ConversationContext, IncomingMessage
from parlour.runtime.errors import (
    ConversationNotFoundError,
    ConversationUnavailableError,
    IllegalStateError,
)
from parlour.runtime.testing import FakeClock
from parlour.stores import LmdbStore, MemorySessionCache, MemoryStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LmdbStore]:
    with LmdbStore(tmp_path / "db") as lmdb_store:
        yield lmdb_store


@pytest.fixture
def cache() -> MemorySessionCache:
    return MemorySessionCache()


@pytest.fixture
def service(store: LmdbStore, cache: MemorySessionCache) -> Iterator[ConversationService]:
    with ConversationService(
        store, cache, clock=FakeClock(), cleanup_interval_s=0, shutdown_grace_s=0.1
    ) as svc:
        yield svc


def _stored_turn(
    service: ConversationService, thinker: Any = None
) -> tuple[Any, ConversationContext, str]:
    """A conversation whose first turn is stored, still owned by its thinker (alice's, a
    ``BasicThinker`` unless given); and its id."""
    thinker = thinker or BasicThinker("alice")
    cid = thinker.mint_conversation_id()
    context = service.obtain_conversation(None, thinker).get(timeout=5)
    context.add_user_message("first")
    service.save_conversation(context, thinker)
    return thinker, context, cid


def _said(store: LmdbStore, cid: str) -> list[object]:
    snapshot = store.load(cid, "alice")
    return [] if snapshot is None else [m.raw_content for m in snapshot.messages]


def test_a_deferred_save_is_durable_once_the_next_waited_save_returns(
    service: ConversationService, store: LmdbStore, cache: MemorySessionCache
) -> None:
    thinker, context, cid = _stored_turn(service)
    context.add_user_message("question")
    service.save_conversation(context, thinker, wait=False)
    assert _said(store, cid) == ["first"]  # queued, not yet committed
    context.add_message(IncomingMessage("answer"))
    service.save_conversation(context, thinker)
    assert _said(store, cid) == ["first", "question", "answer"]
    assert context.stored_version == store.version_of(cid, "alice") == 3
    cached = cache.get(cid, "alice")
    assert cached is not None and cached.stored_version == 3 and len(cached.messages) == 3
    service.release(thinker)


def test_release_waits_for_a_deferred_save_and_the_next_owner_restores_it(
    service: ConversationService, store: LmdbStore, cache: MemorySessionCache
) -> None:
    thinker, context, cid = _stored_turn(service)
    context.add_user_message("question")
    service.save_conversation(context, thinker, wait=False)
    service.release(thinker, retain=0)  # evicted at once: the next obtain restores it
    assert _said(store, cid) == ["first", "question"]
    assert cache.get(cid, "alice") is None  # dropped, not written: the store is the truth
    again = BasicThinker("alice")
    again.set_conversation_id(cid)
    restored = service.obtain_conversation(None, again).get(timeout=5)
    assert [m.raw_content for m in restored.messages] == ["first", "question"]
    restored.add_user_message("more")
    service.save_conversation(restored, again)  # from the version the deferred save made
    assert store.version_of(cid, "alice") == 3
    service.release(again)


def test_a_deferred_save_of_a_deleted_conversation_fails_the_next_save_and_resurrects_nothing(
    service: ConversationService, store: LmdbStore
) -> None:
    thinker, context, cid = _stored_turn(service)
    context.add_user_message("question")
    service.save_conversation(context, thinker, wait=False)
    assert store.delete(cid, "alice")  # deleted by the user elsewhere, mid-turn
    context.add_message(IncomingMessage("answer"))
    with pytest.raises(ConversationNotFoundError):
        service.save_conversation(context, thinker)
    assert not store.exists(cid, "alice")
    service.release(thinker)
    assert not store.exists(cid, "alice")


def test_a_deferred_save_that_fails_is_logged_at_release_and_the_store_state_is_what_returns(
    service: ConversationService, store: LmdbStore, cache: MemorySessionCache
) -> None:
    thinker, context, cid = _stored_turn(service)
    other = store.load(cid, "alice")  # another writer moves the record on meanwhile
    assert other is not None
    other.messages = [*other.messages]
    store.save_context(other, "alice")
    context.add_user_message("question")
    service.save_conversation(context, thinker, wait=False)
    records: list[str] = []
    logger.enable("parlour")
    sink = logger.add(lambda m: records.append(m.record["message"]), level="ERROR")
    try:
        service.release(thinker)  # it cannot raise over the caller's finally: it logs
    finally:
        logger.remove(sink)
        logger.disable("parlour")
    assert any(f"a deferred save of conversation {cid} failed" in r for r in records)
    assert cache.get(cid, "alice") is None
    again = BasicThinker("alice")
    again.set_conversation_id(cid)
    fresh = service.obtain_conversation(None, again).get(timeout=5)
    assert fresh is not context  # dropped from memory: loaded from the store
    assert [m.raw_content for m in fresh.messages] == ["first"]
    assert fresh.stored_version == store.version_of(cid, "alice") == 2
    service.release(again)


def test_a_first_save_with_no_wait_still_creates_the_record_before_returning(
    service: ConversationService, store: LmdbStore
) -> None:
    thinker = BasicThinker("alice")
    cid = thinker.mint_conversation_id()
    context = service.obtain_conversation(None, thinker).get(timeout=5)
    context.add_user_message("first")
    service.save_conversation(context, thinker, wait=False)  # a create always waits
    assert _said(store, cid) == ["first"] and context.stored_version == 1
    service.release(thinker)


def test_a_store_that_cannot_defer_saves_at_once() -> None:
    memory = MemoryStore()
    with ConversationService(memory, cleanup_interval_s=0) as service:
        thinker, context, cid = _stored_turn(service)
        context.add_user_message("second")
        service.save_conversation(context, thinker, wait=False)
        snapshot = memory.load(cid, "alice")
        assert snapshot is not None and len(snapshot.messages) == 2
        assert snapshot.stored_version == context.stored_version == 2
        service.release(thinker)


def test_stop_waits_for_a_deferred_save_its_owner_never_settled(
    store: LmdbStore, cache: MemorySessionCache
) -> None:
    service = ConversationService(store, cache, cleanup_interval_s=0, shutdown_grace_s=0.0)
    thinker, context, cid = _stored_turn(service)
    context.add_user_message("question")
    service.save_conversation(context, thinker, wait=False)
    service.stop()  # the owner never released: stop gives up on it, but not on the save
    assert _said(store, cid) == ["first", "question"]
    assert cache.get(cid, "alice") is None


def test_a_deferred_save_after_stop_is_durable_once_its_owner_releases(
    store: LmdbStore, cache: MemorySessionCache
) -> None:
    service = ConversationService(store, cache, cleanup_interval_s=0, shutdown_grace_s=0.0)
    thinker, context, cid = _stored_turn(service)
    service.stop()  # the owner goes on with its turn meanwhile
    context.add_user_message("late")
    service.save_conversation(context, thinker, wait=False)
    service.release(thinker)  # a no-op after stop, but for the deferred save it waits for
    assert _said(store, cid) == ["first", "late"]


def test_a_deferred_save_on_a_closed_store_raises_at_once_and_leaves_nothing_to_wait_for(
    tmp_path: Path,
) -> None:
    store = LmdbStore(tmp_path / "db")
    with ConversationService(store, cleanup_interval_s=0) as service:
        thinker, context, _ = _stored_turn(service)
        store.close()
        context.add_user_message("too late")
        with pytest.raises(IllegalStateError, match="closed"):
            service.save_conversation(context, thinker, wait=False)
        assert context.stored_version == 1  # nothing was queued, nothing predicted
        service.release(thinker)  # nothing deferred: nothing to wait for or log


class _Uncancellable(BasicThinker):
    """A thinker without a workflow to cancel: a force release hands its lease back."""

    cancel_workflow = None  # type: ignore[assignment]


def test_a_deferred_save_settled_after_a_force_release_and_a_remove_resurrects_nothing(
    service: ConversationService, store: LmdbStore, cache: MemorySessionCache
) -> None:
    # no cancel_workflow: not quite a Thinker
    thinker, context, cid = _stored_turn(service, _Uncancellable("alice"))
    context.add_user_message("question")
    service.save_conversation(context, thinker, wait=False)
    assert service.force_release(cid, "alice") == thinker.job_id  # handed back at once
    service.remove_conversation(cid, "alice")  # committed after the queued save
    service.release(thinker)  # the dying turn's own release settles the deferred save
    assert not store.exists(cid, "alice") and cache.get(cid, "alice") is None
    again = BasicThinker("alice")
    again.set_conversation_id(cid)
    with pytest.raises(ConversationUnavailableError):
        service.obtain_conversation(None, again).get(timeout=5)
