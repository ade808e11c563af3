"""Usage limits: how many requests and tokens a turn, or a chat's whole conversation, may
spend.

A limit is checked twice around each model call. Before it, from what is already spent
plus, for input and total tokens, the conversation's own estimate of the request about to
be sent (so a request that would cross the limit is never made). After it, from the
provider's reported usage: an answer that crossed a limit is kept (it was paid for and is
saved like any answer) and the turn then stops, its pending tool calls answered with an
error result. What was spent is read from the conversation's usage ledger: the entries
since the turn began for a turn's limits, every entry for a chat's (so a chat's limits
hold across restarts and processes). Summary calls of a compaction count like any call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from parlour.runtime import ConversationContext

from ._events import TurnError

__all__ = [
    "Limits",
    "Spent",
    "UsageLimitExceeded",
    "UsageLimits",
    "check_after",
    "check_before",
    "needs_estimate",
]

_FIELDS = ("requests", "input_tokens", "output_tokens", "total_tokens")

Limits = tuple[tuple[str, "UsageLimits"], ...]  # each scope's name ("turn", "chat") and limits


class UsageLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The most a turn (``Agent(turn_limits=...)``) or a chat's conversation
    (``Agent(chat_limits=...)``) may spend; None leaves that measure unlimited.

    Attributes:
        requests: model calls.
        input_tokens: input tokens, cached ones included, as the providers report them.
        output_tokens: output tokens.
        total_tokens: input plus output tokens.

    Raises:
        ValueError: a limit is not a whole number of at least 1.
    """

    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in _FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if type(value) is not int or value < 1:
                raise ValueError(
                    f"A usage limit must be a whole number of at least 1; {name} is {value!r}."
                )


class UsageLimitExceeded(TurnError):
    """A turn stopped because it reached a usage limit; what it had done is saved.

    Attributes:
        conversation_id: the conversation.
        scope: ``"turn"`` or ``"chat"``.
        limit: which measure: ``requests``, ``input_tokens``, ``output_tokens`` or
            ``total_tokens``.
        allowed: the limit.
        used: what was spent, with the request about to be made where it was checked
            before one (its estimated input tokens, and one request).
    """

    def __init__(
        self, conversation_id: str, scope: str, limit: str, allowed: int, used: int, before: bool
    ) -> None:
        if before:
            what = f"the next request would take its {limit} to {used:,}"
        else:
            what = f"its {limit} reached {used:,}"
        super().__init__(
            f"The turn on conversation {conversation_id} stopped: {what}, past the {scope}'s "
            f"limit of {allowed:,}."
        )
        self.conversation_id, self.scope, self.limit = conversation_id, scope, limit
        self.allowed, self.used = allowed, used


class Spent(msgspec.Struct, frozen=True):
    """Requests and tokens spent, summed from ledger entries."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @staticmethod
    def of(entries: Iterable[Mapping[str, Any]]) -> Spent:
        """The model calls among ``entries`` (plain ledger entries) summed; an entry of
        another kind or an unreadable one counts nothing."""
        requests = input_tokens = output_tokens = 0
        for entry in entries:
            if entry.get("type") != "model_call":
                continue
            requests += 1
            input_tokens += _count(entry.get("input_tokens"))
            output_tokens += _count(entry.get("output_tokens"))
        return Spent(requests, input_tokens, output_tokens)


def _count(value: object) -> int:
    return value if type(value) is int and value > 0 else 0


def check_before(
    context: ConversationContext, limits: Limits, turn_start: int, estimate: int | None
) -> None:
    """Refuse the next model call if it would reach past a limit: one more request, its
    estimated input tokens (``estimate``; None when no limit needs it), or any output
    token at all once the output limit is spent. The turn's spending counts from ledger
    entry ``turn_start``."""
    for scope, limit in limits:
        spent = _spent(context, scope, turn_start)
        after = {"requests": spent.requests + 1, "output_tokens": spent.output_tokens + 1}
        if estimate is not None:
            after["input_tokens"] = spent.input_tokens + estimate
            after["total_tokens"] = spent.total_tokens + estimate
        for name, used in after.items():
            allowed = getattr(limit, name)
            if allowed is not None and used > allowed:
                spent_only = name == "output_tokens"  # no estimate: it is already spent
                raise UsageLimitExceeded(
                    str(context.conversation_id),
                    scope,
                    name,
                    allowed,
                    used - 1 if spent_only else used,
                    before=not spent_only,
                )


def check_after(context: ConversationContext, limits: Limits, turn_start: int) -> None:
    """Stop the turn if the answer just recorded in the ledger went past a limit."""
    for scope, limit in limits:
        spent = _spent(context, scope, turn_start)
        for name in _FIELDS[1:]:
            allowed, used = getattr(limit, name), getattr(spent, name)
            if allowed is not None and used > allowed:
                raise UsageLimitExceeded(
                    str(context.conversation_id), scope, name, allowed, used, before=False
                )


def _spent(context: ConversationContext, scope: str, turn_start: int) -> Spent:
    return Spent.of(context.usage_ledger[turn_start if scope == "turn" else 0 :])


def needs_estimate(limits: Limits) -> bool:
    """True when a limit counts input tokens, so a request's estimate is wanted."""
    return any(lim.input_tokens is not None or lim.total_tokens is not None for _, lim in limits)
