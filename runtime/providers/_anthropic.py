"""The Anthropic Messages dialect: system parameter, native tools, cache breakpoints, thinking.

``build_anthropic_params`` is the request builder (no credentials, no SDK needed); the
client sends its output through the official SDK, always over its stream. ``ERROR_MAP`` is
this dialect's table of SDK errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .._context import ConversationContext
from .._prepared import PreparedConversation, Turn
from ..blocks import (
    ContentBlock,
    FileBlock,
    ImageBlock,
    ReasoningBlock,
    RedactedThinkingBlock,
    SkillBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ..errors import ParlourError, RetryableLLMError, UncorrectableLLMError
from ._anthropic_stream import StreamReader
from ._call_ids import wire_turns
from ._errors import (
    ErrorMap,
    error_message,
    map_errors,
    status_verdict,
)
from ._http import HttpSdkClient
from ._image_size import MAX_SIDE, images_left_out
from ._response import LLMResponse, StopReason, Usage
from ._shared import (
    block_text,
    check_size,
    file_text,
    image_subtype,
    is_blank,
    system_texts,
    tool_schema,
)
from ._template import TextCallback, WireRequest
from ._user_media import user_media

MAX_CACHE_BREAKPOINTS = 4
_NAME_LIMIT = 200  # the longest tool name the API takes in a tool_use block
_IMAGE_LIMIT = 5 * 1024 * 1024  # an image's base64, the most the API takes
_IMAGES, _MANY_IMAGES, _MANY_SIDE = 100, 20, 2_000  # a request's images (``_leave_out_images``)
_LEFT_OUT = "(An image was attached here; only the latest images of the conversation are sent.)"
EPHEMERAL = {"type": "ephemeral"}

_STOP = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "refusal": StopReason.CONTENT_FILTERED,
}


# -- encoding ------------------------------------------------------------------------------------


def encode_block(block: ContentBlock, conversation_id: str | None = None) -> dict[str, Any] | None:
    """One block as an Anthropic content param; None for a tool definition (native tools
    travel in ``tools``, so the inline form is suppressed), for OpenAI's reasoning item
    (only OpenAI reads it) and for blank text (the API refuses empty text blocks).

    Raises:
        ValueError: a file that is neither PDF nor text, or an image type the API lacks.
    """
    match block:
        case ToolDefinitionBlock() | ReasoningBlock():  # OpenAI's reasoning: not for Anthropic
            return None
        case TextBlock(text=text) if is_blank(text):
            return None
        case ToolUseBlock(id=call_id, name=name, input_json=arguments):
            return {
                "type": "tool_use",
                "id": call_id,
                "name": _name(name),
                "input": _input(arguments),
            }
        case ThinkingBlock(text=text, signature=signature):
            return {"type": "thinking", "thinking": text, "signature": signature or ""}
        case RedactedThinkingBlock(data=data):
            return {"type": "redacted_thinking", "data": data}
        case _:
            return _encode_content(block, conversation_id)


def _name(name: str) -> str:
    """A call's tool name as the API takes it back: 1 to 200 characters (a model may have
    called a tool by no name or by a long one; its result said there is no such tool)."""
    return name[:_NAME_LIMIT] or "unnamed_tool"


def _input(arguments: str) -> dict[str, Any]:
    """A call's input as the API takes it back: a JSON object. Arguments that are not one
    (a model's JSON cut short or malformed, which OpenAI's models may give and its API
    keeps) go as an empty object; the call's result already told the model so."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _encode_content(block: ContentBlock, conversation_id: str | None) -> dict[str, Any]:
    match block:
        case ImageBlock(data=data, mime_type=mime):
            media = f"image/{image_subtype(mime, 'Anthropic', conversation_id)}"
            check_size(len(data), _IMAGE_LIMIT, "Anthropic", "an image (base64)", conversation_id)
            return {
                "type": "image",
                "source": {"type": "base64", "media_type": media, "data": data},
            }
        case FileBlock():
            return {"type": "document", "source": _document_source(block, conversation_id)}
        case ToolResultBlock(tool_use_id=call_id, content=content, is_error=is_error):
            return {
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": content,
                "is_error": is_error,
            }
        case _:
            return {"type": "text", "text": block_text(block)}


def _document_source(block: FileBlock, conversation_id: str | None) -> dict[str, Any]:
    """A PDF as base64; any ``text/*`` file as the plain-text source (the API takes base64
    documents only as PDF); anything else is refused before the call."""
    if block.mime_type == "application/pdf":
        return {"type": "base64", "media_type": "application/pdf", "data": block.data}
    if block.mime_type.startswith("text/"):
        text = file_text(block, conversation_id)
        return {"type": "text", "media_type": "text/plain", "data": text}
    raise ValueError(
        f"Conversation {conversation_id}: Anthropic takes documents as PDF or plain text, and "
        f"file {block.filename!r} is {block.mime_type}; convert it to one of them first."
    )


