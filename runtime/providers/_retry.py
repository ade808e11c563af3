"""The one-shot truncation retry: parlour has no job dispatcher, so this small helper
carries the dispatcher's semantics around one LLM call.

A call truncated while a larger budget exists raises ``OutputTruncationRetry`` after raising
the sent message to the ceiling; re-running the KEPT conversation sends the escalated budget.
A second truncation is final, and its message names the cause.
"""

from __future__ import annotations

from collections.abc import Callable

from .._context import ConversationContext
from ..errors import (
    OutputCeilingError,
    OutputTruncationRetry,
    UncorrectableLLMError,
)
from ._response import LLMResponse
from ._template import LLMClient, TextCallback

ConversationSource = ConversationContext | Callable[[], ConversationContext]


def respond_with_truncation_retry(
    client: LLMClient,
    conversation: ConversationSource,
    *,
    on_text: TextCallback | None = None,
) -> LLMResponse:
    """``client.respond`` with one retry on ``OutputTruncationRetry``.

    ``conversation`` is the conversation itself (kept across attempts, so the retry sends
    the escalated budget) or a function building one per attempt (a job that rebuilds its
    conversation re-runs at its declared budget, and a second truncation says so).

    Raises:
        UncorrectableLLMError: the retry was truncated too; the message names why (the
            model's own ceiling, a request rebuilt without the escalation, or failover to a
            model with a lower ceiling). Anything else ``respond`` raises passes through.
    """

    def build() -> ConversationContext:
        return conversation if isinstance(conversation, ConversationContext) else conversation()

    try:
        return client.respond(build(), on_text=on_text)
    except OutputTruncationRetry as first:
        escalation = first
    try:
        return client.respond(build(), on_text=on_text)
    except OutputTruncationRetry as second:
        raise UncorrectableLLMError(
            f"The retry was truncated again at {second.previous_budget} output tokens: the "
            f"job re-issued its request without the escalation to {escalation.new_budget}. "
            "Keep the conversation across attempts so the escalated budget is sent."
        ) from second
    except OutputCeilingError as second:
        raise UncorrectableLLMError(_at_ceiling(second, escalation.new_budget)) from second


def _at_ceiling(error: OutputCeilingError, escalated: int) -> str:
    if error.ceiling < escalated:
        return (
            f"The retry was truncated at {error.model_id}'s ceiling of {error.ceiling} output "
            f"tokens, below the escalated {escalated}: failover moved the attempt to a model "
            "with a lower ceiling."
        )
    return (
        f"The retry was truncated again at {error.ceiling} output tokens: model "
        f"{error.model_id}'s own ceiling refused the answer. Ask for less, or choose a "
        "model with a higher ceiling."
    )
