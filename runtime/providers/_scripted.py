"""ScriptedClient: an offline model that answers deterministically, and can call tools.

It is the default wherever no provider key is configured, so that everything in parlour
runs with no network. It goes through the same client template as the real providers, so
budgets, truncation and refusals behave exactly as they do on the wire.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import repeat
from operator import attrgetter, is_
from typing import Any

import msgspec

from parlour.runtime._prepared import PreparedConversation, of_kind
from parlour.runtime._roles import Depth, OutputSize, TurnRole
from parlour.runtime.blocks import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.models._budget import OutputDeclaration
from parlour.runtime.models._catalog_data import DEFAULT_SPECS
from parlour.runtime.models._spec import ModelSpec
from parlour.runtime.providers._response import LLMResponse, StopReason, Usage
from parlour.runtime.providers._template import LLMClient, TextCallback, WireRequest

Reply = str | LLMResponse | Callable[[PreparedConversation], LLMResponse]

SCRIPTED_SPEC: ModelSpec = next(s for s in DEFAULT_SPECS if s.id == "scripted")


class ScriptedClient(LLMClient):
    """Answers from a script, then by a deterministic default.

    Args:
        replies: answers used in order, each a text, a ready ``LLMResponse``, or a function
            of the prepared conversation. When they run out (or none are given) the default
            applies: a turn whose last user message names a declared tool calls that tool;
            a turn answering tool results reports them; anything else is echoed.
        model_id: the id reported on every response (and of the spec, when none is given).
        spec: the model it stands in for; a conversation bound to any provider's model is
            served too, so budgets can be tested against real specs offline.
        depth, output_declaration: the binding it attaches to an unbound conversation that
            declares nothing (``IMMEDIATE``, ``STANDARD``), so the offline default just runs.
            Pass None for both to resolve declarations exactly as the real clients do: an
            undeclared depth or output size is refused with the same error.
        requests: if given, every ``WireRequest`` sent is appended to it, for assertions.

    Thread-safety: with a script, replies are consumed in call order across threads; the
    default policy is a pure function of the prepared conversation.
    """

    _serves_any = True

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        model_id: str = "scripted",
        spec: ModelSpec | None = None,
        depth: Depth | None = Depth.IMMEDIATE,
        output_declaration: OutputDeclaration | None = OutputSize.STANDARD,
        requests: list[WireRequest] | None = None,
    ) -> None:
        if spec is None:
            spec = SCRIPTED_SPEC if model_id == "scripted" else _renamed(SCRIPTED_SPEC, model_id)
        super().__init__(spec, depth=depth, output_declaration=output_declaration)
        self._replies: deque[Reply] = deque(replies)
        self.requests = requests

    def _send(self, request: WireRequest) -> LLMResponse:
        if self.requests is not None:
            self.requests.append(request)
        prepared = request.prepared
        try:
            reply = self._replies.popleft()
        except IndexError:
            return self._default(prepared, request.spec.id)
        if isinstance(reply, str):
            return _response([TextBlock(text=reply)], prepared, request.spec.id)
        if isinstance(reply, LLMResponse):
            return reply
        return reply(prepared)

    async def _asend(self, request: WireRequest, on_text: TextCallback | None) -> LLMResponse:
        return self._send_with(request, on_text)  # no I/O: it answers on the loop itself

    def _stream(self, request: WireRequest) -> Iterator[str | LLMResponse]:
        """Streams the answer word by word, as a provider would in deltas."""
        response = self._send(request)
        words = response.text.split(" ")
        for at, word in enumerate(words):
            if word or at:
                yield word if at == 0 else " " + word
        yield response

    def _default(self, prepared: PreparedConversation, model_id: str) -> LLMResponse:
        last = prepared.turns[-1] if prepared.turns else None
        if last is None or last.role is not TurnRole.USER:
            return _response([TextBlock(text="How can I help?")], prepared, model_id)
        results = [b for b in last.blocks if isinstance(b, ToolResultBlock)]
        if results:
            said = "; ".join(f"{r.tool_use_id} returned {r.content}" for r in results)
            text = f"The tools answered: {said}."
            return _response([TextBlock(text=text)], prepared, model_id)
        text = " ".join(b.text for b in last.blocks if isinstance(b, TextBlock)).strip()
        turn = _answered(prepared) + 1
        for tool in prepared.all_tool_definitions():
            if tool.name in text:
                call = ToolUseBlock(id=f"toolu_{turn:04d}_1", name=tool.name, input_json="{}")
                blocks: list[ContentBlock] = [TextBlock(text=f"Calling {tool.name}."), call]
                return _response(blocks, prepared, model_id, StopReason.TOOL_USE)
        answer = f"Answer {turn}: you said {text!r}."
        return _response([TextBlock(text=answer)], prepared, model_id)


def scripted_tool_calls(
    *calls: tuple[str, dict[str, Any]], text: str | None = None
) -> Callable[[PreparedConversation], LLMResponse]:
    """A scripted reply that calls tools, each ``(name, arguments)``, after ``text``; ids are
    minted as the default policy does (``toolu_TTTT_N``: the turn, the call's place).

    The reply raises ``ValueError`` when it is sent to a conversation that never announced a
    named tool: a model can only call what it was given.
    """

    def reply(prepared: PreparedConversation) -> LLMResponse:
        announced = {t.name for t in prepared.all_tool_definitions()}
        unknown = [name for name, _ in calls if name not in announced]
        if unknown:
            raise ValueError(
                f"A scripted reply calls {', '.join(unknown)}, which the conversation never "
                f"announced (it has: {', '.join(sorted(announced)) or 'no tools'})."
            )
        turn = _answered(prepared) + 1
        blocks: list[ContentBlock] = [TextBlock(text=text)] if text else []
        blocks += [
            ToolUseBlock(id=f"toolu_{turn:04d}_{n}", name=name, input_json=json.dumps(arguments))
            for n, (name, arguments) in enumerate(calls, start=1)
        ]
        return _response(blocks, prepared, SCRIPTED_SPEC.id, StopReason.TOOL_USE)

    return reply


def _answered(prepared: PreparedConversation) -> int:
    """How many assistant turns ``prepared`` holds (counted at C speed)."""
    return sum(map(is_, map(_ROLE, prepared.turns), repeat(TurnRole.ASSISTANT)))


_ROLE, _TEXT = attrgetter("role"), attrgetter("text")


def _renamed(spec: ModelSpec, model_id: str) -> ModelSpec:
    return msgspec.structs.replace(spec, id=model_id)


def _response(
    blocks: list[ContentBlock],
    prepared: PreparedConversation,
    model_id: str,
    stop: StopReason = StopReason.END_TURN,
) -> LLMResponse:
    # a rough usage figure (about four characters a token), cheap on a long conversation
    texts = map(_TEXT, of_kind(prepared.all_blocks(), TextBlock))
    chars_in = len(prepared.system_text) + sum(map(len, texts))
    tokens_out = sum(len(b.text) for b in blocks if isinstance(b, TextBlock)) // 4
    return LLMResponse(
        model_id=model_id,
        blocks=blocks,
        stop_reason=stop,
        usage=Usage(input_tokens=chars_in // 4, output_tokens=tokens_out),
    )