def _encode_turn(
    turn: Turn, anchor: bool, conversation_id: str | None = None
) -> tuple[dict[str, Any], bool]:
    """The turn as a message param; with ``anchor``, its first text or skill block carries
    the cache marker. Returns the param and whether a breakpoint was spent."""
    content: list[dict[str, Any]] = []
    spent = False
    for block in turn.blocks:
        param = encode_block(block, conversation_id)
        if param is None:
            continue
        if anchor and not spent and isinstance(block, TextBlock | SkillBlock):
            param["cache_control"] = dict(EPHEMERAL)
            spent = True
        content.append(param)
    return {"role": turn.role.value, "content": content}, spent


def build_anthropic_params(request: WireRequest) -> dict[str, Any]:
    """The ``messages.create`` keyword arguments for ``request``.

    Breakpoints: at most 4. The system prefix takes the first, counted before the turns, on
    the last system block, when there is system text, the model caches and the conversation
    asks (``cache_system``). Then the first text or skill block of each turn flagged for
    caching takes one, while any remain; image, tool and thinking blocks never anchor.
    """
    prepared = request.prepared
    caching = request.spec.supports_prompt_caching
    system = _system_blocks(prepared)
    cache_system = bool(system) and caching and prepared.cache_system
    used = 1 if cache_system else 0
    messages: list[dict[str, Any]] = []
    for turn in wire_turns(user_media(prepared.turns)):
        anchor = caching and turn.cache and used < MAX_CACHE_BREAKPOINTS
        param, spent = _encode_turn(turn, anchor, request.conversation_id)
        used += spent
        if param["content"]:
            messages.append(param)
    _leave_out_images(messages)
    if cache_system:
        system[-1]["cache_control"] = dict(EPHEMERAL)
    params: dict[str, Any] = {
        "model": request.spec.id,
        "max_tokens": request.max_tokens,
        "messages": messages,
    }
    if system:
        params["system"] = system
    tools = [_encode_tool(t) for t in prepared.all_tool_definitions()]
    if tools:
        params["tools"] = tools
    if request.thinking_active and request.thinking_budget > 0:
        # Anthropic requires the thinking budget below max_tokens, which the reserve clamps.
        budget = min(request.thinking_budget, request.max_tokens - 1)
        params["thinking"] = {"type": "enabled", "budget_tokens": budget}
    return params


def _leave_out_images(messages: list[dict[str, Any]]) -> None:
    """Anthropic refuses a request of more than 100 images, or of more than 20 with one
    over 2,000 pixels on a side: the earliest images past those go as a note instead."""
    images = [c for m in messages for c in m["content"] if c["type"] == "image"]
    datas = [c["source"]["data"] for c in images]
    for content in images[: images_left_out(datas, _IMAGES, _MANY_IMAGES, _MANY_SIDE)]:
        content.clear()
        content.update(type="text", text=_LEFT_OUT)


def _system_blocks(prepared: PreparedConversation) -> list[dict[str, Any]]:
    """Admitted skills first, then the objective."""
    return [{"type": "text", "text": text} for text in system_texts(prepared)]


def _encode_tool(tool: ToolDefinitionBlock) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool_schema(tool)}


# -- decoding ------------------------------------------------------------------------------------


def decode_message(message: Any) -> LLMResponse:
    """An SDK ``Message`` as parlour's response."""
    blocks: list[ContentBlock] = []
    for part in message.content:
        if part.type == "text":
            blocks.append(TextBlock(text=part.text))
        elif part.type == "thinking":
            blocks.append(ThinkingBlock(text=part.thinking, signature=part.signature))
        elif part.type == "redacted_thinking":
            blocks.append(RedactedThinkingBlock(data=part.data))
        elif part.type == "tool_use":
            arguments = json.dumps(part.input)
            blocks.append(ToolUseBlock(id=part.id, name=part.name, input_json=arguments))
    usage = message.usage
    details = getattr(message, "stop_details", None)
    return LLMResponse(
        model_id=message.model,
        blocks=blocks,
        stop_reason=_STOP.get(message.stop_reason or "", StopReason.UNKNOWN),
        usage=Usage.additive(
            usage.input_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
            usage.output_tokens,
        ),
        refusal_category=getattr(details, "category", None),
        refusal_explanation=getattr(details, "explanation", None),
    )


# -- the error map -------------------------------------------------------------------------------

# Anthropic's error types and their HTTP twins. A mid-stream ``error`` event (on a response
# that began 200) carries only the type; it is classified as its twin would be, so an
# ``overloaded_error`` after ``message_start`` retries as a 529 does.
ERROR_TYPES = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def _error_type(body: object) -> str | None:
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


