"""The lighter actor under every conversation: no thread of its own (an idle one answers in
the asker's thread), kept out of pykka's global registry, a first message answered before
launch, and the parking of idle actors a batch at a time past the actor cap."""

from __future__ import annotations

import datetime as dt
import gc
import os
import queue
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pykka
import pytest

from parlour.actors import Agent, BasicThinker, ConversationService
from parlour.actors._conversation import ConversationActor
from parlour.actors._messages import (
    Acquire,
    FutureDelivery,
    Granted,
    Owner,
    QueryOwner,
    Spawn,
    StopIfIdle,
)
from parlour.actors._obtain import Obtaining
from parlour.actors._reply import Reply
from parlour.runtime import ConversationContext, Depth, IncomingMessage, OutputSize, ScriptedClient
from parlour.runtime.testing import FakeClock
from parlour.stores import LmdbStore
from tests.actors.stress import run_stress


def _acquire(job: str, user: str = "alice") -> Acquire:
    return Acquire(Owner(job, user, "wf", None, hash(job)), 10_000.0, 60.0, 30.0, FutureDelivery())


def test_live_actors_hold_no_thread_and_an_idle_one_answers_in_the_askers_thread() -> None:
    before = {t.ident for t in threading.enumerate()}
    clock = FakeClock()
    refs = [ConversationActor.start(ConversationContext(f"c{i}"), clock) for i in range(64)]
    seen: list[threading.Thread] = []

    def record(message: object) -> object:
        seen.append(threading.current_thread())
        return None

    try:
        for ref in refs:
            actor = ref._actor_weakref()
            assert actor is not None
            actor.on_receive = record  # type: ignore[method-assign]
            assert ref.ask(QueryOwner(), block=False).get(timeout=0) is None  # answered already
        assert {t.ident for t in threading.enumerate()} <= before  # no thread was started
        assert seen == [threading.current_thread()] * len(refs)
    finally:
        for ref in refs:
            ref.stop()
    assert all(not ref.is_alive() for ref in refs)


def test_a_thread_waiting_for_an_actor_to_stop_wakes_when_it_stops() -> None:
    ref = ConversationActor.start(ConversationContext("c-wait"), FakeClock())
    stopped = ref.actor_stopped
    assert not stopped.is_set() and stopped.wait(timeout=0) is False
    waiting, woke = threading.Event(), queue.Queue[bool]()

    def wait() -> None:
        waiting.set()
        woke.put(stopped.wait(timeout=30))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    assert waiting.wait(timeout=5)
    ref.stop()
    assert woke.get(timeout=30) is True and stopped.is_set()
    assert stopped.wait() is True and not ref.is_alive()  # a wait after the stop: at once
    waiter.join(timeout=5)


def test_conversation_actors_stay_out_of_the_global_registry_and_stop_with_the_service() -> None:
    service = ConversationService(cleanup_interval_s=0)
    thinkers = []
    for i in range(5):
        thinker = BasicThinker(f"user-{i}", retain_duration=dt.timedelta(minutes=5))
        thinker.mint_conversation_id()
        service.obtain_conversation(None, thinker).get(timeout=5)
        service.release(thinker)
        thinkers.append(thinker)
    refs = list(service._live.values())
    assert len(refs) == 5 and all(ref.is_alive() for ref in refs)
    assert pykka.ActorRegistry.get_by_class(ConversationActor) == []
    assert [r.actor_urn for r in pykka.ActorRegistry.get_all()] == [
        service._registry.supervisor.actor_urn
    ]
    assert len({ref.actor_urn for ref in refs}) == 5  # distinct identities
    service.stop()
    assert not any(ref.is_alive() for ref in refs)
    assert pykka.ActorRegistry.get_all() == []


def test_a_stop_of_every_registered_actor_also_stops_every_conversation_actor() -> None:
    service = ConversationService(cleanup_interval_s=0)
    thinker = BasicThinker("alice")
    thinker.mint_conversation_id()
    service.obtain_conversation(None, thinker).get(timeout=5)
    service.release(thinker)
    (ref,) = service._live.values()
    pykka.ActorRegistry.stop_all()  # what a test teardown or a crash does: the supervisor
    assert not ref.is_alive()


def test_a_spawn_answers_the_first_acquire_before_the_activation_runs_a_message() -> None:
    service = ConversationService(cleanup_interval_s=0, shutdown_grace_s=0.1)  # job-1 keeps it
    try:
        context = ConversationContext("c1", user_id="alice")
        forwarded = service._registry.supervisor.ask(
            Spawn(context, 0, _acquire("job-1")), block=True
        )
        answer = forwarded.reply.get(timeout=0)  # settled already: no wait for a thread
        assert isinstance(answer, Granted) and answer.context is context
        assert forwarded.ref.ask(QueryOwner(), block=True).job_id == "job-1"
        again = service._registry.supervisor.ask(Spawn(context, 0, _acquire("job-2")), block=True)
        assert again.ref is forwarded.ref  # live already: forwarded, never a second actor
        assert not isinstance(again.reply.get(timeout=5), Granted)  # queued behind job-1
    finally:
        service.stop()


