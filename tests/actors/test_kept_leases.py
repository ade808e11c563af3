"""A job that keeps its lease between its own turns (a chat): its next turn takes the lease
back without a message, and everyone else still gets it: another owner's obtain, a sweep
past retention, a force release, a stop, a dying activation."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable

from parlour.actors import Agent, ConversationService
from parlour.actors._kept import Kept
from parlour.actors._thinker import BasicThinker
from parlour.runtime import ConversationContext, Depth, OutputSize, ScriptedClient
from parlour.runtime.testing import FakeClock


class Keeper(BasicThinker):
    """A thinker that keeps its lease between its turns (what a chat's thinker does)."""

    def __init__(self, user_id: str, retain_s: float = 60.0) -> None:
        super().__init__(user_id, retain_duration=dt.timedelta(seconds=retain_s))
        self.kept_lease: Kept | None = None


def _turn(service: ConversationService, thinker: BasicThinker, text: str) -> None:
    context = service.obtain_conversation(None, thinker).get(timeout=10)
    context.add_user_message(text)
    service.save_conversation(context, thinker)
    service.release(thinker)


def _keeper_with_a_turn(service: ConversationService) -> tuple[Keeper, str]:
    keeper = Keeper("ann")
    cid = keeper.mint_conversation_id()
    _turn(service, keeper, "first")
    return keeper, cid


def _other(cid: str) -> BasicThinker:
    thinker = BasicThinker("ann")
    thinker.set_conversation_id(cid)
    return thinker


def test_consecutive_turns_take_the_kept_lease_back_and_it_counts_as_idle_between_them(
    service: ConversationService,
) -> None:
    keeper, cid = _keeper_with_a_turn(service)
    kept = keeper.kept_lease
    assert kept is not None and not kept.taken
    assert service.get_stats().owned == 0  # between turns nobody owns it
    assert service.owning_thinker(cid, "ann") is None
    _turn(service, keeper, "second")
    assert keeper.kept_lease is kept  # the same lease, no new grant
    stored = service.store.load(cid, "ann")  # type: ignore[union-attr]
    assert stored is not None and [m.raw_content for m in stored.messages] == ["first", "second"]


def test_another_owner_gets_a_kept_lease_at_once_and_the_keeper_obtains_anew_after_it(
    service: ConversationService,
) -> None:
    keeper, cid = _keeper_with_a_turn(service)
    other = _other(cid)
    context = service.obtain_conversation(None, other).get(timeout=1)  # never queued
    assert [m.raw_content for m in context.messages] == ["first"]
    context.add_user_message("other's")
    service.save_conversation(context, other)
    keeper_obtains = service.obtain_conversation(None, keeper)
    assert service.owning_thinker(cid, "ann") is other  # the keeper waits for it
    service.release(other)
    mine = keeper_obtains.get(timeout=10)
    assert [m.raw_content for m in mine.messages] == ["first", "other's"]
    assert keeper.kept_lease is not None and keeper.kept_lease.in_turn()
    service.release(keeper)


def test_an_owner_queued_during_the_keepers_turn_gets_the_lease_when_that_turn_ends(
    service: ConversationService,
) -> None:
    keeper, cid = _keeper_with_a_turn(service)
    context = service.obtain_conversation(None, keeper).get(timeout=1)
    waiting = service.obtain_conversation(None, _other(cid))
    assert service.owning_thinker(cid, "ann") is keeper  # the other waits
    context.add_user_message("second")
    service.save_conversation(context, keeper)
    service.release(keeper)  # someone waits: released for real, not kept
    granted = waiting.get(timeout=10)
    assert [m.raw_content for m in granted.messages] == ["first", "second"]
    assert keeper.kept_lease is None


def test_a_force_release_between_turns_takes_the_kept_lease_back(
    service: ConversationService,
) -> None:
    keeper, cid = _keeper_with_a_turn(service)
    kept = keeper.kept_lease
    assert service.force_release(cid, "ann") is None  # no turn was running
    assert kept is not None and kept.taken
    other = _other(cid)
    assert service.obtain_conversation(None, other).get(timeout=1) is not None
    service.release(other)
    _turn(service, keeper, "second")  # obtains anew
    assert keeper.kept_lease is not kept


def test_another_users_force_release_neither_takes_a_kept_lease_back_nor_learns_of_it(
    service: ConversationService,
) -> None:
    keeper, cid = _keeper_with_a_turn(service)
    kept = keeper.kept_lease
    try:
        service.force_release(cid, "bob")
    except PermissionError as exc:
        assert str(exc) == f"User bob does not own conversation {cid}"
    else:
        raise AssertionError("another user's force release was not refused")
    assert kept is not None and not kept.taken


def test_a_sweep_takes_a_kept_lease_back_only_after_its_retention(
    service: ConversationService, clock: FakeClock
) -> None:
    keeper, cid = _keeper_with_a_turn(service)
    kept = keeper.kept_lease
    assert service.sweep_expired() == 0
    assert kept is not None and not kept.taken
    clock.advance(61)
    assert service.sweep_expired() == 1
    assert kept.taken and service.get_stats().total == 0
    _turn(service, keeper, "second")  # restored from the store
    stored = service.store.load(cid, "ann")
    assert stored is not None and [m.raw_content for m in stored.messages] == ["first", "second"]


def test_a_sweep_never_takes_the_lease_of_a_running_turn(
    service: ConversationService, clock: FakeClock
) -> None:
    keeper, _ = _keeper_with_a_turn(service)
    context = service.obtain_conversation(None, keeper).get(timeout=1)
    clock.advance(120)
    assert service.sweep_expired() == 0
    assert keeper.kept_lease is not None and keeper.kept_lease.in_turn()
    context.add_user_message("second")
    service.release(keeper)
    assert not keeper.kept_lease.wanted  # a sweep wants nothing: the next idle time counts


def test_an_activation_that_dies_between_turns_leaves_the_keeper_nothing_to_reclaim(
    service: ConversationService,
) -> None:
    keeper, cid = _keeper_with_a_turn(service)
    kept = keeper.kept_lease
    ref = service._registry.mirror.refs[cid]
    ref.tell("a message no handler knows")  # the activation crashes
    assert kept is not None and kept.taken
    other = _other(cid)
    got = service.obtain_conversation(None, other).get(timeout=10)  # no take-over: free
    assert [m.raw_content for m in got.messages] == ["first"]
    service.release(other)
    _turn(service, keeper, "second")
    assert keeper.kept_lease is not kept


def test_stop_takes_kept_leases_back_instead_of_waiting_for_them(
    service: ConversationService,
) -> None:
    keeper, _ = _keeper_with_a_turn(service)
    kept = keeper.kept_lease
    stopping = threading.Thread(target=service.stop)
    stopping.start()
    stopping.join(timeout=30)
    assert not stopping.is_alive() and kept is not None and kept.taken


def test_a_thinker_with_no_retention_or_no_kept_lease_never_keeps(
    service: ConversationService,
) -> None:
    keeper = Keeper("ann", retain_s=0.0)
    keeper.mint_conversation_id()
    _turn(service, keeper, "first")
    assert keeper.kept_lease is None and service.get_stats().total == 0
    plain = BasicThinker("ann")
    plain.mint_conversation_id()
    _turn(service, plain, "first")
    assert not hasattr(plain, "kept_lease")


def test_a_chats_consecutive_sends_keep_the_lease_and_another_chat_takes_it_between(
    service: ConversationService,
) -> None:
    agent = Agent(ScriptedClient(), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
    chat = agent.chat(service, user_id="ann")
    chat.send("one")
    kept = chat.thinker.kept_lease
    chat.send("two")
    assert chat.thinker.kept_lease is kept and kept is not None
    other = agent.chat(service, user_id="ann", conversation_id=chat.conversation_id)
    other.send("three")  # takes it back at once
    assert kept.taken
    chat.send("four")  # obtains anew, and sees the other chat's turn
    texts = [entry.text for entry in chat.history() if entry.role == "user"]
    assert texts == ["one", "two", "three", "four"]


class _Interleaved:
    """The keeper's lock, letting the activation handle a request (on another thread)
    just before or just after the turn lets go."""

    def __init__(
        self, kept: Kept, before: Callable[[], object] | None, after: Callable[[], object] | None
    ) -> None:
        self.real, self.before, self.after = kept.turn, before, after

    def release(self) -> None:
        if self.before is not None:
            self.before()
        self.real.release()
        if self.after is not None:
            self.after()

    def acquire(self, blocking: bool = True) -> bool:
        return self.real.acquire(blocking)

    def locked(self) -> bool:
        return self.real.locked()


def test_a_request_the_activation_queued_just_before_the_turns_let_go_is_never_stranded() -> None:
    kept = Kept()
    took: list[bool] = []
    kept.turn = _Interleaved(kept, lambda: took.append(kept.take()), None)  # type: ignore[assignment]
    assert kept.keep(1.0, ConversationContext("c"), None) is False  # released for real
    assert took == [False] and not kept.taken  # the activation queued its request


def test_a_take_right_after_the_turns_let_go_leaves_the_keeper_nothing_to_release() -> None:
    kept = Kept()
    took: list[bool] = []
    kept.turn = _Interleaved(kept, None, lambda: took.append(kept.take()))  # type: ignore[assignment]
    assert kept.keep(1.0, ConversationContext("c"), None) is True  # nothing left to release
    assert took == [True] and kept.taken and kept.context is None
    assert kept.reclaim() is None  # the keeper's next turn obtains anew
