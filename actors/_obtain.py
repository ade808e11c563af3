"""The waiting side of an obtain: the future ``obtain_conversation`` returns, and the
asyncio wait of ``obtain_async``. Both give up through the one ``GiveUp`` path, so a waiter
that gave up is never granted, and a grant that raced the give-up is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pykka

from parlour.runtime import Clock, ConversationContext
from parlour.runtime.errors import ConversationUnavailableError

from ._conversation import ConversationActor
from ._gate import waiting
from ._messages import (
    FutureDelivery,
    GaveUp,
    GiveUp,
    Granted,
    LoopDelivery,
    Owner,
    Reobtain,
    timeout_error,
)
from ._reply import Reply

ActorRef = pykka.ActorRef[ConversationActor]


def cancelled_error(conversation_id: str) -> ConversationUnavailableError:
    return ConversationUnavailableError(
        f"The obtain of conversation {conversation_id} was cancelled."
    )


class Waiting:
    """A queued acquire: the actor, the request's identity and deadline, its delivery;
    ``again`` makes the same obtain anew (when the activation was dropped as a stale copy:
    ``Reobtain``)."""

    __slots__ = (
        "again",
        "clock",
        "conversation_id",
        "deadline",
        "on_grant",
        "owner",
        "ref",
        "timeout_s",
    )

    def __init__(
        self,
        ref: ActorRef,
        conversation_id: str,
        owner: Owner,
        deadline: float,
        timeout_s: float,
        clock: Clock,
        on_grant: Callable[[ConversationContext], None],
        again: Callable[[], Obtaining] | None = None,
    ) -> None:
        self.again = again
        self.ref = ref
        self.conversation_id = conversation_id
        self.owner = owner
        self.deadline = deadline
        self.timeout_s = timeout_s
        self.clock = clock
        self.on_grant = on_grant

    def left(self) -> float:
        return max(self.deadline - self.clock.now(), 0.0)

    def give_up(self, release_if_granted: bool) -> Granted | GaveUp:
        """Tell the actor this waiter gives up; its answer says whether it was granted."""
        try:
            answer: Granted | GaveUp = self.ref.ask(
                GiveUp(self.owner.token, release_if_granted), block=True
            )
        except pykka.ActorDeadError as exc:
            raise ConversationUnavailableError(
                f"Conversation {self.conversation_id} was stopped while waited for."
            ) from exc
        return answer

    def timed_out(self) -> ConversationContext:
        """The service's deadline passed: a grant that beat the give-up still counts."""
        answer = self.give_up(release_if_granted=False)
        if isinstance(answer, Granted):
            return answer.context
        raise timeout_error(self.conversation_id, self.timeout_s, answer.owner_job)


class Obtaining(Reply):
    """The future ``obtain_conversation`` returns.

    ``get(timeout)`` waits for the grant; a ``timeout`` shorter than the service's gives the
    obtain up (``pykka.Timeout``), exactly like ``cancel()``: the waiter leaves the queue and
    is never granted, and a grant that raced it is released. After that, ``get`` raises
    ``ConversationUnavailableError``. Thread-safety: ``get`` and ``cancel`` from any thread.
    """

    _waiting: Waiting | None = None  # None: completed at once (``ready``, ``refused``)
    _delivery: FutureDelivery | None = None

    def __init__(self, waiting: Waiting | None = None, delivery: FutureDelivery | None = None):
        super().__init__()
        self._waiting = waiting
        self._delivery = delivery
        self._lock = threading.Lock()  # one get at a time
        self._decide = threading.Lock()  # cancel and a completing get: one outcome wins
        self._cancelled = False
        self._outcome: Any = None

    @classmethod
    def ready(cls, context: ConversationContext) -> Obtaining:
        """Granted at once (the warm path): no lock is made or taken."""
        return cls.settled(context)

    @classmethod
    def refused(cls, exc: BaseException) -> Obtaining:
        return cls.settled(None, (type(exc), exc, None))

    def get(self, *, timeout: float | None = None) -> ConversationContext:
        if self._waiting is None:
            return cast(ConversationContext, super().get(timeout=timeout))
        with waiting(), self._lock:  # another owner's lease: a held turn gate goes meanwhile
            return self._wait(self._waiting, timeout)

    def _wait(self, waiting: Waiting, timeout: float | None) -> ConversationContext:
        if self._cancelled:
            raise cancelled_error(waiting.conversation_id)
        if self._outcome is not None:
            return self._outcome  # type: ignore[no-any-return]
        left = waiting.left()
        own = timeout is not None and timeout < left
        assert self._delivery is not None
        try:
            context: ConversationContext = self._delivery.future.get(
                timeout=timeout if own else left
            )
        except pykka.Timeout:
            if own:
                self.cancel()
                raise
            context = waiting.timed_out()
        except Reobtain:  # the activation was a stale copy: obtain again, from a fresh load
            if waiting.again is None or self._cancelled:
                raise
            return self._again(waiting.again(), timeout)
        with self._decide:
            if self._cancelled:  # cancel won: its GiveUp releases the grant
                raise cancelled_error(waiting.conversation_id)
            self._outcome = context
        waiting.on_grant(context)
        return context

    def _again(self, again: Obtaining, timeout: float | None) -> ConversationContext:
        """Wait for ``again``, the same obtain made anew, in this one's place."""
        if again._waiting is None:  # granted or refused at once (its grant is recorded)
            context = again.get()
            with self._decide:
                self._outcome = context
            return context
        self._waiting, self._delivery = again._waiting, again._delivery
        return self._wait(again._waiting, timeout)

    def cancel(self) -> bool:
        """Give the obtain up; True unless it had already completed for the caller."""
        waiting = self._waiting
        if waiting is None:
            return False
        with self._decide:
            if self._outcome is not None or self._cancelled:
                return False
            self._cancelled = True
        assert self._delivery is not None
        self._delivery.fail(cancelled_error(waiting.conversation_id))
        with contextlib.suppress(pykka.ActorDeadError):
            waiting.ref.tell(GiveUp(waiting.owner.token, release_if_granted=True))
        return True


async def wait_async(
    waiting: Waiting,
    delivery: LoopDelivery,
    again: Callable[[], Awaitable[ConversationContext]] | None = None,
) -> ConversationContext:
    """Await a queued grant on the event loop; cancellation gives up through ``GiveUp``.
    A stale activation's ``Reobtain`` awaits ``again`` (the same obtain, made anew)."""
    try:
        done, _ = await asyncio.wait({delivery.future}, timeout=waiting.left())
    except asyncio.CancelledError:
        delivery.future.cancel()
        _tell_give_up(waiting)
        raise
    if done:
        try:
            context = delivery.future.result()
        except Reobtain:
            if again is None:
                raise
            return await again()
        waiting.on_grant(context)
        return context
    try:
        context = await asyncio.to_thread(waiting.timed_out)
    except asyncio.CancelledError:
        _tell_give_up(waiting)  # a grant that beat the give-up is released
        raise
    waiting.on_grant(context)
    return context


def _tell_give_up(waiting: Waiting) -> None:
    with contextlib.suppress(pykka.ActorDeadError):
        waiting.ref.tell(GiveUp(waiting.owner.token, release_if_granted=True))
