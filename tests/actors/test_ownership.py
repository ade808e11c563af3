"""Exclusive ownership: one owner at a time, FIFO handoff, timeouts that name the owner."""

from __future__ import annotations

import threading
import time

import pykka
import pytest

from parlour.actors import BasicThinker, ConversationService
from parlour.runtime.errors import ConversationUnavailableError


def _owner_and_challenger(service: ConversationService) -> tuple[BasicThinker, BasicThinker]:
    owner = BasicThinker("alice")
    cid = owner.mint_conversation_id()
    service.obtain_conversation(None, owner).get(timeout=5)
    challenger = BasicThinker("alice")
    challenger.set_conversation_id(cid)
    return owner, challenger


def test_a_busy_conversation_is_waited_for_and_handed_over_at_release(
    service: ConversationService,
) -> None:
    owner, challenger = _owner_and_challenger(service)
    waiting = service.obtain_conversation(None, challenger)
    assert service.owning_thinker(owner.conversation_id, "alice") is owner
    released_at = time.monotonic()
    service.release(owner)
    context = waiting.get(timeout=5)
    assert time.monotonic() - released_at < 0.2
    assert context.conversation_id == owner.conversation_id
    assert context.workflow_id == challenger.workflow_id  # the new owner's workflow
    assert service.owning_thinker(owner.conversation_id, "alice") is challenger


def test_a_get_shorter_than_the_service_timeout_gives_the_obtain_up(
    service: ConversationService,
) -> None:
    owner, challenger = _owner_and_challenger(service)
    waiting = service.obtain_conversation(None, challenger)
    with pytest.raises(pykka.Timeout):
        waiting.get(timeout=0.05)
    service.release(owner, retain=60)
    assert service.owning_thinker(owner.conversation_id, "alice") is None  # never granted
    with pytest.raises(ConversationUnavailableError, match="was cancelled"):
        waiting.get(timeout=1)
    again = BasicThinker("alice")
    again.set_conversation_id(owner.conversation_id)
    service.obtain_conversation(None, again).get(timeout=1)
    assert service.owning_thinker(owner.conversation_id, "alice") is again


def test_the_owner_obtaining_again_gets_it_at_once(service: ConversationService) -> None:
    owner = BasicThinker("alice")
    owner.mint_conversation_id()
    first = service.obtain_conversation(None, owner).get(timeout=5)
    again = service.obtain_conversation(None, owner).get(timeout=0.1)
    assert again is first


def test_a_waiter_times_out_with_the_owner_named(service: ConversationService) -> None:
    assert ConversationService(cleanup_interval_s=0).conversation_timeout_s == 30.0
    service.conversation_timeout_s = 0.1
    owner, challenger = _owner_and_challenger(service)
    with pytest.raises(ConversationUnavailableError) as raised:
        service.obtain_conversation(None, challenger).get(timeout=5)
    assert str(raised.value) == (
        f"Timed out after 100ms waiting for conversation {owner.conversation_id} "
        f"(owned by {owner.job_id})"
    )
    service.release(owner)  # the gave-up waiter is skipped at handoff
    assert service.owning_thinker(owner.conversation_id, "alice") is None


def test_one_release_wakes_exactly_one_of_three_waiters_in_order(
    service: ConversationService,
) -> None:
    owner, _ = _owner_and_challenger(service)
    waiters = []
    for _ in range(3):
        t = BasicThinker("alice")
        t.set_conversation_id(owner.conversation_id)
        waiters.append((t, service.obtain_conversation(None, t)))
    service.release(owner)
    waiters[0][1].get(timeout=5)
    assert service.owning_thinker(owner.conversation_id, "alice") is waiters[0][0]
    service.release(waiters[0][0])
    waiters[1][1].get(timeout=5)
    assert service.owning_thinker(owner.conversation_id, "alice") is waiters[1][0]


def test_waiting_does_not_block_the_service(service: ConversationService) -> None:
    owner, challenger = _owner_and_challenger(service)
    waiting = service.obtain_conversation(None, challenger)
    start = time.monotonic()
    service.get_stats()
    service.owning_thinker(owner.conversation_id, "alice")
    other = BasicThinker("bob")
    other.mint_conversation_id()
    service.obtain_conversation(None, other).get(timeout=1)
    service.release(other)
    assert time.monotonic() - start < 0.5
    service.release(owner)
    waiting.get(timeout=5)


def test_sixteen_threads_contending_never_see_two_owners(service: ConversationService) -> None:
    # an overlap detector around the critical section must never trip.
    first = BasicThinker("alice")
    cid = first.mint_conversation_id()
    service.obtain_conversation(None, first).get(timeout=5)
    service.save_conversation(service.obtain_conversation(None, first).get(timeout=5), first)
    service.release(first)
    inside = 0
    peak = 0
    acquisitions = 0
    guard = threading.Lock()  # protects the detector's counters, not the conversation
    errors: list[BaseException] = []

    def contend(n: int) -> None:
        nonlocal inside, peak, acquisitions
        try:
            for _ in range(5):
                t = BasicThinker("alice")
                t.set_conversation_id(cid)
                context = service.obtain_conversation(None, t).get(timeout=30)
                with guard:
                    inside += 1
                    peak = max(peak, inside)
                    acquisitions += 1
                context.add_user_message(f"thread {n}")
                with guard:
                    inside -= 1
                service.release(t)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert peak == 1
    assert acquisitions == 80
    last = BasicThinker("alice")
    last.set_conversation_id(cid)
    context = service.obtain_conversation(None, last).get(timeout=5)
    assert len(context.messages) == 80  # nothing lost: every owner's message is there


class CancellableThinker(BasicThinker):
    """A thinker whose turn parks until its workflow is cancelled."""

    def __init__(self, user_id: str) -> None:
        super().__init__(user_id)
        self.cancel_requested = threading.Event()

    def cancel_workflow(self, reason: str) -> None:
        super().cancel_workflow(reason)
        self.cancel_requested.set()


def test_force_release_cancels_the_live_turn_which_then_releases_itself(
    service: ConversationService,
) -> None:
    thinker = CancellableThinker("alice")
    cid = thinker.mint_conversation_id()
    acquired = threading.Event()
    released = threading.Event()

    def turn() -> None:
        service.obtain_conversation(None, thinker).get(timeout=5)
        acquired.set()
        try:
            thinker.cancel_requested.wait(timeout=10)  # the turn's loop, parked
        finally:
            service.release(thinker, retain=0)
            released.set()

    worker = threading.Thread(target=turn)
    worker.start()
    assert acquired.wait(timeout=5)
    assert service.force_release(cid, "alice") == thinker.job_id
    assert thinker.cancelled == "Conversation force-released by alice"
    assert released.wait(timeout=5)
    worker.join(timeout=5)
    assert service.owning_thinker(cid, "alice") is None


def test_force_release_refuses_unknown_ids_and_foreign_users(service: ConversationService) -> None:
    with pytest.raises(ValueError, match=r"^Conversation with ID nope does not exist$"):
        service.force_release("nope", "alice")
    thinker = BasicThinker("alice")
    cid = thinker.mint_conversation_id()
    service.obtain_conversation(None, thinker).get(timeout=5)
    with pytest.raises(PermissionError, match=f"^User mallory does not own conversation {cid}$"):
        service.force_release(cid, "mallory")
    service.release(thinker, retain=60)
    assert service.force_release(cid, "alice") is None  # idle: nothing to release
