"""What an agent's turn reports: its stream events, its reply, and its errors.

Events are frozen, tagged msgspec structs, in the order a turn produces them::

    Recovered? (ToolCallStarted ToolCallFinished)* Compacted? TextDelta*
    (ToolCallStarted ToolCallFinished)* ... Restarted? ... OfferAccepted? ... TurnDone

``Recovered`` opens only a resumed turn (``Chat.resume``) whose last round holds calls a
crash interrupted; the calls it runs again follow it.

A ``Restarted`` event discards the text of the attempt it interrupts: the model call is
being tried again (a truncation escalation, a retryable provider error).

Every event derives from ``Event``, the core's base (``parlour.actors._thinker``, named
here too), so that ``ConversationService.join`` can yield them without knowing the agent;
from it each has ``seq``, its number in the turn, set as the turn publishes it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from parlour.runtime import Usage
from parlour.runtime.errors import ParlourError

from .._thinker import Event

__all__ = [
    "AgentEvent",
    "AlreadyDecidedError",
    "ApprovalDecided",
    "ApprovalError",
    "ApprovalRequested",
    "ApprovalsPendingError",
    "Compacted",
    "Event",
    "NoSuchApprovalError",
    "OfferAccepted",
    "PendingApproval",
    "Recovered",
    "Reply",
    "Restarted",
    "TextDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnCancelledError",
    "TurnDone",
    "TurnError",
    "add_usage",
]


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one turn.

    Attributes:
        text: the final answer's text.
        usage: the provider-reported tokens of every model call of the turn, summed.
        messages: the messages this turn added to the conversation, in order.
        output: the typed answer when the agent declares an ``output_type``, else None.
        rounds_exhausted: True when the turn stopped at ``max_rounds`` with tool results
            the model has not answered yet.
        recovered: on a resumed turn whose last round a crash interrupted, what the turn
            did about it (the event it reported); else None.
        pending: the tool calls waiting for a person's approval: the turn is parked until
            each is decided (``Chat.approve``, ``Chat.deny``); empty when none.
    """

    text: str
    usage: Usage
    messages: list[Any]
    output: Any = None
    rounds_exhausted: bool = False
    recovered: Recovered | None = None
    pending: tuple[PendingApproval, ...] = ()  # a tuple: shared, nothing made per reply


class PendingApproval(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call waiting for a person's approval: its id, the tool's name and the
    arguments the model gave it (JSON text)."""

    call_id: str
    tool: str
    arguments: str


class ApprovalRequested(Event, tag="approval_requested", frozen=True, kw_only=True):
    """The turn parked: ``pending`` lists the calls waiting for a person's approval (stored
    with the conversation; the calls needing none have run)."""

    pending: tuple[PendingApproval, ...]


class ApprovalDecided(Event, tag="approval_decided", frozen=True, kw_only=True):
    """A person's decision on a pending call, saved: approved, or denied with ``reason``
    (the last decision of a turn is followed by the rest of that turn's events)."""

    call_id: str
    tool: str
    approved: bool
    reason: str = ""


class Recovered(Event, tag="recovered", frozen=True, kw_only=True):
    """A resumed turn found calls a crash interrupted (they hold the interrupted result):
    ``rerun`` lists the ids of those it runs again now (their tools are declared safe to run
    again: ``rerun_on_recovery``), ``interrupted`` the ids of those whose interrupted result
    stays, for the model to read."""

    rerun: list[str]
    interrupted: list[str]


class TextDelta(Event, tag="text_delta", frozen=True, kw_only=True):
    """A piece of the answer's text, as the provider streamed it."""

    text: str


class ToolCallStarted(Event, tag="tool_call", frozen=True, kw_only=True):
    """The model asked for a tool call; it is about to run."""

    call_id: str
    name: str
    arguments: str


class ToolCallFinished(Event, tag="tool_result", frozen=True, kw_only=True):
    """A tool call's result, as the model will see it."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


class Restarted(Event, tag="restart", frozen=True, kw_only=True):
    """The model call is being tried again; discard the partial text since the last call."""

    reason: str


class OfferAccepted(Event, tag="offer_accepted", frozen=True, kw_only=True):
    """An offered message joined the turn as a user message; the model will answer it."""

    text: str


class Compacted(Event, tag="compaction", frozen=True, kw_only=True):
    """Before a model call the conversation was compacted to fit its window: the levels
    climbed and its tokens before and after."""

    levels: list[str]
    tokens_before: int
    tokens_after: int


class TurnDone(Event, tag="done", frozen=True, kw_only=True):
    """The turn ended; ``reply`` is what ``Chat.send`` returns."""

    reply: Reply


AgentEvent = (
    ApprovalRequested
    | ApprovalDecided
    | TextDelta
    | ToolCallStarted
    | ToolCallFinished
    | Restarted
    | OfferAccepted
    | Compacted
    | Recovered
    | TurnDone
)


class TurnError(ParlourError):
    """A turn ended abnormally after its boundary save; the conversation stays answerable."""


class TurnCancelledError(TurnError):
    """The turn was cancelled (``force_release``) at a boundary; pending tool calls were
    given error results and saved before the lease was released."""


class ApprovalError(ParlourError):
    """An approval operation was refused; nothing was stored. ``call_ids`` names the calls."""

    def __init__(self, message: str, call_ids: list[str]) -> None:
        super().__init__(message)
        self.call_ids = call_ids


class ApprovalsPendingError(ApprovalError):
    """The conversation has tool calls waiting for approval: decide them first (or
    ``Chat.deny_all``) before a new message or a resume."""


class AlreadyDecidedError(ApprovalError):
    """The call was already approved or denied (perhaps by another process just now)."""


class NoSuchApprovalError(ApprovalError, LookupError):
    """No pending approval has this call id (none is pending, or the id is unknown)."""


def add_usage(a: Usage, b: Usage) -> Usage:
    """The sum of two usages; a cache or reasoning counter stays None only when both are."""

    def plus(x: int | None, y: int | None) -> int | None:
        return None if x is None and y is None else (x or 0) + (y or 0)

    return Usage(
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cache_creation_input_tokens=plus(
            a.cache_creation_input_tokens, b.cache_creation_input_tokens
        ),
        cache_read_input_tokens=plus(a.cache_read_input_tokens, b.cache_read_input_tokens),
        reasoning_tokens=plus(a.reasoning_tokens, b.reasoning_tokens),
    )
