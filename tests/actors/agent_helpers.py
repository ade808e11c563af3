"""Shared pieces of the agent tests: scripted tool-call answers, a stored-state reader and a
turn sent from a thread of its own."""

from __future__ import annotations

import json
import threading
from typing import Any, Protocol

from parlour.actors import ConversationService
from parlour.runtime import LLMResponse, StopReason, Usage
from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.snapshots import ConversationPersistenceSnapshot


def calls(
    *pairs: tuple[str, dict[str, Any]], text: str = "Let me look.", round_: int = 1
) -> LLMResponse:
    """A scripted answer calling the named tools with these arguments, in order; call ids
    are unique per ``round_``."""
    blocks: list[Any] = [TextBlock(text=text)]
    for n, (name, args) in enumerate(pairs, 1):
        call_id = f"call_{n}_{name}" if round_ == 1 else f"call_{round_}_{n}_{name}"
        blocks.append(ToolUseBlock(id=call_id, name=name, input_json=json.dumps(args)))
    return LLMResponse(
        model_id="scripted",
        blocks=blocks,
        stop_reason=StopReason.TOOL_USE,
        usage=Usage(input_tokens=10, output_tokens=5),
    )


def stored(service: ConversationService, cid: str, user: str) -> ConversationPersistenceSnapshot:
    assert service.store is not None
    snapshot = service.store.load(cid, user)
    assert snapshot is not None, f"no stored record for {cid}"
    return snapshot


def stored_results(snapshot: ConversationPersistenceSnapshot) -> list[ToolResultBlock]:
    return [b for m in snapshot.messages for b in m.blocks if isinstance(b, ToolResultBlock)]


def stored_calls(snapshot: ConversationPersistenceSnapshot) -> list[ToolUseBlock]:
    return [b for m in snapshot.messages for b in m.blocks if isinstance(b, ToolUseBlock)]


def user_texts(snapshot: ConversationPersistenceSnapshot) -> list[str]:
    return [
        b.text
        for m in snapshot.messages
        if m.role == "user"
        for b in m.blocks
        if isinstance(b, TextBlock)
    ]


def answerable(snapshot: ConversationPersistenceSnapshot) -> bool:
    """Every stored tool call has a result."""
    answered = {r.tool_use_id for r in stored_results(snapshot)}
    return all(c.id in answered for c in stored_calls(snapshot))


class Sends(Protocol):
    def send(self, text: str) -> Any: ...


def send_in_thread(chat: Sends, text: str) -> tuple[threading.Thread, list[BaseException]]:
    """``chat.send(text)`` started on a thread of its own; the list receives what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            chat.send(text)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, raised
