"""A chat's history: the conversation's messages as its user sees them, for an application
that shows a resumed conversation (``Chat.history``, ``Chat.ahistory``).

A durable chat reads the stored record through the service's store with the chat's user id
(``PersistentStore.load``): no lease is taken, so a turn running meanwhile, here or in
another process, goes on, and the history is the conversation as of its last saved
boundary, whoever wrote it. A chat that is not durable (temporary, or a service without a
store) has nothing stored: its live conversation is obtained and released again, between
turns only.

Each message becomes a ``HistoryMessage``: its role (``user``, ``assistant``, or ``tool``
for the message carrying tool results), its text (the text blocks; images, files and
thinking are left out), its tool calls and its tool results. Messages the application
wrote rather than the user (a compaction's summary, the re-ask of a typed answer that did
not parse) say so in ``app_authored``. Messages carry no time of their own; the
conversation's creation time is the record's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Sequence

import msgspec

from parlour.runtime import ConversationContext, OpenTurn, TurnStep
from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.errors import IllegalStateError
from parlour.runtime.snapshots import MessageSnapshot

from .._service import ConversationService
from .._thinker import Thinker

__all__ = [
    "HistoryMessage",
    "HistoryToolCall",
    "HistoryToolResult",
    "ahistory",
    "history",
]


class HistoryToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call the model made: its id, the tool's name, the arguments as JSON text."""

    id: str
    name: str
    arguments: str


class HistoryToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool call returned: the call's id, the result's text, whether it failed."""

    call_id: str
    text: str
    is_error: bool = False


class HistoryMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a chat's history.

    Attributes:
        role: ``user``, ``assistant``, or ``tool`` (a message of tool results only).
        text: the message's text ("" for a message of tool calls or results only).
        tool_calls: the calls an assistant message makes, in order.
        tool_results: the results a ``tool`` message carries, in order.
        app_authored: the application wrote it, not the user (a compaction's summary, a
            re-ask); a view of the conversation usually leaves these out.
    """

    role: str
    text: str
    tool_calls: tuple[HistoryToolCall, ...] = ()
    tool_results: tuple[HistoryToolResult, ...] = ()
    app_authored: bool = False


def entry(message: MessageSnapshot) -> HistoryMessage:
    """The history entry of one stored message."""
    blocks = message.blocks
    calls = tuple(
        HistoryToolCall(id=b.id, name=b.name, arguments=b.input_json)
        for b in blocks
        if isinstance(b, ToolUseBlock)
    )
    results = tuple(
        HistoryToolResult(call_id=b.tool_use_id, text=b.content, is_error=b.is_error)
        for b in blocks
        if isinstance(b, ToolResultBlock)
    )
    text = message.raw_content
    if text is None:
        text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
    role = "tool" if results and not text else message.role
    return HistoryMessage(
        role=role,
        text=text,
        tool_calls=calls,
        tool_results=results,
        app_authored=message.app_authored,
    )


def entries(messages: Iterable[MessageSnapshot]) -> list[HistoryMessage]:
    return [entry(m) for m in messages]


Stored = tuple[list[HistoryMessage], OpenTurn | None]


def _stored(service: ConversationService, thinker: Thinker) -> Stored:
    assert service.store is not None
    snapshot = service.store.load(thinker.conversation_id, thinker.user_id)
    if snapshot is None:  # another user's live, unsaved conversation is refused as a stored one
        service.turn_running(thinker.conversation_id, thinker.user_id)
        return [], None
    return entries(snapshot.messages), snapshot.turn


def _live(context: ConversationContext) -> Stored:
    return entries(map(MessageSnapshot.of, context.messages)), context.open_turn


def _between_turns(busy: threading.Lock, conversation_id: str) -> None:
    if not busy.acquire(blocking=False):
        raise IllegalStateError(
            f"Conversation {conversation_id} is not stored and a turn is running on it; "
            "read its history between turns."
        )


def history(
    service: ConversationService, thinker: Thinker, durable: bool, busy: threading.Lock
) -> Stored:
    """The chat's history (see the module docstring) and its open-turn record; ``busy`` is
    the chat's turn lock.

    Raises:
        PermissionError: the conversation belongs to another user.
        IllegalStateError: a chat that is not durable runs a turn.
    """
    if durable:
        return _stored(service, thinker)
    _between_turns(busy, thinker.conversation_id)
    try:
        context = service.obtain_conversation(None, thinker).get()
        try:
            return _live(context)
        finally:
            service.release(thinker)
    finally:
        busy.release()


async def ahistory(
    service: ConversationService, thinker: Thinker, durable: bool, busy: threading.Lock
) -> Stored:
    """``history`` without blocking the running loop (the store read in a worker thread)."""
    if durable:
        return await asyncio.to_thread(_stored, service, thinker)
    _between_turns(busy, thinker.conversation_id)
    try:
        context = await service.obtain_async(None, thinker)
        try:
            return _live(context)
        finally:
            service.release(thinker)
    finally:
        busy.release()


def stopped_early(messages: Sequence[HistoryMessage], record: OpenTurn | None) -> bool:
    """Whether a turn on these messages stopped before the model's last word: its open-turn
    record says it is open (and not waiting for approvals); with no record (one saved
    before records), the last message is the user's, a round of tool results the model
    has not read, or an answer whose tool calls have no results."""
    if record is not None:
        return record.open and record.step != TurnStep.APPROVAL
    if not messages:
        return False
    last = messages[-1]
    return last.role != "assistant" or bool(last.tool_calls)
