"""The turn gate: a gated turn's own work never runs beside another's, and a gated turn
lets the gate go at every wait (its commit, another owner's lease, tools, a model worker,
a retry's pause, the application's hook), so gated turns that wait on one another always
finish."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import parlour.actors._gate as gate_module
from parlour.actors import (
    Agent,
    BasicThinker,
    ConversationService,
    TurnCancelledError,
)
from parlour.actors._gate import gating
from parlour.actors.tuning import TurnGate, turn_gate
from parlour.runtime import Depth, IncomingMessage, LLMResponse, OutputSize, ScriptedClient
from parlour.runtime.blocks import TextBlock
from parlour.runtime.errors import IllegalStateError, RetryableLLMError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores import LmdbStore, MemorySessionCache, MemoryStore
from parlour.stores._waiting import held_gate, waiting

from .agent_helpers import calls, stored

JOIN_S = 6  # how long a test waits for one awaited event
STALL_S = 20  # a deadlock shows as no progress for this long (a busy machine only slows it)


def _join_all(threads: list[threading.Thread], progress: Callable[[], int] | None) -> None:
    """Start ``threads`` and wait for all of them, failing once nothing has progressed for
    ``STALL_S``: ``progress`` counts what is done so far (by default, the threads that have
    finished). A deadlock stops every thread; a busy machine, or a thread off the gate that
    keeps taking the interpreter lock back, only slows them."""
    for thread in threads:
        thread.start()
    done = progress or (lambda: sum(not t.is_alive() for t in threads))
    last, since = done(), time.monotonic()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.1)
            if (now := done()) != last:
                last, since = now, time.monotonic()
            assert time.monotonic() - since < STALL_S, "gated turns waited on one another"


def _in_threads(
    *runs: Callable[[], None], progress: Callable[[], int] | None = None
) -> list[BaseException]:
    errors: list[BaseException] = []

    def guarded(run: Callable[[], None]) -> Callable[[], None]:
        def body() -> None:
            try:
                run()
            except BaseException as exc:
                errors.append(exc)

        return body

    _join_all([threading.Thread(target=guarded(run), daemon=True) for run in runs], progress)
    return errors


def _agent(client: ScriptedClient, **kwargs: Any) -> Agent:
    return Agent(client, output=OutputSize.STANDARD, depth=Depth.IMMEDIATE, **kwargs)


@pytest.fixture
def gated_service(tmp_path: Path) -> Any:
    store = LmdbStore(tmp_path / "store")
    service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
    yield service
    service.stop()
    store.close()


# -- the gate itself ----------------------------------------------------------------------------


def test_held_takes_the_gate_and_a_nested_hold_on_the_same_thread_does_not_wait() -> None:
    gate = TurnGate()
    with gate.held():
        assert gate.is_held() and held_gate() is gate
        with gate.held():  # a turn run from a turn's own thread
            assert held_gate() is gate
        assert gate.is_held()
    assert not gate.is_held() and held_gate() is None


def test_waiting_lets_the_gate_go_for_the_wait_and_takes_it_back() -> None:
    gate, inside = TurnGate(), threading.Event()
    took: list[bool] = []

    def other() -> None:
        with gate.held():
            took.append(True)
            inside.set()

    with gate.held():
        thread = threading.Thread(target=other, daemon=True)
        thread.start()
        with waiting():
            assert held_gate() is None
            assert inside.wait(JOIN_S)  # the other thread got the gate meanwhile
            thread.join(JOIN_S)
        assert held_gate() is gate and gate.is_held()
    assert took == [True]


def test_waiting_without_a_gate_does_nothing_and_an_error_gives_the_gate_back() -> None:
    with waiting():
        assert held_gate() is None
    gate = TurnGate()
    with pytest.raises(RuntimeError, match="boom"), gate.held():
        raise RuntimeError("boom")
    assert not gate.is_held() and held_gate() is None


def test_the_gate_is_used_only_where_every_wait_lets_it_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gate_module, "_cpus", lambda: 2)
    assert gating(MemoryStore(), MemorySessionCache())
    assert gating(None, None)

    class Waits(MemoryStore):  # a store whose waits keep the gate (PostgreSQL's)
        lets_go_while_waiting = False

    class WaitingCache(MemorySessionCache):
        lets_go_while_waiting = False

    assert not gating(Waits(), None)
    assert not gating(MemoryStore(), WaitingCache())
    monkeypatch.setattr(gate_module, "_cpus", lambda: 1)
    assert not gating(MemoryStore(), None)  # one CPU: the gate costs more than it saves
    monkeypatch.setattr(gate_module, "_cpus", lambda: 2)
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    assert not gating(MemoryStore(), None)  # free-threaded: turns run in parallel


# -- gated agent turns that wait on one another -------------------------------------------------


def test_two_chats_on_one_conversation_take_turns_through_the_lease(
    gated_service: ConversationService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chat's obtain waits for the other's lease: the waiting turn lets the gate go,
    so the lease holder finishes its turn."""
    monkeypatch.setattr(gate_module, "_cpus", lambda: 2)
    agent = _agent(ScriptedClient())
    first = agent.chat(gated_service, user_id="alice")
    second = agent.chat(gated_service, user_id="alice", conversation_id=first.conversation_id)
    assert first._gate == second._gate == turn_gate.held  # both gated
    first.send("open")  # the record exists before the second chat adopts it
    turns = 15

    def talk(chat: Any, name: str) -> Callable[[], None]:
        def turns_of() -> None:
            for n in range(turns):
                chat.send(f"{name} {n}")

        return turns_of

    assert _in_threads(talk(first, "first"), talk(second, "second")) == []
    snapshot = stored(gated_service, first.conversation_id, "alice")
    assert len(snapshot.messages) == 2 * (1 + 2 * turns)
    assert not turn_gate.is_held()


