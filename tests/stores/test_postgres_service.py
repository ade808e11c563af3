"""Two ConversationServices sharing one PostgreSQL database, as two processes would."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from parlour.actors import BasicThinker, ConversationService
from parlour.runtime.errors import StaleVersionError
from parlour.stores import MemorySessionCache, PostgresStore


@pytest.fixture
def services(postgres_conninfo: str) -> Iterator[list[ConversationService]]:
    stores = [PostgresStore(postgres_conninfo), PostgresStore(postgres_conninfo)]
    made = [
        ConversationService(s, MemorySessionCache(), cleanup_interval_s=0, shutdown_grace_s=0.1)
        for s in stores
    ]
    yield made
    for service, store in zip(made, stores, strict=True):
        service.stop()
        store.close()


def test_a_conversation_saved_by_one_service_is_restored_by_another(
    services: list[ConversationService],
) -> None:
    first, second = services
    writer = BasicThinker("alice")
    cid = writer.mint_conversation_id()
    context = first.obtain_conversation(None, writer).get(timeout=5)
    context.add_user_message("Saved in the first process")
    first.save_conversation(context, writer)
    saved = context.to_snapshot()
    first.release(writer)

    reader = BasicThinker("alice", workflow_id=writer.workflow_id)
    reader.set_conversation_id(cid)
    restored = second.obtain_conversation(None, reader).get(timeout=5)
    assert restored.to_snapshot() == saved
    second.release(reader)


def test_a_service_holding_a_stale_copy_cannot_overwrite_the_other_services_save(
    services: list[ConversationService],
) -> None:
    first, second = services
    writer = BasicThinker("alice")
    cid = writer.mint_conversation_id()
    context = first.obtain_conversation(None, writer).get(timeout=5)
    context.add_user_message("First")
    first.save_conversation(context, writer)  # the first service keeps it warm

    other = BasicThinker("alice")
    other.set_conversation_id(cid)
    moved_on = second.obtain_conversation(None, other).get(timeout=5)
    moved_on.add_user_message("Second, from the other process")
    second.save_conversation(moved_on, other)
    second.release(other)

    context.add_user_message("Stale")
    with pytest.raises(StaleVersionError):
        first.save_conversation(context, writer)
    first.release(writer)
    stored = second.store.load(cid, "alice") if second.store else None
    assert stored is not None
    assert [m.raw_content for m in stored.messages] == ["First", "Second, from the other process"]


def _turn(service: ConversationService, cid: str, text: str, retain: float = 60.0) -> list[str]:
    """One turn of alice's on ``cid``: obtain, add ``text``, save, release (kept warm)."""
    thinker = BasicThinker("alice", retain_duration=dt.timedelta(seconds=retain))
    thinker.set_conversation_id(cid)
    context = service.obtain_conversation(None, thinker).get(timeout=5)
    seen = [m.raw_content for m in context.messages]
    context.add_user_message(text)
    service.save_conversation(context, thinker)
    service.release(thinker)
    return seen


def _started(service: ConversationService, text: str) -> str:
    writer = BasicThinker("alice", retain_duration=dt.timedelta(minutes=1))
    cid = writer.mint_conversation_id()
    context = service.obtain_conversation(None, writer).get(timeout=5)
    context.add_user_message(text)
    service.save_conversation(context, writer)
    service.release(writer)
    return cid


def test_a_warm_activation_older_than_the_other_services_save_is_restored_from_the_store(
    services: list[ConversationService],
) -> None:
    first, second = services
    cid = _started(first, "one")
    assert _turn(second, cid, "two") == ["one"]  # the second service now holds it warm
    assert _turn(first, cid, "three") == ["one", "two"]  # the first's warm copy was older
    assert _turn(second, cid, "four") == ["one", "two", "three"]
    assert second.get_stats().total == 1  # the stale activation was replaced, not doubled


def test_a_session_cache_entry_older_than_the_other_services_save_is_not_served(
    services: list[ConversationService],
) -> None:
    first, second = services
    cid = _started(first, "one")
    _turn(second, cid, "two", retain=0.0)  # evicted at release: only its cache keeps it
    assert second.get_stats().total == 0
    _turn(first, cid, "three")
    assert _turn(second, cid, "four") == ["one", "two", "three"]
