"""A ConversationService on a PostgresStore that another process (another store object on
the same database) writes too: another user's delete of the id does not reach a live,
unsaved conversation, and a save the fence refuses does not fail the obtains queued behind
it (they are granted on a reloaded activation)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from parlour.actors import BasicThinker, ConversationService
from parlour.runtime import ConversationContext
from parlour.runtime.errors import StaleVersionError
from parlour.stores import MemorySessionCache, PostgresStore


@pytest.fixture
def stores(postgres_conninfo: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    first, second = PostgresStore(postgres_conninfo), PostgresStore(postgres_conninfo)
    yield first, second
    first.close()
    second.close()


@pytest.fixture
def service(stores: tuple[PostgresStore, PostgresStore]) -> Iterator[ConversationService]:
    made = ConversationService(
        stores[0], MemorySessionCache(), cleanup_interval_s=0, shutdown_grace_s=0.1
    )
    yield made
    made.stop()


def test_another_users_delete_does_not_drop_a_live_unsaved_conversation(
    stores: tuple[PostgresStore, PostgresStore], service: ConversationService
) -> None:
    """Bob creates the id through another process's store (the reservation is this
    process's) and deletes it through this one: before, the service's delete listener
    doomed alice's live activation by id and failed the obtain queued behind her."""
    mine, other = stores
    alice = BasicThinker("alice")
    cid = alice.mint_conversation_id()
    context = service.obtain_conversation(None, alice).get(timeout=5)
    context.add_user_message("alice's")
    second = BasicThinker("alice", workflow_id=alice.workflow_id)
    second.set_conversation_id(cid)
    queued = service.obtain_conversation(None, second)
    bobs = ConversationContext(cid, user_id="bob")
    bobs.add_user_message("bob's")
    assert other.create_context(bobs.to_snapshot(), "bob") == 1
    assert mine.delete(cid, "bob") is True
    service.save_conversation(context, alice)  # the record is gone: alice's create makes it
    service.release(alice)
    granted = queued.get(timeout=5)
    assert granted is context and [m.raw_content for m in granted.messages] == ["alice's"]
    service.release(second)
    stored = mine.load(cid, "alice")
    assert stored is not None and [m.raw_content for m in stored.messages] == ["alice's"]


def _another_process_saves(other: PostgresStore, cid: str, text: str) -> None:
    theirs = other.load(cid, "alice")
    assert theirs is not None
    context = theirs.to_conversation(None)
    context.add_user_message(text)
    other.save_context(context.to_snapshot(), "alice")


def test_a_save_refused_by_the_fence_grants_the_obtains_queued_behind_it_on_a_fresh_load(
    stores: tuple[PostgresStore, PostgresStore], service: ConversationService
) -> None:
    """Before, the refused save dropped the activation and every obtain queued behind it
    failed with ``ConversationUnavailableError``."""
    _, other = stores
    alice = BasicThinker("alice")
    cid = alice.mint_conversation_id()
    context = service.obtain_conversation(None, alice).get(timeout=5)
    context.add_user_message("first")
    service.save_conversation(context, alice)
    waiters = [BasicThinker("alice", workflow_id=alice.workflow_id) for _ in range(2)]
    for waiter in waiters:
        waiter.set_conversation_id(cid)
    queued = [service.obtain_conversation(None, waiter) for waiter in waiters]
    _another_process_saves(other, cid, "from the other process")
    context.add_user_message("stale")
    with pytest.raises(StaleVersionError):
        service.save_conversation(context, alice)
    service.release(alice)
    for waiter, obtaining in zip(waiters, queued, strict=True):
        granted = obtaining.get(timeout=5)
        assert granted is not context and granted.stored_version == 2
        assert [m.raw_content for m in granted.messages] == ["first", "from the other process"]
        service.release(waiter)


def test_an_async_obtain_queued_behind_a_refused_save_is_granted_on_a_fresh_load(
    stores: tuple[PostgresStore, PostgresStore], service: ConversationService
) -> None:
    _, other = stores
    alice = BasicThinker("alice")
    cid = alice.mint_conversation_id()
    context = service.obtain_conversation(None, alice).get(timeout=5)
    context.add_user_message("first")
    service.save_conversation(context, alice)
    waiter = BasicThinker("alice", workflow_id=alice.workflow_id)
    waiter.set_conversation_id(cid)

    async def scenario() -> ConversationContext:
        queued = asyncio.Event()
        real = service._activator._waiting

        def waiting_noted(*args: Any) -> Any:  # called once the obtain is queued
            queued.set()
            return real(*args)

        service._activator._waiting = waiting_noted  # type: ignore[method-assign,assignment]
        waiting = asyncio.ensure_future(service.obtain_async(None, waiter))
        await queued.wait()
        _another_process_saves(other, cid, "from the other process")
        context.add_user_message("stale")
        with pytest.raises(StaleVersionError):
            service.save_conversation(context, alice)
        service.release(alice)
        return await asyncio.wait_for(waiting, 5)

    granted = asyncio.run(scenario())
    assert granted.stored_version == 2
    assert [m.raw_content for m in granted.messages] == ["first", "from the other process"]
    service.release(waiter)