def test_a_first_acquire_of_another_users_context_is_refused_before_launch() -> None:
    actor = ConversationActor(ConversationContext("c1", user_id="alice"), FakeClock())
    reply = actor.answer_first(_acquire("job-1", user="mallory"))
    with pytest.raises(PermissionError, match="mallory"):
        reply.get(timeout=0)
    ref = actor.launch()
    try:
        assert ref.ask(QueryOwner(), block=True) is None  # nobody was granted
    finally:
        ref.stop()


def test_a_settled_reply_answers_at_once_and_refuses_a_second_value() -> None:
    done = Reply.settled("value")
    assert done.get(timeout=0) == "value"
    with pytest.raises(queue.Full):
        done.set("other")
    assert done.get() == "value"
    ready = Obtaining.ready(ConversationContext("c1"))
    assert isinstance(ready, pykka.ThreadingFuture) and not ready.cancel()
    assert ready.get(timeout=0).conversation_id == "c1"


def test_past_the_actor_cap_the_least_recently_used_idle_actors_park_a_batch_at_once() -> None:
    clock = FakeClock()
    with ConversationService(cleanup_interval_s=0, clock=clock, max_active=32) as service:
        thinkers = []
        for i in range(33):
            thinker = BasicThinker("alice", retain_duration=dt.timedelta(minutes=5))
            thinker.mint_conversation_id()
            context = service.obtain_conversation(None, thinker).get(timeout=5)
            context.add_user_message(f"c{i}")
            service.release(thinker)
            thinkers.append(thinker)
        first_two = {t.conversation_id for t in thinkers[:2]}
        assert set(service._registry.mirror.parked) == first_two  # 32 // 16 parked together
        assert len(service._registry.mirror.refs) == 31
        for thinker in thinkers[:2]:
            context = service.obtain_conversation(None, thinker).get(timeout=5)
            assert [m.raw_content for m in context.messages] == [f"c{thinkers.index(thinker)}"]
            service.release(thinker)
        assert len(service._registry.mirror.refs) <= 32 and service.get_stats().total == 33


def test_an_idle_actor_that_answered_idle_to_the_supervisor_is_stopped_without_a_wait() -> None:
    clock = FakeClock()
    with ConversationService(cleanup_interval_s=0, clock=clock) as service:
        thinker = BasicThinker("alice", retain_duration=dt.timedelta(seconds=1))
        thinker.mint_conversation_id()
        service.obtain_conversation(None, thinker).get(timeout=5)
        service.release(thinker)
        (ref,) = service._live.values()
        clock.advance(2)
        assert service.sweep_expired() == 1
        assert ref.actor_stopped.wait(timeout=5)  # it stopped on its own, told once
        assert thinker.conversation_id not in service._live
        with pytest.raises(pykka.ActorDeadError):
            ref.ask(StopIfIdle(), block=True)


class _CountingRef:
    """The supervisor's ref, counting what is sent to it (asks and tells alike)."""

    def __init__(self, ref: pykka.ActorRef[Any]) -> None:
        self.ref = ref
        self.sent: list[object] = []

    def ask(self, message: object, **kwargs: Any) -> object:
        self.sent.append(message)
        return self.ref.ask(message, **kwargs)

    def tell(self, message: object) -> None:
        self.sent.append(message)
        self.ref.tell(message)

    def stop(self, **kwargs: Any) -> object:
        return self.ref.stop(**kwargs)


class _RecordingInbox:
    """An actor's inbox as its ref sees it: records each message's kind, then delivers."""

    def __init__(self, inbox: Any) -> None:
        self.inbox = inbox
        self.kinds: list[str] = []

    def put(self, envelope: Any) -> None:
        self.kinds.append(type(envelope.message).__name__)
        self.inbox.put(envelope)

    def get(self) -> Any:
        return self.inbox.get()

    def empty(self) -> bool:
        return bool(self.inbox.empty())


def test_a_warm_lease_never_asks_the_supervisor_and_its_release_is_one_message() -> None:
    with ConversationService(cleanup_interval_s=0) as service:
        thinker = BasicThinker("alice", retain_duration=dt.timedelta(minutes=5))
        thinker.mint_conversation_id()
        service.obtain_conversation(None, thinker).get(timeout=5)
        service.release(thinker)
        counting = _CountingRef(service._registry.supervisor)
        service._registry.supervisor = counting  # type: ignore[assignment]
        (ref,) = service._live.values()
        recording = _RecordingInbox(ref.actor_inbox)
        ref.actor_inbox = recording  # what the service sends; the actor reads the real one
        for _ in range(50):
            context = service.obtain_conversation(None, thinker).get(timeout=5)
            assert context.conversation_id == thinker.conversation_id
            service.release(thinker)
        assert counting.sent == []
        assert recording.kinds == ["Acquire", "Release"] * 50  # one ask, one tell per lease
        assert service.get_stats().owned == 0


