"""What a tool call may learn of the call it serves: ``ToolContext``, and the ``Cancellation``
it can watch.

A function tool asks for it by annotation: a parameter annotated ``ToolContext`` (any name,
``ToolContext[MyDeps]`` too) is left out of the tool's input schema, so the model never sees
it, and the host that runs the call passes one in (``FunctionTool.call(input_json,
context)``). The runtime only defines the type; the agent host (``parlour.actors``) fills it.

    def refund(order_id: str, ctx: ToolContext[Shop]) -> str:
        '''Refund an order.

        Args:
            order_id: The order to refund.
        '''
        ctx.logger.info("refunding {}", order_id)
        return ctx.deps.payments.refund(order_id, idempotency_key=ctx.idempotency_key)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import types
import typing
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

if TYPE_CHECKING:
    from loguru import Logger

__all__ = ["Cancellation", "ToolContext", "is_tool_context"]

DepsT = TypeVar("DepsT")


class Cancellation:
    """A flag a host sets once when the work a tool call serves is given up (its turn
    cancelled, or the call past its timeout), readable from any thread and any loop.

    A sync tool (run in a worker thread) polls ``is_set()`` or blocks in ``wait(timeout)``;
    an async tool awaits ``wait_async()`` (on its own loop, without blocking it), or races
    it against its work. Setting it stops nothing by itself: the tool decides.

    Thread-safety: every method may be called from any thread.
    """

    __slots__ = ("_event", "_lock", "_reason", "_waiters")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def is_set(self) -> bool:
        """True once the work was given up."""
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        """Why it was given up (None while it was not)."""
        return self._reason

    def wait(self, timeout: float | None = None) -> bool:
        """Block this thread until it is set or ``timeout`` seconds pass; True when set.
        For sync tools: never call it on an event loop's thread."""
        return self._event.wait(timeout)

    async def wait_async(self) -> None:
        """Return once it is set, without blocking the running loop."""
        if self._event.is_set():
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._event.is_set():
                return
            self._waiters.append((loop, waiter))
        try:
            await waiter
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._waiters.remove((loop, waiter))

    def set(self, reason: str) -> None:
        """Mark the work given up (the host's call; the first reason is kept). Wakes every
        waiter, each on its own loop."""
        with self._lock:
            if self._event.is_set():
                return
            self._reason = reason
            self._event.set()
            waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits any more
                loop.call_soon_threadsafe(_wake, waiter)

    def __repr__(self) -> str:
        return f"Cancellation(reason={self._reason!r})"


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class ToolContext(msgspec.Struct, Generic[DepsT], frozen=True, kw_only=True):
    """What one tool call may know of the call it serves, passed by the host to the
    parameter annotated ``ToolContext`` (never part of the tool's schema).

    Attributes:
        user_id: the user whose chat made the call.
        conversation_id: the conversation the call belongs to.
        turn_id: the turn's id: the same for every call of one turn, new for every turn.
        call_id: the model's id of this call (the ``tool_use`` id).
        idempotency_key: stable for this call of this conversation, whenever it runs
            again (derived from the conversation id and the call id), distinct for every
            other call: hand it to a payment or booking API so a re-run does not repeat the
            effect.
        deps: the chat's dependencies, as given to ``agent.chat(..., deps=...)`` (None when
            none were given).
        logger: loguru's logger bound with ``conversation_id``, ``turn_id`` and ``call_id``.
        cancelled: set when the turn is cancelled or the call is given up at its timeout.
    """

    user_id: str
    conversation_id: str
    turn_id: str
    call_id: str
    idempotency_key: str
    deps: DepsT
    logger: Logger
    cancelled: Cancellation

    def is_cancelled(self) -> bool:
        """``cancelled.is_set()``: True once the turn was cancelled or the call given up."""
        return self.cancelled.is_set()


def is_tool_context(hint: Any) -> bool:
    """True for ``ToolContext``, ``ToolContext[X]``, either optional (``| None``) or
    ``Annotated``: a parameter the host fills, not the model."""
    if hint is ToolContext:
        return True
    origin = typing.get_origin(hint)
    if origin is ToolContext:
        return True
    if origin is typing.Annotated:
        return is_tool_context(typing.get_args(hint)[0])
    if origin is typing.Union or origin is types.UnionType:
        others = [a for a in typing.get_args(hint) if a is not type(None)]
        return len(others) == 1 and is_tool_context(others[0])
    return False