def test_a_tool_waiting_for_another_chats_turn_lets_the_gate_go(
    gated_service: ConversationService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gate_module, "_cpus", lambda: 2)
    done = threading.Event()
    seen: list[bool] = []

    def wait_for_the_other() -> str:
        """Waits until the other chat has answered."""
        seen.append(done.wait(JOIN_S))
        return "the other chat answered"

    waiting_agent = _agent(
        ScriptedClient([calls(("wait_for_the_other", {})), "Both done."]),
        tools=[wait_for_the_other],
    )
    waiter = waiting_agent.chat(gated_service, user_id="alice")
    other = _agent(ScriptedClient(["Hello."])).chat(gated_service, user_id="bob")
    started = threading.Event()

    def run_waiter() -> None:
        started.set()
        assert waiter.send("wait").text == "Both done."

    def run_other() -> None:
        assert started.wait(JOIN_S)
        assert other.send("hi").text == "Hello."
        done.set()

    assert _in_threads(run_waiter, run_other) == []
    assert seen == [True]  # the other turn ran while the tool waited


def test_a_model_call_on_a_worker_and_the_applications_hook_let_the_gate_go(
    gated_service: ConversationService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that answers on a model worker waits there until another gated turn has
    run; so does a ``before_model_call`` hook. Neither holds the gate meanwhile."""
    monkeypatch.setattr(gate_module, "_cpus", lambda: 2)
    other_ran, hook_released = threading.Event(), threading.Event()

    def slow(prepared: object) -> LLMResponse:  # a function: asked on a model worker
        assert other_ran.wait(JOIN_S)
        return LLMResponse(model_id="scripted", blocks=[TextBlock(text="Late.")])

    def hook(context: object, ledger: object) -> None:
        assert hook_released.wait(JOIN_S)

    slow_chat = _agent(ScriptedClient([slow])).chat(gated_service, user_id="alice")
    hooked = _agent(ScriptedClient(["Hooked."]), before_model_call=hook)
    hooked_chat = hooked.chat(gated_service, user_id="carol")
    quick = _agent(ScriptedClient(["Quick.", "Again."])).chat(gated_service, user_id="bob")

    def run_quick() -> None:
        assert quick.send("one").text == "Quick."
        other_ran.set()
        assert quick.send("two").text == "Again."
        hook_released.set()

    errors = _in_threads(
        lambda: assert_text(slow_chat.send("slow"), "Late."),
        lambda: assert_text(hooked_chat.send("hook"), "Hooked."),
        run_quick,
    )
    assert errors == []


def assert_text(reply: Any, text: str) -> None:
    assert reply.text == text


def test_a_retry_pause_lets_the_gate_go(
    gated_service: ConversationService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gate_module, "_cpus", lambda: 2)
    other_ran = threading.Event()
    failures = iter([True])

    def flaky(prepared: object) -> LLMResponse:
        if next(failures, False):
            raise RetryableLLMError("overloaded")
        return LLMResponse(model_id="scripted", blocks=[TextBlock(text="Retried.")])

    def pause(seconds: float) -> None:  # the backoff: waits until another turn has run
        assert other_ran.wait(JOIN_S)

    retrying = _agent(ScriptedClient([flaky, flaky]), sleep=pause)
    retry_chat = retrying.chat(gated_service, user_id="alice")
    other = _agent(ScriptedClient(["Hello."])).chat(gated_service, user_id="bob")

    def run_other() -> None:
        assert other.send("hi").text == "Hello."
        other_ran.set()

    errors = _in_threads(lambda: assert_text(retry_chat.send("retry"), "Retried."), run_other)
    assert errors == []


# -- the property: gated turns' own work never overlaps ------------------------------------------


class _Watching(MemorySessionCache):
    """A session cache whose ``put`` (inside a save, in the turn's own work) does some work
    and records how many threads were inside it at once."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = 0
        self.most = 0
        self.gated = True
        self._count = threading.Lock()

    def put(self, snapshot: ConversationPersistenceSnapshot) -> None:
        with self._count:
            self.inside += 1
            self.most = max(self.most, self.inside)
        self.gated = self.gated and held_gate() is turn_gate
        sum(i * i for i in range(2_000))  # long enough for the interpreter to switch threads
        with self._count:
            self.inside -= 1
        super().put(snapshot)


@pytest.mark.parametrize("gated", [True, False])
def test_gated_turns_never_run_their_own_work_side_by_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gated: bool
) -> None:
    """With the gate, at most one turn is ever inside its own work; without it (the check
    can fail), the interpreter interleaves them."""
    monkeypatch.setattr(gate_module, "_cpus", lambda: 2 if gated else 1)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads as often as the interpreter can
    watching = _Watching()
    store = LmdbStore(tmp_path / "store")
    service = ConversationService(store, watching, cleanup_interval_s=0)
    try:
        agent = _agent(ScriptedClient())
        chats = [agent.chat(service, user_id=f"user-{i}") for i in range(6)]

        def talk(chat: Any) -> Callable[[], None]:
            def turns_of() -> None:
                for n in range(8):
                    chat.send(f"turn {n}")

            return turns_of

        assert _in_threads(*(talk(chat) for chat in chats)) == []
    finally:
        sys.setswitchinterval(switch)
        service.stop()
        store.close()
    if gated:
        assert watching.most == 1 and watching.gated
    else:
        assert watching.most > 1 and not watching.gated


def test_gated_turns_under_contention_evictions_and_force_releases_all_end_and_keep_every_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three conversations, two chats on each in their own threads (their obtains queue
    behind each other's leases), zero-retention agents evicting after every turn, and a
    meddler force-releasing, evicting and sweeping throughout: every thread ends, and every
    turn that answered is stored exactly once."""
    monkeypatch.setattr(gate_module, "_cpus", lambda: 2)
    store = LmdbStore(tmp_path / "store")
    service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
    try:
        keeping = _agent(ScriptedClient())
        evicting = Agent(
            ScriptedClient(),
            output=OutputSize.STANDARD,
            depth=Depth.IMMEDIATE,
            retain=dt.timedelta(0),
        )
        owners = [keeping.chat(service, user_id="alice") for _ in range(3)]
        for chat in owners:
            chat.send("open")
        chats = [
            agent.chat(service, user_id="alice", conversation_id=owner.conversation_id)
            for owner in owners
            for agent in (keeping, evicting)
        ]
        answered: list[str] = []
        attempts: list[int] = []  # every turn that ended, answered or cancelled
        ended = threading.Condition()  # notified as each turn ends
        stop = threading.Event()

        def talk(index: int, chat: Any) -> Callable[[], None]:
            def turns_of() -> None:
                for n in range(12):
                    text = f"chat {index} turn {n}"
                    try:
                        chat.send(text)
                    except TurnCancelledError:
                        continue
                    finally:
                        with ended:
                            attempts.append(n)
                            ended.notify_all()
                    answered.append(text)

            return turns_of

        def _more_than(seen: int) -> Callable[[], bool]:
            return lambda: len(attempts) > seen or stop.is_set()

        def meddle() -> None:
            # A round on each conversation in turn, then a wait for some turn to end: a
            # meddler that never pauses cancels every turn (each waits for its commits, and a
            # force release takes effect at the next boundary), and nothing is left to check.
            n = 0
            try:
                while not stop.is_set():
                    cid = owners[n % 3].conversation_id
                    with contextlib.suppress(ValueError):  # not live just now
                        service.force_release(cid, "alice")
                    service.evict_conversation(cid)
                    service.sweep_expired()
                    n += 1
                    with ended:
                        ended.wait_for(_more_than(len(attempts)), STALL_S)
            except BaseException as exc:
                meddling.append(exc)

        meddling: list[BaseException] = []
        meddler = threading.Thread(target=meddle, daemon=True)
        meddler.start()
        errors = _in_threads(
            *(talk(i, c) for i, c in enumerate(chats)), progress=lambda: len(attempts)
        )
        stop.set()
        with ended:
            ended.notify_all()
        meddler.join(STALL_S)
        assert not meddler.is_alive()
        assert errors == [] and meddling == []  # every turn answered or was cancelled
        assert not turn_gate.is_held()
        texts = [
            b.text
            for owner in owners
            for m in stored(service, owner.conversation_id, "alice").messages
            if m.role == "user"
            for b in m.blocks
            if isinstance(b, TextBlock)
        ]
        assert all(texts.count(text) == 1 for text in answered)
        assert answered  # some turns got through the meddling
    finally:
        service.stop()
        store.close()


def test_stop_and_close_from_a_thread_holding_the_gate_let_it_go_while_they_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn is mid-way (its tool waits until stop has begun); the thread that stops the
    service and closes the store holds the gate: stop waits for that turn, which needs the
    gate to finish, so stop must let it go."""
    monkeypatch.setattr(gate_module, "_cpus", lambda: 2)
    store = LmdbStore(tmp_path / "store")
    service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
    in_tool, stopping = threading.Event(), threading.Event()

    def until_stopping() -> str:
        """Waits until the service is stopping."""
        in_tool.set()
        assert stopping.wait(JOIN_S)
        return "stopping"

    agent = _agent(ScriptedClient([calls(("until_stopping", {})), "Done."]), tools=[until_stopping])
    chat = agent.chat(service, user_id="alice")
    replies: list[str] = []

    def turn() -> None:
        replies.append(chat.send("go").text)

    def stopper() -> None:
        assert in_tool.wait(JOIN_S)
        with turn_gate.held():
            stopping.set()
            service.stop()
            store.close()
            assert held_gate() is turn_gate

    assert _in_threads(turn, stopper) == []
    assert replies == ["Done."]
    assert not turn_gate.is_held()


def test_a_raising_hook_and_a_send_after_stop_leave_the_gate_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gate_module, "_cpus", lambda: 2)
    store = LmdbStore(tmp_path / "store")
    service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)

    def hook(context: object, ledger: object) -> None:
        assert held_gate() is None  # let go around the application's hook
        raise RuntimeError("the budget check is down")

    try:
        failing = _agent(ScriptedClient(["never"]), before_model_call=hook)
        chat = failing.chat(service, user_id="alice")
        with pytest.raises(RuntimeError, match="the budget check is down"):
            chat.send("hi")
        assert not turn_gate.is_held() and held_gate() is None
        other = _agent(ScriptedClient(["Fine."])).chat(service, user_id="bob")
        assert other.send("hi").text == "Fine."
        service.stop()
        with pytest.raises(IllegalStateError, match="shutting down"):
            other.send("after stop")
        assert not turn_gate.is_held() and held_gate() is None
    finally:
        service.stop()
        store.close()


