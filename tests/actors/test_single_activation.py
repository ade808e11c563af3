"""Single activation under eviction, restores racing evictions, stale saves, dying actors."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import parlour.actors._gate as gate_module
from parlour.actors import BasicThinker, ConversationService
from parlour.actors._conversation import ConversationActor
from parlour.actors._messages import (
    Acquire,
    Busy,
    FutureDelivery,
    Granted,
    Idle,
    Owner,
    Retiring,
    StopIfIdle,
)
from parlour.actors._supervisor import Seams
from parlour.runtime import ConversationContext
from parlour.runtime.errors import ConversationUnavailableError, StaleVersionError
from parlour.runtime.testing import FakeClock
from parlour.stores import LmdbStore, MemorySessionCache


def _acquire(job: str, user: str = "alice") -> Acquire:
    owner = Owner(job, user, "wf", None, hash(job))
    return Acquire(owner, 10_000.0, 60.0, 30.0, FutureDelivery())


def test_an_activation_that_agreed_to_stop_refuses_every_later_acquire() -> None:
    ref = ConversationActor.start(ConversationContext("c1", user_id="alice"), FakeClock())
    try:
        assert isinstance(ref.ask(StopIfIdle()), Idle)
        assert isinstance(ref.ask(_acquire("job-1")), Retiring)
        assert isinstance(ref.ask(_acquire("job-2")), Retiring)  # never a grant
    finally:
        ref.stop()


def test_an_owned_activation_does_not_agree_to_stop_and_keeps_granting_its_owner() -> None:
    ref = ConversationActor.start(ConversationContext("c1", user_id="alice"), FakeClock())
    try:
        assert isinstance(ref.ask(_acquire("job-1")), Granted)
        assert isinstance(ref.ask(StopIfIdle()), Busy)
        assert isinstance(ref.ask(_acquire("job-1")), Granted)
    finally:
        ref.stop()


@pytest.fixture(autouse=True)
def ungated(monkeypatch: pytest.MonkeyPatch) -> None:
    """These races are between service calls in threads, each test's seam pausing an actor
    until another thread's call gets in. Admission control (the turn gate, held by a
    thread's obtain, save and release on two CPUs) would run those calls one at a time, so
    the seam would wait for the gate: a cycle only a seam can make (actor handlers never
    wait for the gate). Calls from an event loop are never gated, so the races are real:
    they run ungated here, as on one CPU."""
    monkeypatch.setattr(gate_module, "_cpus", lambda: 1)


@pytest.fixture
def paused() -> Iterator[tuple[Seams, threading.Event, threading.Event]]:
    reached, go = threading.Event(), threading.Event()
    yield Seams(), reached, go
    go.set()


def _service(
    tmp_path: Path, seams: Seams, max_live: int = 64
) -> tuple[ConversationService, LmdbStore]:
    store = LmdbStore(tmp_path / "db")
    service = ConversationService(
        store,
        MemorySessionCache(),
        clock=FakeClock(),
        cleanup_interval_s=0,
        shutdown_grace_s=0.1,
        max_live=max_live,
        seams=seams,
    )
    return service, store


def _saved_turn(service: ConversationService, cid: str | None, text: str) -> BasicThinker:
    thinker = BasicThinker("alice")
    if cid is None:
        thinker.mint_conversation_id()
    else:
        thinker.set_conversation_id(cid)
    context = service.obtain_conversation(None, thinker).get(timeout=5)
    context.add_user_message(text)
    service.save_conversation(context, thinker)
    return thinker


def _evict_explicitly(service: ConversationService, first: BasicThinker) -> None:
    service.release(first, retain=60)
    service.evict_conversation(first.conversation_id)


def _release_with_zero_retention(service: ConversationService, first: BasicThinker) -> None:
    service.release(first, retain=0)


def _sweep_after_retention(service: ConversationService, first: BasicThinker) -> None:
    service.release(first, retain=60)
    assert isinstance(service.clock, FakeClock)
    service.clock.advance(61)
    service.sweep_expired()


def _spawn_past_the_live_cap(service: ConversationService, first: BasicThinker) -> None:
    service.release(first, retain=60)
    newcomer = BasicThinker("bob")
    newcomer.mint_conversation_id()
    service.obtain_conversation(None, newcomer).get(timeout=5)


EVICTIONS = {
    "evict_conversation": _evict_explicitly,
    "zero-retention release": _release_with_zero_retention,
    "sweep": _sweep_after_retention,
    "live cap": _spawn_past_the_live_cap,
}


@pytest.mark.parametrize("path", list(EVICTIONS))
def test_an_obtain_that_reaches_an_evicted_activation_looks_again_and_never_shares_the_lease(
    tmp_path: Path, paused: tuple[Seams, threading.Event, threading.Event], path: str
) -> None:
    seams, reached, go = paused
    looked_again = threading.Event()
    service, store = _service(tmp_path, seams, max_live=1)
    try:
        first = _saved_turn(service, None, "turn 1")
        cid = first.conversation_id

        def hold_between_idle_answer_and_stop(evicted: str) -> None:
            if evicted == cid:
                reached.set()
                assert go.wait(timeout=5)

        seams.after_idle_answer = hold_between_idle_answer_and_stop
        seams.on_look_again = lambda _: looked_again.set()
        evicting = threading.Thread(target=EVICTIONS[path], args=(service, first))
        evicting.start()
        assert reached.wait(timeout=5)  # the actor said "idle"; it is not stopped yet
        second = BasicThinker("alice")
        second.set_conversation_id(cid)
        got: list[ConversationContext] = []
        racer = threading.Thread(
            target=lambda: got.append(service.obtain_conversation(None, second).get(timeout=5))
        )
        racer.start()
        assert looked_again.wait(timeout=5)  # the dying actor refused it
        go.set()
        evicting.join(timeout=5)
        racer.join(timeout=5)
        assert [c.messages[0].raw_content for c in got] == ["turn 1"]
        third = BasicThinker("alice")
        third.set_conversation_id(cid)
        waiting = service.obtain_conversation(None, third)
        assert service.owning_thinker(cid, "alice") is second  # the third waits: one owner
        service.release(second)
        assert waiting.get(timeout=5).messages[0].raw_content == "turn 1"
    finally:
        service.stop()
        store.close()


def test_a_restore_that_loses_the_race_to_an_eviction_reloads_the_last_saved_turn(
    tmp_path: Path, paused: tuple[Seams, threading.Event, threading.Event]
) -> None:
    seams, reached, go = paused
    service, store = _service(tmp_path, seams)
    try:
        first = _saved_turn(service, None, "turn 1")
        cid = first.conversation_id
        service.release(first, retain=0)  # evicted: the next obtain restores from the store
        assert service.get_stats().total == 0
        pause_once = [True]

        def hold_between_load_and_spawn(_: str) -> None:
            if pause_once.pop() if pause_once else False:
                reached.set()
                assert go.wait(timeout=5)

        seams.after_load = hold_between_load_and_spawn
        late = BasicThinker("alice")
        late.set_conversation_id(cid)
        got: list[ConversationContext] = []
        restoring = threading.Thread(
            target=lambda: got.append(service.obtain_conversation(None, late).get(timeout=5))
        )
        restoring.start()
        assert reached.wait(timeout=5)  # loaded turn 1 only, not yet spawned
        other = _saved_turn(service, cid, "turn 2")
        service.release(other, retain=0)  # saved and evicted meanwhile
        go.set()
        restoring.join(timeout=5)
        assert [m.raw_content for m in got[0].messages] == ["turn 1", "turn 2"]
        got[0].add_user_message("turn 3")
        service.save_conversation(got[0], late)  # not stale: nothing acknowledged is lost
        assert len(store.load(cid, "alice").messages) == 3  # type: ignore[union-attr]
    finally:
        service.stop()
        store.close()


def test_a_stale_save_drops_the_activation_and_the_cache_entry_and_reraises(
    tmp_path: Path,
) -> None:
    service, store = _service(tmp_path, Seams())
    try:
        owner = _saved_turn(service, None, "turn 1")
        cid = owner.conversation_id
        context = service.obtain_conversation(None, owner).get(timeout=5)
        behind = store.load(cid, "alice")  # another door moves the record on
        assert behind is not None
        store.save_context(behind, "alice")
        context.add_user_message("turn 2")
        with pytest.raises(StaleVersionError):
            service.save_conversation(context, owner)
        assert service.session is not None
        assert service.session.get(cid, "alice") is None
        service.release(owner)
        assert service.get_stats().total == 0
        again = BasicThinker("alice")
        again.set_conversation_id(cid)
        fresh = service.obtain_conversation(None, again).get(timeout=5)
        assert fresh is not context
        assert fresh.stored_version == store.version_of(cid, "alice")
    finally:
        service.stop()
        store.close()


def test_an_actor_that_dies_while_owned_never_strands_or_fails_its_waiters(
    service: ConversationService,
) -> None:
    """Its waiters are neither stranded nor failed: they obtain again (a next activation
    takes the recorded lease over while the holder has it: ``test_dead_activation.py``)."""
    owner = BasicThinker("alice")
    cid = owner.mint_conversation_id()
    context = service.obtain_conversation(None, owner).get(timeout=5)
    context.add_user_message("hello")
    service.save_conversation(context, owner)
    waiter = BasicThinker("alice")
    waiter.set_conversation_id(cid)
    waiting = service.obtain_conversation(None, waiter)
    service._live[cid].tell(object())  # a crash inside the actor (an unknown told message)
    service.release(owner)
    granted = waiting.get(timeout=2)  # well under the 30 s service timeout
    assert [m.raw_content for m in granted.messages] == ["hello"]
    service.release(waiter)


class RaisingTranscript(BasicThinker):
    def keep_transcript(self, messages: object) -> None:
        raise RuntimeError("the hook failed")


def test_a_raising_keep_transcript_hook_never_stops_the_handoff(
    service: ConversationService,
) -> None:
    owner = RaisingTranscript("alice")
    cid = owner.mint_conversation_id()
    service.obtain_conversation(None, owner).get(timeout=5)
    waiter = BasicThinker("alice")
    waiter.set_conversation_id(cid)
    waiting = service.obtain_conversation(None, waiter)
    service.release(owner)
    assert waiting.get(timeout=2).conversation_id == cid
    assert service.owning_thinker(cid, "alice") is waiter


def test_a_waiter_past_its_deadline_is_failed_by_the_sweep_on_the_injected_clock(
    service: ConversationService, clock: FakeClock
) -> None:
    owner = BasicThinker("alice")
    cid = owner.mint_conversation_id()
    service.obtain_conversation(None, owner).get(timeout=5)
    waiter = BasicThinker("alice")
    waiter.set_conversation_id(cid)
    waiting = service.obtain_conversation(None, waiter)
    clock.advance(31)
    service.sweep_expired()
    with pytest.raises(ConversationUnavailableError, match=f"owned by {owner.job_id}"):
        waiting.get(timeout=2)
    service.release(owner, retain=60)
    assert service.owning_thinker(cid, "alice") is None
