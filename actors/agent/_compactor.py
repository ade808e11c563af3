"""The agent's default compactor: ``compactor_for(client)``, with an async summary call for a
real client, so a turn on an event loop writes a compaction's summaries on the loop."""

from __future__ import annotations

from typing import Any

from parlour.runtime import ConversationContext, LLMClient
from parlour.runtime.compaction import (
    ContextCompactor,
    LLMContextCompactor,
    compactor_for,
    summary_model,
)

__all__ = ["default_compactor"]


def default_compactor(client: LLMClient) -> ContextCompactor:
    """``compactor_for(client)``, with an async summary call beside the sync one for a real
    client, so a turn on an event loop makes a level's summaries concurrently on the loop."""
    compactor = compactor_for(client)
    if compactor.can_await:
        return compactor
    model = summary_model(client.spec)

    def complete(prompt: str) -> Any:
        return client.respond(ConversationContext.single_turn(model, prompt, _SUMMARY))

    async def acomplete(prompt: str) -> Any:
        return await client.arespond(ConversationContext.single_turn(model, prompt, _SUMMARY))

    return LLMContextCompactor(complete, acomplete=acomplete, model_id=model.id)


_SUMMARY = 2_000  # a summary call's output backstop
