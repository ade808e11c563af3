"""ScriptedClient: an offline model that answers deterministically, and can call tools.

It is the default wherever no provider key is configured, so that everything in parlour
runs with no network. It goes through the same client template as the real providers.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable

from parlour.runtime._llm import LLMClient, LLMResponse, StopReason, Usage
from parlour.runtime._prepared import PreparedConversation
from parlour.runtime._roles import TurnRole
from parlour.runtime.blocks import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock

Reply = str | LLMResponse | Callable[[PreparedConversation], LLMResponse]


class ScriptedClient(LLMClient):
    """Answers from a script, then by a deterministic default.

    Args:
        replies: answers used in order, each a text, a ready ``LLMResponse``, or a function
            of the prepared conversation. When they run out (or none are given) the default
            applies: a turn whose last user message names a declared tool calls that tool;
            a turn answering tool results reports them; anything else is echoed.
        model_id: the id reported on every response.

    Thread-safety: with a script, replies are consumed in call order across threads; the
    default policy is a pure function of the prepared conversation.
    """

    def __init__(self, replies: Iterable[Reply] = (), *, model_id: str = "scripted") -> None:
        self.model_id = model_id
        self._replies: deque[Reply] = deque(replies)

    def _send(self, prepared: PreparedConversation) -> LLMResponse:
        try:
            reply = self._replies.popleft()
        except IndexError:
            return self._default(prepared)
        if isinstance(reply, str):
            return self._response([TextBlock(text=reply)], prepared)
        if isinstance(reply, LLMResponse):
            return reply
        return reply(prepared)

    def _default(self, prepared: PreparedConversation) -> LLMResponse:
        last = prepared.turns[-1] if prepared.turns else None
        if last is None or last.role is not TurnRole.USER:
            return self._response([TextBlock(text="How can I help?")], prepared)
        results = [b for b in last.blocks if isinstance(b, ToolResultBlock)]
        if results:
            said = "; ".join(f"{r.tool_use_id} returned {r.content}" for r in results)
            return self._response([TextBlock(text=f"The tools answered: {said}.")], prepared)
        text = " ".join(b.text for b in last.blocks if isinstance(b, TextBlock)).strip()
        turn = sum(1 for t in prepared.turns if t.role is TurnRole.ASSISTANT) + 1
        for tool in prepared.all_tool_definitions():
            if tool.name in text:
                call = ToolUseBlock(
                    id=f"toolu_{turn:04d}_1", name=tool.name, input_json=json.dumps({})
                )
                blocks: list[ContentBlock] = [TextBlock(text=f"Calling {tool.name}."), call]
                return self._response(blocks, prepared, StopReason.TOOL_USE)
        return self._response([TextBlock(text=f"Answer {turn}: you said {text!r}.")], prepared)

    def _response(
        self,
        blocks: list[ContentBlock],
        prepared: PreparedConversation,
        stop: StopReason = StopReason.END_TURN,
    ) -> LLMResponse:
        words_in = len(prepared.system_text.split()) + sum(
            len(b.text.split()) for t in prepared.turns for b in t.blocks
            if isinstance(b, TextBlock)
        )
        words_out = sum(len(b.text.split()) for b in blocks if isinstance(b, TextBlock))
        return LLMResponse(
            model_id=self.model_id,
            blocks=blocks,
            stop_reason=stop,
            usage=Usage(input_tokens=words_in, output_tokens=words_out),
        )
