"""The agent's default compactor: ``compactor_for(client)``, with an async summary call for a
real client, so a turn on an event loop writes a compaction's summaries on the loop. Each
summary call is a model call like a turn's: it books on its model's limiter, if the
application set one (``tuning.set_model_limits``), and waits at most the agent's model
timeout for room."""

from __future__ import annotations

import asyncio
from typing import Any

from parlour.runtime import ConversationContext, LLMClient
from parlour.runtime.compaction import (
    ContextCompactor,
    LLMContextCompactor,
    compactor_for,
    summary_model,
)

from .._limiter import Booking
from ._calls import booking_for, close, no_room

__all__ = ["default_compactor"]


def default_compactor(client: LLMClient, model_timeout_s: float = 600.0) -> ContextCompactor:
    """``compactor_for(client)``, with an async summary call beside the sync one for a real
    client, so a turn on an event loop makes a level's summaries concurrently on the loop;
    both book on the summary model's limiter, waiting at most ``model_timeout_s``."""
    compactor = compactor_for(client)
    if compactor.can_await:
        return compactor
    model = summary_model(client.spec)

    def complete(prompt: str) -> Any:
        context = ConversationContext.single_turn(model, prompt, _SUMMARY)
        booking, response = _book(client, context, model_timeout_s), None
        try:
            response = client.respond(context)
            return response
        finally:
            close(booking, response)

    async def acomplete(prompt: str) -> Any:
        context = ConversationContext.single_turn(model, prompt, _SUMMARY)
        booking, response = await _abook(client, context, model_timeout_s), None
        try:
            response = await client.arespond(context)
            return response
        finally:
            close(booking, response)

    return LLMContextCompactor(complete, acomplete=acomplete, model_id=model.id)


def _book(client: LLMClient, context: ConversationContext, timeout: float) -> Booking | None:
    found = booking_for(client, context)
    if found is None:
        return None
    limiter, estimate, reserve = found
    booking = limiter.book(estimate, reserve, timeout=timeout)
    if booking is None:
        raise no_room(client, limiter, context, timeout)
    return booking


async def _abook(client: LLMClient, context: ConversationContext, timeout: float) -> Booking | None:
    found = booking_for(client, context)
    if found is None:
        return None
    limiter, estimate, reserve = found
    try:
        async with asyncio.timeout(timeout):
            return await limiter.abook(estimate, reserve)
    except TimeoutError:
        raise no_room(client, limiter, context, timeout) from None


_SUMMARY = 2_000  # a summary call's output backstop
