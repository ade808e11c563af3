"""Two ConversationServices sharing one PostgreSQL database, as two processes would."""

from __future__ import annotations

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
