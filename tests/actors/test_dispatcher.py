"""The mailbox drained by its senders: exactly one thread handles an actor's messages at a
time, in the order they were sent, every ask is answered (none stranded, also across a
stop), re-entrant and nested sends neither deadlock nor reorder, and pykka's hooks keep
their meaning."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pykka
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.actors._reply import LightActor, Mailbox, Reply, _Envelope

_SENDERS = 8
_PER_SENDER = 400


class Recorder(LightActor):
    """Records what it handles; ``check`` flags two handlers running at once."""

    registered = False

    def __init__(self, on_message: Callable[[Any], Any] | None = None) -> None:
        super().__init__()
        self.seen: list[Any] = []
        self.threads: list[threading.Thread] = []
        self.inside = 0
        self.overlaps = 0
        self.stops = 0
        self.on_message = on_message

    def on_receive(self, message: Any) -> Any:
        self.inside += 1
        if self.inside > 1:
            self.overlaps += 1
        try:
            self.seen.append(message)
            self.threads.append(threading.current_thread())
            return message if self.on_message is None else self.on_message(message)
        finally:
            self.inside -= 1

    def on_stop(self) -> None:
        self.stops += 1


def _actor(ref: pykka.ActorRef[Any]) -> Any:
    actor = ref._actor_weakref()
    assert actor is not None
    return actor


def _in_thread(fn: Callable[[], object]) -> None:
    """Run ``fn`` on a thread of its own and wait for it (its put returns at once when
    another thread holds the claim)."""
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_many_senders_never_run_two_handlers_at_once_and_each_senders_order_is_kept() -> None:
    ref = Recorder.start()
    start = threading.Barrier(_SENDERS)
    answers: dict[int, list[object]] = {n: [] for n in range(_SENDERS)}

    def send(n: int) -> None:
        start.wait(timeout=10)
        for seq in range(_PER_SENDER):
            if seq % 3:
                ref.tell((n, seq))
            else:
                answers[n].append(ref.ask((n, seq), block=False).get(timeout=10))

    threads = [threading.Thread(target=send, args=(n,)) for n in range(_SENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    actor = _actor(ref)
    assert actor.overlaps == 0
    for n in range(_SENDERS):
        assert [seq for who, seq in actor.seen if who == n] == list(range(_PER_SENDER))
        assert answers[n] == [(n, seq) for seq in range(0, _PER_SENDER, 3)]
    assert len({t.ident for t in actor.threads}) > 1  # the senders drained it, no thread of its own
    ref.stop()


class _SeamMailbox(Mailbox):
    """A mailbox with a hook between the drain's last look at the queue and the claim's
    release: the window a sender that finds the claim taken relies on being re-checked."""

    __slots__ = ()
    after_drain: Callable[[], None] | None = None

    def _drain(self) -> None:
        super()._drain()
        hook, _SeamMailbox.after_drain = _SeamMailbox.after_drain, None
        if hook is not None:
            hook()


def test_a_message_sent_while_the_drainer_lets_the_claim_go_is_handled_by_the_drainer() -> None:
    ref = Recorder.start()
    ref.actor_inbox.__class__ = _SeamMailbox
    main = threading.current_thread()
    _SeamMailbox.after_drain = lambda: _in_thread(lambda: ref.tell("late"))
    assert ref.ask("first", block=True) == "first"
    actor = _actor(ref)
    assert actor.seen == ["first", "late"]  # handled before the drainer's own put returned
    assert actor.threads == [main, main]
    ref.stop()


def test_sends_to_itself_and_nested_drains_on_one_thread_neither_deadlock_nor_reorder() -> None:
    log: list[str] = []
    second: pykka.ActorRef[Any]

    def first_handler(message: Any) -> None:
        log.append(f"A {message}")
        if message.startswith("ping"):
            second.tell(f"pong{message[4:]}")  # B is idle: drained here, nested
            first.tell(f"after{message[4:]}")  # A is this thread's: queued behind

    def second_handler(message: Any) -> None:
        log.append(f"B {message}")
        if message.startswith("pong"):
            first.tell(f"echo{message[4:]}")  # A is further up this stack: queued
            second.tell(f"self{message[4:]}")  # itself: queued behind this one

    first = Recorder.start(first_handler)
    second = Recorder.start(second_handler)
    first.tell("ping1")
    first.tell("ping2")
    assert log == [
        "A ping1",
        "B pong1",
        "B self1",
        "A echo1",
        "A after1",
        "A ping2",
        "B pong2",
        "B self2",
        "A echo2",
        "A after2",
    ]
    assert _actor(first).overlaps == _actor(second).overlaps == 0
    first.stop()
    second.stop()


def test_a_stop_racing_many_senders_answers_every_ask_and_strands_none() -> None:
    ref = Recorder.start()
    actor = _actor(ref)  # held here: a stopped actor is freed once nothing holds it
    start = threading.Barrier(_SENDERS + 1)
    outcomes: list[str] = []
    lock = threading.Lock()

    def send() -> None:
        start.wait(timeout=10)
        for seq in range(200):
            try:
                reply = ref.ask(seq, block=False)
            except pykka.ActorDeadError:
                outcome = "dead at once"
            else:
                try:
                    outcome = "answered" if reply.get(timeout=10) == seq else "wrong"
                except pykka.ActorDeadError:
                    outcome = "dead"
            with lock:
                outcomes.append(outcome)

    threads = [threading.Thread(target=send) for _ in range(_SENDERS)]
    for thread in threads:
        thread.start()
    start.wait(timeout=10)
    assert ref.stop(block=True, timeout=10) is True
    for thread in threads:
        thread.join(timeout=30)
    assert len(outcomes) == _SENDERS * 200  # every ask had an outcome: none timed out
    assert "wrong" not in outcomes
    assert actor.stops == 1
    late = Reply()
    # put straight into the mailbox, past the stopped check a ref makes
    ref.actor_inbox.put(_Envelope("after the stop", late))  # type: ignore[arg-type]
    with pytest.raises(pykka.ActorDeadError):
        late.get(timeout=0)
    with pytest.raises(pykka.ActorDeadError):
        ref.tell("told after the stop")


def test_an_asked_handler_that_raises_answers_the_asker_and_the_actor_lives_on() -> None:
    def handler(message: Any) -> Any:
        if message == "bad":
            raise ValueError("bad message")
        return message

    ref = Recorder.start(handler)
    with pytest.raises(ValueError, match="bad message"):
        ref.ask("bad", block=True)
    assert ref.ask("good", block=True) == "good"
    ref.stop()


def test_a_told_handler_that_raises_fails_the_actor_and_answers_the_queued_asks_dead() -> None:
    queued: list[pykka.Future[Any]] = []
    failures: list[type[BaseException] | None] = []

    def handler(message: Any) -> Any:
        if message == "bad":
            _in_thread(lambda: queued.append(ref.ask("queued", block=False)))
            raise ValueError("bad message")
        return message

    ref = Recorder.start(handler)
    actor = _actor(ref)
    actor.on_failure = lambda kind, value, tb: failures.append(kind)
    ref.tell("bad")
    assert failures == [ValueError] and not ref.is_alive()
    with pytest.raises(pykka.ActorDeadError):
        queued[0].get(timeout=0)
    assert actor.stops == 0  # pykka's rule: on_failure instead of on_stop


def test_on_start_runs_before_every_queued_message_and_one_that_raises_stops_the_actor() -> None:
    class Starting(Recorder):
        fail = False

        def on_start(self) -> None:
            self.seen.append("started")
            if self.fail:
                raise RuntimeError("cannot start")

    actor = Starting()
    early = actor.actor_ref.ask("early", block=False)
    assert actor.seen == []  # not launched: it queues
    actor.launch()
    assert early.get(timeout=0) == "early" and actor.seen == ["started", "early"]
    failing = Starting()
    failing.fail = True
    doomed = failing.actor_ref.ask("early", block=False)
    failing.launch()
    assert not failing.actor_ref.is_alive() and failing.seen == ["started"]
    with pytest.raises(pykka.ActorDeadError):
        doomed.get(timeout=0)
    actor.actor_ref.stop()


def test_an_on_stop_that_raises_is_logged_and_the_actor_still_stops() -> None:
    class BadStop(Recorder):
        def on_stop(self) -> None:
            raise RuntimeError("cannot stop cleanly")

    ref = BadStop.start()
    assert ref.stop(block=True, timeout=5) is True
    assert not ref.is_alive()
    with pytest.raises(pykka.ActorDeadError):
        ref.ask("after", block=True)


def test_a_keyboard_interrupt_in_a_handler_stops_only_that_actor_and_reaches_its_thread() -> None:
    queued: list[pykka.Future[Any]] = []

    def handler(message: Any) -> Any:
        if message == "interrupt":
            _in_thread(lambda: queued.append(ref.ask("queued", block=False)))
            raise KeyboardInterrupt
        return message

    ref = Recorder.start(handler)
    actor = _actor(ref)  # held here: a stopped actor is freed once nothing holds it
    bystander = Recorder.start()
    with pytest.raises(KeyboardInterrupt):
        ref.ask("interrupt", block=True)
    assert not ref.is_alive() and actor.stops == 1
    with pytest.raises(pykka.ActorDeadError):
        queued[0].get(timeout=0)  # answered, not stranded
    with pytest.raises(pykka.ActorDeadError):
        ref.ask("later", block=True)
    assert bystander.ask("still here", block=True) == "still here"  # no stop_all
    bystander.stop()


def test_the_proxy_and_a_blocking_stop_work_on_an_actor_with_no_thread() -> None:
    class Counter(LightActor):
        registered = False

        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def add(self, n: int) -> int:
            self.count += n
            return self.count

    ref = Counter.start()
    proxy = ref.proxy()
    assert proxy.add(2).get(timeout=0) == 2  # answered in this thread: no wait
    assert proxy.count.get(timeout=0) == 2
    assert ref.stop(block=True, timeout=0) is True
    assert ref.stop(block=True, timeout=0) is False  # already dead


def test_an_ask_sent_while_the_actor_stops_is_answered_dead_by_the_stopping_thread() -> None:
    sent: list[pykka.Future[Any]] = []

    class Stopping(Recorder):
        def on_stop(self) -> None:  # runs in the stopping thread, its claim held
            super().on_stop()
            _in_thread(self.put_an_ask)

        def put_an_ask(self) -> None:  # straight into the mailbox: the ref already says dead
            reply = Reply()
            self.actor_inbox.put(_Envelope("during the stop", reply))
            sent.append(reply)

    ref = Stopping.start()
    assert ref.stop(block=True, timeout=0) is True
    with pytest.raises(pykka.ActorDeadError):
        sent[0].get(timeout=0)  # answered before the stop returned: nobody else drains


_PROGRAMS = st.recursive(
    st.tuples(st.integers(0, 2), st.just(())),
    lambda inner: st.tuples(st.integers(0, 2), st.lists(inner, max_size=3).map(tuple)),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_PROGRAMS, min_size=1, max_size=4))
def test_any_tree_of_nested_sends_is_handled_once_each_in_send_order_per_actor(
    programs: list[Any],
) -> None:
    """Each message names the actor it goes to and what its handler sends on: whatever
    the nesting, every message is handled exactly once, never two handlers of one actor
    at once, and each actor handles its messages in the order they were sent to it."""
    sent: dict[int, list[int]] = {0: [], 1: [], 2: []}
    ids = iter(range(10_000))

    def send(target: int, children: tuple[Any, ...]) -> None:
        number = next(ids)
        sent[target].append(number)
        refs[target].tell((number, children))

    def handler(message: Any) -> None:
        for target, children in message[1]:
            send(target, children)

    refs = [Recorder.start(handler) for _ in range(3)]
    for target, children in programs:
        send(target, children)
    for n, ref in enumerate(refs):
        actor = _actor(ref)
        assert [number for number, _ in actor.seen] == sent[n]
        assert actor.overlaps == 0
        ref.stop()