def test_service_path_turns_held_in_the_gate_share_a_conversation_through_its_lease(
    gated_service: ConversationService,
) -> None:
    """Request threads drive the service themselves, each turn in ``turn_gate.held()``, on
    one conversation: a turn whose obtain queues behind another's lease lets the gate go
    (``Obtaining.get``), so the lease holder, waiting to take the gate back after its
    commit, finishes."""
    owner = BasicThinker("alice")
    cid = owner.mint_conversation_id()
    context = gated_service.obtain_conversation(None, owner).get()
    context.add_user_message("open")
    gated_service.save_conversation(context, owner)
    gated_service.release(owner)
    client = ScriptedClient()
    turns = 15

    def requests(name: str) -> Callable[[], None]:
        def turns_of() -> None:
            thinker = BasicThinker("alice")
            thinker.set_conversation_id(cid)
            for n in range(turns):
                with turn_gate.held():
                    context = gated_service.obtain_conversation(None, thinker).get()
                    try:
                        context.add_user_message(f"{name} {n}")
                        gated_service.save_conversation(context, thinker, wait=False)
                        response = client.respond(context)
                        context.add_message(IncomingMessage(blocks=response.blocks))
                        gated_service.save_conversation(context, thinker)
                    finally:
                        gated_service.release(thinker)

        return turns_of

    assert _in_threads(requests("first"), requests("second"), requests("third")) == []
    snapshot = stored(gated_service, cid, "alice")
    assert len(snapshot.messages) == 1 + 3 * 2 * turns
    assert not turn_gate.is_held()