def test_a_forked_child_starts_actors_on_threads_of_its_own() -> None:
    warm = ConversationActor.start(ConversationContext("parent"), FakeClock())
    warm.stop(block=True)  # the parent now has a pooled thread waiting
    pid = os.fork()
    if pid == 0:  # the child: no thread of the parent's pool exists here
        code = 1
        try:
            ref = ConversationActor.start(ConversationContext("child"), FakeClock())
            code = 0 if ref.ask(QueryOwner(), block=True, timeout=5) is None else 1
            ref.stop(block=True, timeout=5)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_ownership_stress_parking_two_at_once_never_sees_two_owners_or_loses_a_turn(
    tmp_path: Path,
) -> None:
    report = run_stress(
        tmp_path / "db", threads=48, conversations=48, turns_per_thread=8, max_active=32
    )
    assert report.violations == []
    assert report.turns == report.acknowledged == 48 * 8


def test_an_evicted_conversation_is_freed_by_reference_counting_without_the_collector(
    tmp_path: Path,
) -> None:
    """No restored conversation is left in a reference cycle: once evicted, its actor, its
    context and its messages go as soon as nothing holds them, the cycle collector off."""
    with (
        LmdbStore(tmp_path / "db") as store,
        ConversationService(store, cleanup_interval_s=0) as service,
    ):
        writer = BasicThinker("alice")
        cid = writer.mint_conversation_id()
        context = service.obtain_conversation(None, writer).get(timeout=5)
        context.add_user_message("Remember the blue door.")
        service.save_conversation(context, writer)
        service.release(writer, retain=0)  # zero retention: evicted at once
        del context
        gc.disable()
        try:
            reader = BasicThinker("alice")
            reader.set_conversation_id(cid)
            restored = service.obtain_conversation(None, reader).get(timeout=5)
            ref = service._live[cid]
            gone: list[Callable[[], object | None]] = [
                weakref.ref(restored),
                weakref.ref(restored.messages[0]),
                ref._actor_weakref,  # pykka's own weak reference to the actor
            ]
            service.release(reader, retain=0)
            del restored
            assert [alive() for alive in gone] == [None, None, None]
            with pytest.raises(pykka.ActorDeadError):  # its mailbox still answers
                ref.ask(QueryOwner(), block=True, timeout=5)
        finally:
            gc.enable()


def test_a_conversation_that_took_model_turns_is_freed_by_reference_counting_when_evicted(
    tmp_path: Path,
) -> None:
    """A turn leaves no reference cycle behind either (its model binding, its render memos,
    its saved snapshots): a conversation evicted after model turns, on the service path and
    through an agent's chat, goes as soon as nothing holds it, the cycle collector off."""
    with (
        LmdbStore(tmp_path / "db") as store,
        ConversationService(store, cleanup_interval_s=0) as service,
    ):
        client = ScriptedClient()
        agent = Agent(client, output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
        gc.collect()
        gc.disable()
        try:
            thinker = BasicThinker("alice", output_declaration=OutputSize.STANDARD)
            cid = thinker.mint_conversation_id()
            context = service.obtain_conversation(None, thinker).get(timeout=5)
            for turn in range(2):
                context.add_user_message(f"Question {turn}: where is the blue door?")
                context.add_message(IncomingMessage(blocks=client.respond(context).blocks))
                service.save_conversation(context, thinker)
            assert context.model_binding is not None  # the call attached one
            assert context.model_binding.conversation is context
            gone: list[weakref.ref[Any]] = [weakref.ref(context)]
            gone += [weakref.ref(context.model_binding)]
            gone += [weakref.ref(m) for m in context.messages]
            service.release(thinker, retain=0)  # zero retention: evicted at once
            del context
            assert cid not in service._live
            assert [alive() for alive in gone] == [None] * len(gone)

            chat = agent.chat(service, user_id="bob")
            chat.send("Where is the blue door?")
            chat.send("And the red one?")
            chatted = chat.conversation_id
            assert chatted is not None
            actor = service._live[chatted]._actor_weakref()
            assert isinstance(actor, ConversationActor)
            held: list[weakref.ref[Any]] = [weakref.ref(actor), weakref.ref(actor.context)]
            held += [weakref.ref(m) for m in actor.context.messages]
            del actor
            assert service.evict_conversation(chatted)
            assert [alive() for alive in held] == [None] * len(held)
        finally:
            gc.enable()
