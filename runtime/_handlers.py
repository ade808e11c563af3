"""Response handlers: what the model is asked to answer, and how its answer is read back.

Every handler here is stateless: its instructions are a pure function of its answer
type and the two render flags, memoized at module level, so one instance serves many
conversations on many threads.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol, runtime_checkable

import msgspec

from .blocks import ToolUseBlock
from .schema._generation import Schema, generate_schema


@runtime_checkable
class ResponseHandler(Protocol):
    """Stateless: one instance may serve many conversations on many threads at once."""

    def response_instructions(
        self, native_tools_available: bool, thinking_active: bool
    ) -> str | None:
        """Instructions appended to the last turn at render, or None for none."""
        ...

    def uses_schema_notation(self) -> bool:
        """True when the instructions use the @-notation, so the legend must be in the head."""
        ...

    def parse(self, text: str) -> Any:
        """Read the model's answer text back into the handler's result."""
        ...


class StringResponseHandler:
    """Plain prose: no instructions, no schema notation, the answer is the text itself."""

    def response_instructions(
        self, native_tools_available: bool, thinking_active: bool
    ) -> str | None:
        return None

    def uses_schema_notation(self) -> bool:
        return False

    def parse(self, text: str) -> str:
        return text


class ContentFormatter(Protocol):
    """A provider dialect's view of rendering: does it carry tools natively?"""

    def supports_native_tool_calling(self) -> bool: ...


class GenericContentFormatter:
    """The text dialect: tools render inline as text."""

    def supports_native_tool_calling(self) -> bool:
        return False


class NativeToolsFormatter:
    """A dialect with a native tools parameter (Anthropic, OpenAI)."""

    def supports_native_tool_calling(self) -> bool:
        return True


# -- the @-notation ---------------------------------------------------------------------------

REPLY_PREAMBLE = "Reply with one JSON object, and nothing around it, that is an instance of:\n"


@functools.lru_cache(maxsize=256)
def _schema_of(cls: type) -> Schema:
    """The schema of an answer type, generated once: the one @-notation renderer, the same
    the tools use, so an answer and a tool input of one type read alike."""
    return generate_schema(cls)


def _notation(cls: type, omit: frozenset[str] = frozenset()) -> dict[str, Any]:
    return _schema_of(cls).to_notation(omit)


@functools.lru_cache(maxsize=256)
def _pojo_instructions(cls: type) -> str:
    return REPLY_PREAMBLE + msgspec.json.encode(_notation(cls)).decode()


def _strip_fences(text: str) -> str:
    """The JSON inside a reply, tolerating a Markdown code fence around it."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    return body.strip()


class PojoResponseHandler:
    """A typed answer: the model replies with one JSON instance of ``cls`` (a msgspec Struct
    or a dataclass), described in the @-notation by the schema package's renderer (the
    one the tools use: descriptions, ``@required`` from ``LLMRequired``, examples), so the
    legend joins the conversation."""

    def __init__(self, cls: type) -> None:
        _schema_of(cls)  # refuse a type that has no fields to describe, here and now
        self.cls = cls

    def response_instructions(
        self, native_tools_available: bool, thinking_active: bool
    ) -> str | None:
        return _pojo_instructions(self.cls)

    def uses_schema_notation(self) -> bool:
        return True

    def parse(self, text: str) -> Any:
        """The answer as an instance of ``cls``.

        Raises:
            msgspec.ValidationError: the reply is not JSON of that shape.
        """
        return msgspec.json.decode(_strip_fences(text), type=self.cls)


# -- the thinking envelope --------------------------------------------------------------------


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call the model wrote into its reply (the text dialect)."""

    name: str
    input: dict[str, Any] = msgspec.field(default_factory=dict)
    id: str | None = None


class _Envelope(msgspec.Struct, kw_only=True):
    reasoning: str | None = None
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    answer: Any = None


class ThinkingResponse(msgspec.Struct, frozen=True, kw_only=True):
    """One step of a thinker: why, which tools to call now, and the answer once it is ready."""

    reasoning: str | None
    tool_calls: list[ToolUseBlock]
    answer: Any


_ENVELOPE_DESCRIPTIONS = {
    "reasoning": "Why this step is the right one, in a few sentences a reader can check.",
    "tool_calls": "Tools to call now, in order; leave it out or empty when you answer.",
    "answer": "The final answer; leave it out while you still call tools.",
}


@functools.lru_cache(maxsize=256)
def _thinking_instructions(answer: type | None, native_tools: bool, thinking: bool) -> str:
    fields: dict[str, Any] = {}
    if not thinking:
        fields["reasoning"] = {"@type": "string"}
    if not native_tools:
        fields["tool_calls"] = {
            "@type": "array of ToolCall",
            "@fields": {
                "name": {"@type": "string", "@required": True},
                "input": {"@type": "object", "@description": "Matches the tool's input."},
            },
        }
    omit = frozenset({"reasoning"}) if thinking else frozenset()
    fields["answer"] = {"@type": "string"} if answer is None else _notation(answer, omit)
    for name, node in fields.items():
        node["@description"] = _ENVELOPE_DESCRIPTIONS[name]
    own = _schema_of(answer).root.description if answer is not None else None
    if own:  # the answer type's own description is kept after the envelope's
        fields["answer"]["@description"] += " " + own
    envelope = {"@type": "ThinkingResponse", "@fields": fields}
    return REPLY_PREAMBLE + msgspec.json.encode(envelope).decode()


class ThinkingResponseHandler:
    """The thinker's envelope: ``reasoning``, ``tool_calls`` and the typed ``answer``.

    Schema stripping: ``tool_calls`` is left out when native tool calling is
    available (the model answers with native tool-use blocks), and both the envelope's
    ``reasoning`` and the answer type's own top-level ``reasoning`` are left out when a
    native thinking block is guaranteed, since they would be output the handler discards.

    Args:
        answer: the answer's msgspec Struct or dataclass; None for a prose answer.
    """

    def __init__(self, answer: type | None = None) -> None:
        if answer is not None:
            _schema_of(answer)
        self.answer = answer

    def response_instructions(
        self, native_tools_available: bool, thinking_active: bool
    ) -> str | None:
        return _thinking_instructions(self.answer, native_tools_available, thinking_active)

    def uses_schema_notation(self) -> bool:
        return True

    def parse(self, text: str) -> ThinkingResponse:
        """The reply as a ThinkingResponse; a call without an id gets ``name#position``,
        its 1-based place in the turn, so its result can be recorded against it.

        Raises:
            msgspec.ValidationError: the reply is not the envelope, or the answer does not
                fit the answer type.
        """
        envelope = msgspec.json.decode(_strip_fences(text), type=_Envelope)
        calls = [
            ToolUseBlock(
                id=call.id or f"{call.name}#{position}",
                name=call.name,
                input_json=msgspec.json.encode(call.input).decode(),
            )
            for position, call in enumerate(envelope.tool_calls, start=1)
        ]
        answer = envelope.answer
        if answer is not None and self.answer is not None:
            answer = msgspec.convert(answer, self.answer)
        return ThinkingResponse(reasoning=envelope.reasoning, tool_calls=calls, answer=answer)
