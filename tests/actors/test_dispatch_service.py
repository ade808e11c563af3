"""The service on actors drained by their senders: a warm lease runs in the caller's
thread, idle conversations hold no thread, hand-offs and give-ups racing each other (sync
and on an event loop) never grant twice, and the ownership stress on two mailboxes."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from pathlib import Path
from typing import Any

import pykka
import pytest

from parlour.actors import BasicThinker, ConversationService
from parlour.runtime.errors import ConversationUnavailableError
from tests.actors.stress import run_stress


def _adopter(cid: str) -> BasicThinker:
    thinker = BasicThinker("alice")
    thinker.set_conversation_id(cid)
    return thinker


def _watch_threads(service: ConversationService, cid: str) -> list[threading.Thread]:
    """The threads that run the conversation actor's handlers, from now on."""
    ref = service._live[cid]
    actor: Any = ref._actor_weakref()
    assert actor is not None
    ran: list[threading.Thread] = []
    handle = actor.on_receive

    def recording(message: object) -> object:
        ran.append(threading.current_thread())
        return handle(message)

    actor.on_receive = recording
    return ran


def test_a_warm_obtain_and_its_release_are_handled_in_the_callers_own_thread() -> None:
    with ConversationService(cleanup_interval_s=0) as service:
        thinker = BasicThinker("alice", retain_duration=dt.timedelta(minutes=1))
        cid = thinker.mint_conversation_id()
        service.obtain_conversation(None, thinker).get(timeout=5)
        service.release(thinker)
        ran = _watch_threads(service, cid)
        for _ in range(20):
            service.obtain_conversation(None, thinker).get(timeout=0)  # answered already
            service.release(thinker)
        assert ran == [threading.current_thread()] * 40


def test_ten_thousand_idle_conversations_hold_no_thread() -> None:
    before = {t.ident for t in threading.enumerate()}
    with ConversationService(cleanup_interval_s=0) as service:
        for n in range(10_000):
            thinker = BasicThinker(f"user-{n % 7}", retain_duration=dt.timedelta(minutes=10))
            thinker.mint_conversation_id()
            service.obtain_conversation(None, thinker).get(timeout=5)
            service.release(thinker)
        stats = service.get_stats()
        assert (stats.total, stats.owned) == (10_000, 0)
        assert len(service._live) == 10_000  # every one an actor: none parked
        assert {t.ident for t in threading.enumerate()} <= before


def test_a_release_racing_a_waiters_cancel_grants_the_lease_once_or_not_at_all() -> None:
    with ConversationService(cleanup_interval_s=0) as service:
        owner = BasicThinker("alice")
        cid = owner.mint_conversation_id()
        for _ in range(200):
            service.obtain_conversation(None, owner).get(timeout=5)
            waiter = _adopter(cid)
            waiting = service.obtain_conversation(None, waiter)
            both = threading.Barrier(2)
            cancelled: list[bool] = []
            thread = threading.Thread(target=_cancel_at, args=(both, waiting, cancelled))
            thread.start()
            both.wait(timeout=5)
            service.release(owner)
            thread.join(timeout=5)
            if cancelled == [True]:  # never granted: nobody owns it now
                with pytest.raises(ConversationUnavailableError, match="cancelled"):
                    waiting.get(timeout=1)
            else:  # the grant won: the waiter owns it and must give it back
                assert waiting.get(timeout=5).conversation_id == cid
                assert service.owning_thinker(cid, "alice") is waiter
                service.release(waiter)
            assert service.get_stats().owned == 0


def _cancel_at(both: threading.Barrier, waiting: Any, into: list[bool]) -> None:
    both.wait(timeout=5)
    into.append(waiting.cancel())


def test_on_an_event_loop_a_release_hands_over_and_a_cancelled_waiter_is_never_granted() -> None:
    async def scenario(service: ConversationService) -> None:
        owner = BasicThinker("alice")
        cid = owner.mint_conversation_id()
        await service.obtain_async(None, owner)
        entered: asyncio.Queue[None] = asyncio.Queue()
        loop, enter = asyncio.get_running_loop(), service._activator._enter

        def signalling(*args: Any) -> Any:
            answer = enter(*args)
            loop.call_soon_threadsafe(entered.put_nowait, None)
            return answer

        service._activator._enter = signalling  # type: ignore[method-assign,assignment]
        gone, next_in_line = _adopter(cid), _adopter(cid)
        cancelled = asyncio.ensure_future(service.obtain_async(None, gone))
        waiting = asyncio.ensure_future(service.obtain_async(None, next_in_line))
        await entered.get()
        await entered.get()  # both queued behind the owner
        assert len(_actor(service, cid).waiters) == 2
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        service.release(owner)  # the hand-off runs here, on the loop's thread
        context = await asyncio.wait_for(waiting, timeout=5)
        assert context.conversation_id == cid
        assert service.owning_thinker(cid, "alice") is next_in_line
        service.release(next_in_line)
        assert service.get_stats().owned == 0

    with ConversationService(cleanup_interval_s=0) as service:
        asyncio.run(scenario(service))


def _actor(service: ConversationService, cid: str) -> Any:
    actor = service._live[cid]._actor_weakref()
    assert actor is not None
    return actor


def test_calls_after_a_stop_reach_no_actor_and_none_waits() -> None:
    service = ConversationService(cleanup_interval_s=0, shutdown_grace_s=0.1)
    thinker = BasicThinker("alice", retain_duration=dt.timedelta(minutes=1))
    cid = thinker.mint_conversation_id()
    service.obtain_conversation(None, thinker).get(timeout=5)
    service.release(thinker)
    ref = service._live[cid]
    service.stop()
    assert not ref.is_alive()
    with pytest.raises(pykka.ActorDeadError):
        ref.ask(object(), block=True, timeout=1)
    refused = service.obtain_conversation(None, thinker)
    with pytest.raises(Exception, match="shutting down"):
        refused.get(timeout=0)


def test_the_ownership_stress_on_two_conversations_and_one_actor_never_sees_two_owners(
    tmp_path: Path,
) -> None:
    report = run_stress(
        tmp_path / "db", threads=32, conversations=2, turns_per_thread=6, max_active=1
    )
    assert report.violations == []
    assert report.turns == report.acknowledged == 32 * 6
    assert report.eviction_attempts > 0 and report.force_releases > 0