def _api_message(exc: Any) -> str:
    error = exc.body.get("error") if isinstance(exc.body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return error_message(exc)


def _status_error(exc: Any, model_id: str) -> tuple[type[ParlourError], str]:
    status, said = int(exc.status_code), _api_message(exc)
    if status < 400:  # an error event in a stream that had begun
        kind = _error_type(exc.body)
        twin = ERROR_TYPES.get(kind or "")
        verdict = status_verdict(twin) if twin else UncorrectableLLMError
        return verdict, f"Anthropic failed mid-stream with {kind} for model {model_id}: {said}"
    return status_verdict(status), f"Anthropic answered {status} for model {model_id}: {said}"


def _unreachable(exc: Any, model_id: str) -> tuple[type[ParlourError], str]:
    return RetryableLLMError, f"Anthropic could not be reached for model {model_id}: {exc}"


_STREAM = {"stream": True}  # every call streams: see ``AnthropicClient._call``

ERROR_MAP: ErrorMap = (
    ("APIConnectionError", _unreachable),  # timeouts are a subclass
    ("APIStatusError", _status_error),  # every HTTP status, and the mid-stream error event
    ("AnthropicError", UncorrectableLLMError),  # anything else the SDK raises
)


# -- the client ----------------------------------------------------------------------------------


class AnthropicClient(HttpSdkClient):
    """Anthropic's Messages API through the official ``anthropic`` SDK.

    Args:
        model: a catalog id or a ``ModelSpec``.
        api_key: else ``ANTHROPIC_API_KEY``.
        client: a ready ``anthropic.Anthropic`` (tests pass one over a mock transport);
            when given, ``api_key`` and ``max_retries`` are not used.
        max_retries: the SDK's own retry with backoff for rate limits, overload, timeouts.

    Raises:
        ImportError: the SDK is missing (``pip install -e '.[anthropic]'``).
        UncorrectableLLMError: no API key is configured.
    """

    module = "anthropic"
    provider = "Anthropic"
    env_var = "ANTHROPIC_API_KEY"
    default_model = "claude-sonnet-4-5"
    error_map = ERROR_MAP
    endpoint = "/v1/messages"
    plain_clients = ("Anthropic", "AsyncAnthropic")  # Vertex's and Bedrock's read the body
    image_sides = ("Anthropic", MAX_SIDE)

    def encode(self, request: WireRequest) -> dict[str, Any]:
        return build_anthropic_params(request)

    def _call(self, body: dict[str, Any]) -> LLMResponse:
        # Always over the stream: the SDK refuses a non-streamed call whose max_tokens could
        # run past ten minutes (about 21k tokens), which any large rung or escalation reaches.
        *_, response = self._call_streaming(body)  # the text deltas, then the response
        assert isinstance(response, LLMResponse)
        return response

    async def _acall(self, body: dict[str, Any], on_text: TextCallback | None) -> LLMResponse:
        async with self._astreamed(body | _STREAM) as response:
            reader = self._reader(response, body)
            async for chunk in self._aread(response):
                for text in reader.feed(chunk):
                    if on_text is not None:
                        on_text(text)
        return decode_message(reader.message())

    def _call_streaming(self, body: dict[str, Any]) -> Iterator[str | LLMResponse]:
        with self._streamed(body | _STREAM) as response:
            reader = self._reader(response, body)
            for chunk in self._read(response):
                yield from reader.feed(chunk)
        yield decode_message(reader.message())

    def _reader(self, response: Any, body: dict[str, Any]) -> StreamReader:
        """A reader of ``response``'s events (``_anthropic_stream``) for ``body``'s model: an
        ``error`` event raises the SDK's ``APIStatusError`` on it, as the SDK's stream does."""
        status_error = self._sdk.APIStatusError
        return StreamReader(
            lambda text, error: status_error(text, response=response, body=error), body["model"]
        )

    def count_tokens(self, conversation: ConversationContext) -> int:
        """The exact input tokens of the request ``respond`` would send for
        ``conversation`` now (response instructions, tools and thinking config included),
        from Anthropic's count_tokens endpoint (the ``TokenCounter`` interface). Nothing of
        the conversation changes (see ``LLMClient.preview``).

        Raises:
            UncorrectableLLMError: as ``respond`` (nothing declares an output size or depth,
                a bad request, failed authentication).
            RetryableLLMError: rate limit, overload, a dropped connection.
        """
        request = self.preview(conversation)
        params = build_anthropic_params(request)
        del params["max_tokens"]  # the one field count_tokens does not take
        with map_errors(self._sdk, self.error_map, self.provider, request.spec.id):
            return int(self.sdk_client.messages.count_tokens(**params).input_tokens)
