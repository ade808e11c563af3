"""Waiters are never abandoned or orphaned: cancelled obtains, sync and asyncio."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from parlour.actors import BasicThinker, ConversationService
from parlour.runtime.errors import ConversationUnavailableError


def _held(service: ConversationService) -> tuple[BasicThinker, str]:
    owner = BasicThinker("alice")
    cid = owner.mint_conversation_id()
    service.obtain_conversation(None, owner).get(timeout=5)
    return owner, cid


def _adopter(cid: str) -> BasicThinker:
    thinker = BasicThinker("alice")
    thinker.set_conversation_id(cid)
    return thinker


def test_a_cancelled_obtain_is_never_granted_and_the_next_waiter_is(
    service: ConversationService,
) -> None:
    owner, cid = _held(service)
    gone, next_in_line = _adopter(cid), _adopter(cid)
    cancelled = service.obtain_conversation(None, gone)
    waiting = service.obtain_conversation(None, next_in_line)
    assert cancelled.cancel() is True
    assert cancelled.cancel() is False  # once
    service.release(owner)
    assert waiting.get(timeout=5).conversation_id == cid
    assert service.owning_thinker(cid, "alice") is next_in_line
    with pytest.raises(ConversationUnavailableError, match="was cancelled"):
        cancelled.get(timeout=1)


def test_cancelling_an_obtain_that_was_already_granted_answers_false(
    service: ConversationService,
) -> None:
    owner, cid = _held(service)
    assert service.obtain_conversation(None, owner).cancel() is False  # granted at once
    assert service.owning_thinker(cid, "alice") is owner


def _signal_entries(service: ConversationService) -> threading.Event:
    """Set an event once an obtain's acquire has been answered (granted or queued)."""
    entered = threading.Event()
    enter = service._activator._enter

    def signalling(*args: Any) -> Any:
        answer = enter(*args)
        entered.set()
        return answer

    service._activator._enter = signalling  # type: ignore[method-assign,assignment]
    return entered


def test_an_async_obtain_is_granted_at_handoff_from_the_actor_thread(
    service: ConversationService,
) -> None:
    owner, cid = _held(service)
    waiter = _adopter(cid)
    entered = _signal_entries(service)

    async def main() -> str | None:
        task = asyncio.create_task(service.obtain_async(None, waiter))
        assert await asyncio.to_thread(entered.wait, 5)  # queued behind the owner
        assert not task.done()
        await asyncio.to_thread(service.release, owner)
        context = await asyncio.wait_for(task, timeout=5)
        return context.conversation_id

    assert asyncio.run(main()) == cid
    assert service.owning_thinker(cid, "alice") is waiter


def test_a_cancelled_async_obtain_is_never_granted(service: ConversationService) -> None:
    owner, cid = _held(service)
    gone, next_in_line = _adopter(cid), _adopter(cid)
    entered = _signal_entries(service)

    async def main() -> None:
        task = asyncio.create_task(service.obtain_async(None, gone))
        assert await asyncio.to_thread(entered.wait, 5)  # queued first
        follower = service.obtain_conversation(None, next_in_line)  # queued second
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.to_thread(service.release, owner)
        await asyncio.to_thread(follower.get, timeout=5)

    asyncio.run(main())
    assert service.owning_thinker(cid, "alice") is next_in_line
    service.release(next_in_line, retain=60)
    assert service.owning_thinker(cid, "alice") is None  # the cancelled task never got it


def test_an_async_obtain_of_a_free_conversation_completes_at_once(
    service: ConversationService,
) -> None:
    thinker = BasicThinker("alice")
    cid = thinker.mint_conversation_id()
    context = asyncio.run(service.obtain_async(None, thinker))
    assert context.conversation_id == cid
    assert service.owning_thinker(cid, "alice") is thinker


def test_a_cancel_that_loses_the_race_to_the_grant_releases_the_lease_to_the_next_waiter(
    service: ConversationService,
) -> None:
    owner, cid = _held(service)
    late, next_in_line = _adopter(cid), _adopter(cid)
    raced = service.obtain_conversation(None, late)
    waiting = service.obtain_conversation(None, next_in_line)
    service.release(owner)
    assert service.owning_thinker(cid, "alice") is late  # granted, not yet taken by get
    assert raced.cancel() is True
    assert waiting.get(timeout=5).conversation_id == cid
    assert service.owning_thinker(cid, "alice") is next_in_line
    with pytest.raises(ConversationUnavailableError, match="was cancelled"):
        raced.get(timeout=1)  # the caller never sees a lease it gave up