# -- admission control inside the service ------------------------------------------------------


def _one_turn(service: ConversationService, user: str) -> None:
    thinker = BasicThinker(user)
    thinker.mint_conversation_id()
    context = service.obtain_conversation(None, thinker).get()
    try:
        context.add_user_message("hello")
        service.save_conversation(context, thinker)
    finally:
        service.release(thinker)


@pytest.mark.parametrize("cpus", [2, 1])
def test_service_calls_from_threads_hold_the_gate_for_their_own_work_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpus: int
) -> None:
    """Threads driving the service with no gate of their own: on two CPUs every save runs
    in the gate, one at a time; on one (where the gate costs more than it saves) none does."""
    monkeypatch.setattr(gate_module, "_cpus", lambda: cpus)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads as often as the interpreter can
    watching = _Watching()
    store = LmdbStore(tmp_path / "store")
    service = ConversationService(store, watching, cleanup_interval_s=0)
    try:
        turns = [lambda i=i: _one_turn(service, f"user-{i}") for i in range(8)]
        assert _in_threads(*turns) == []
    finally:
        sys.setswitchinterval(switch)
        service.stop()
        store.close()
    assert watching.gated is (cpus == 2)
    if cpus == 2:
        assert watching.most == 1
    assert not turn_gate.is_held()


def test_service_calls_on_an_event_loop_never_wait_for_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another thread holds the gate, a loop's obtain, save and release finish: the
    loop never waits for it."""
    monkeypatch.setattr(gate_module, "_cpus", lambda: 2)
    watching = _Watching()
    store = LmdbStore(tmp_path / "store")
    service = ConversationService(store, watching, cleanup_interval_s=0)
    held, done = threading.Event(), threading.Event()

    def holder() -> None:
        with turn_gate.held():
            held.set()
            assert done.wait(STALL_S)

    async def on_the_loop() -> None:
        thinker = BasicThinker("alice")
        thinker.mint_conversation_id()
        context = await service.obtain_async(None, thinker)
        context.add_user_message("hello")
        service.save_conversation(context, thinker)
        service.release(thinker)

    holding = threading.Thread(target=holder)
    holding.start()
    try:
        assert held.wait(JOIN_S)
        loop = threading.Thread(target=lambda: asyncio.run(on_the_loop()))
        loop.start()
        loop.join(STALL_S)
        assert not loop.is_alive(), "the loop waited for the gate"
    finally:
        done.set()
        holding.join(JOIN_S)
        service.stop()
        store.close()
    assert not watching.gated  # the save ran outside the gate
    assert not turn_gate.is_held()
