"""The OpenAI Chat Completions dialect: a leading system message, native tools in OpenAI's
shapes, ``max_completion_tokens`` and a reasoning effort per depth.

``build_openai_body`` is the request builder (no credentials, no SDK needed); ``ERROR_MAP``
is this dialect's table of SDK errors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from .._prepared import Turn
from .._roles import Depth, TurnRole
from ..blocks import (
    ContentBlock,
    FileBlock,
    ImageBlock,
    ReasoningBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ..errors import ParlourError, RetryableLLMError, UncorrectableLLMError
from ..models._spec import ThinkingMode
from ._call_ids import wire_turns
from ._errors import ErrorMap, error_message, status_verdict
from ._http import HttpSdkClient
from ._openai_stream import ChunkReader, completion
from ._response import LLMResponse, StopReason, Usage
from ._shared import block_text, file_text, image_subtype, system_texts, tool_schema
from ._sse import cut_short, unreadable
from ._template import TextCallback, WireRequest
from ._user_media import user_media

_STOP = {
    "stop": StopReason.END_TURN,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "length": StopReason.MAX_TOKENS,
    "content_filter": StopReason.CONTENT_FILTERED,
}
EFFORT = {
    Depth.IMMEDIATE: "minimal",
    Depth.STANDARD: "low",
    Depth.THOROUGH: "medium",
    Depth.ULTRA_THOROUGH: "high",
}
_SKIPPED = (ToolDefinitionBlock, ThinkingBlock, RedactedThinkingBlock, ReasoningBlock)
_STREAMED = {"stream": True, "stream_options": {"include_usage": True}}


# -- encoding ------------------------------------------------------------------------------------


def user_part(
    block: ContentBlock, conversation_id: str | None = None, any_file: bool = False
) -> dict[str, Any]:
    """A user block as a Chat Completions content part (text, ``image_url`` or ``file``).
    Chat Completions takes a file only as a PDF: a ``text/*`` file goes as its text, as
    OpenAI's guide says; ``any_file`` (the Responses API, which reads many types) sends
    every file as a file.

    Raises:
        ValueError: an image that is not PNG, JPEG, GIF or WebP, the types OpenAI takes;
            without ``any_file``, a file that is neither PDF nor UTF-8 text.
    """
    match block:
        case ImageBlock(data=data, mime_type=mime):
            image_subtype(mime, "OpenAI", conversation_id)
            return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
        case FileBlock(mime_type=mime) if not any_file and mime != "application/pdf":
            if not mime.startswith("text/"):
                raise ValueError(
                    f"Conversation {conversation_id}: OpenAI's Chat Completions takes files "
                    f"as PDF or text, and file {block.filename!r} is {mime}; send it through "
                    "OpenAIResponsesClient or convert it first."
                )
            text = file_text(block, conversation_id)
            title = f"File {block.filename}:\n" if block.filename else ""
            return {"type": "text", "text": title + text}
        case FileBlock(data=data, mime_type=mime, filename=filename):
            file: dict[str, Any] = {"file_data": f"data:{mime};base64,{data}"}
            if filename:
                file["filename"] = filename
            return {"type": "file", "file": file}
        case _:
            return {"type": "text", "text": block_text(block)}


def _user_messages(turn: Turn, conversation_id: str | None) -> list[dict[str, Any]]:
    """Tool results first, each its own ``tool`` message; the rest as one user message."""
    messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in turn.blocks:
        if isinstance(block, ToolResultBlock):
            content = f"Error: {block.content}" if block.is_error else block.content
            messages.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
        elif not isinstance(block, _SKIPPED):
            parts.append(user_part(block, conversation_id))
    if parts:
        messages.append({"role": "user", "content": parts})
    return messages


def _assistant_message(turn: Turn) -> dict[str, Any] | None:
    text = "".join(
        block_text(b)
        for b in turn.blocks
        if not isinstance(b, (*_SKIPPED, ToolUseBlock, ToolResultBlock))
    )
    calls = [
        {
            "id": b.id,
            "type": "function",
            "function": {"name": b.name, "arguments": b.input_json},  # verbatim
        }
        for b in turn.blocks
        if isinstance(b, ToolUseBlock)
    ]
    if not text and not calls:
        return None
    message: dict[str, Any] = {"role": "assistant"}
    if text:
        message["content"] = text
    if calls:
        message["tool_calls"] = calls
    return message


def build_openai_body(request: WireRequest) -> dict[str, Any]:
    """The ``chat.completions.create`` body for ``request``.

    The objective is ``messages[0]``, a ``system`` message, and nowhere else.
    """
    prepared = request.prepared
    messages: list[dict[str, Any]] = []
    if system := system_texts(prepared):
        messages.append({"role": "system", "content": "\n\n".join(system)})
    for turn in wire_turns(user_media(prepared.turns)):
        if turn.role is TurnRole.USER:
            messages.extend(_user_messages(turn, request.conversation_id))
        else:
            assistant = _assistant_message(turn)
            if assistant is not None:
                messages.append(assistant)
    body: dict[str, Any] = {
        "model": request.spec.id,
        "messages": messages,
        "max_completion_tokens": request.max_tokens,
    }
    tools = [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": tool_schema(t),
            },
        }
        for t in prepared.all_tool_definitions()
    ]
    if tools:
        body["tools"] = tools
    if request.spec.thinking_mode is ThinkingMode.REASONING_EFFORT:
        body["reasoning_effort"] = EFFORT[request.depth]
    return body


# -- decoding ------------------------------------------------------------------------------------


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)
    reasoning = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", None)
    return Usage.subset(usage.prompt_tokens, None, cached, usage.completion_tokens, reasoning)


def decode_completion(answer: Any) -> LLMResponse:
    """A non-streamed answer (``_openai_stream.completion``'s reading of its JSON, or the
    SDK's ``ChatCompletion``: the same fields) as parlour's response."""
    choice = answer.choices[0]
    message = choice.message
    blocks: list[ContentBlock] = []
    if message.content:
        blocks.append(TextBlock(text=message.content))
    for call in message.tool_calls or ():
        fn = call.function
        blocks.append(ToolUseBlock(id=call.id, name=fn.name, input_json=fn.arguments))
    refusal = getattr(message, "refusal", None)
    stop = StopReason.CONTENT_FILTERED if refusal else _STOP.get(choice.finish_reason or "")
    return LLMResponse(
        model_id=answer.model,
        blocks=blocks,
        stop_reason=stop or StopReason.UNKNOWN,
        usage=_usage(answer.usage),
        refusal_explanation=refusal,
    )


class _StreamAssembly:
    """Folds streamed chunks into the final response, yielding text deltas on the way.

    Args:
        model_id: the model asked, for the errors' messages.
    """

    def __init__(self, model_id: str) -> None:
        self.text: list[str] = []
        self.calls: list[dict[str, str]] = []  # in order of arrival
        self._at: dict[int, dict[str, str]] = {}  # a call index -> its call so far
        self.finish: str | None = None
        self.model = ""
        self.usage: Any = None
        self._model_id = model_id

    def feed(self, chunk: Any) -> str | None:
        """The text delta ``chunk`` carries, if any (its fields typed by the reader)."""
        self.model = chunk.model or self.model
        self.usage = chunk.usage or self.usage
        if not chunk.choices:
            return None
        choice = chunk.choices[0]
        self.finish = choice.finish_reason or self.finish
        for call in choice.delta.tool_calls or ():
            slot = self._at.get(call.index)
            if slot is None or (call.id and slot["id"] and call.id != slot["id"]):
                # a call of its own; a server that numbers every call 0 (Ollama) tells
                # them apart by their ids only, which the SDK's assembly merged
                slot = self._at[call.index] = {"id": "", "name": "", "arguments": ""}
                self.calls.append(slot)
            slot["id"] = call.id or slot["id"]
            if call.function is not None:
                slot["name"] += call.function.name or ""
                slot["arguments"] += call.function.arguments or ""
        delta = choice.delta.content
        if delta:
            self.text.append(delta)
        return delta or None

    def response(self, done: bool) -> LLMResponse:
        """The answer, once the stream has ended (``done``: at ``[DONE]``).

        Raises:
            RetryableLLMError: the stream ended before ``[DONE]`` and before a choice's
                ``finish_reason`` (a compatible server may leave ``[DONE]`` out).
        """
        if not done and self.finish is None:
            raise cut_short("OpenAI", self._model_id, "the answer")
        blocks: list[ContentBlock] = []
        if self.text:
            blocks.append(TextBlock(text="".join(self.text)))
        for c in self.calls:
            blocks.append(ToolUseBlock(id=c["id"], name=c["name"], input_json=c["arguments"]))
        return LLMResponse(
            model_id=self.model,
            blocks=blocks,
            stop_reason=_STOP.get(self.finish or "", StopReason.UNKNOWN),
            usage=_usage(self.usage),
        )


# -- the error map -------------------------------------------------------------------------------

# A failure mid-stream arrives as an ``error`` object instead of the next chunk; the SDK
# raises it as a bare ``APIError`` (no status). These of its types are the server's trouble
# and retry, like a 5xx or a 429 would; any other is final.
MID_STREAM_RETRYABLE = frozenset(
    {"server_error", "internal_error", "overloaded", "service_unavailable", "timeout"}
    | {"rate_limit_exceeded", "rate_limit_error", "requests", "tokens"}
)


def _status_error(exc: Any, model_id: str) -> tuple[type[ParlourError], str]:
    status = int(exc.status_code)
    return status_verdict(
        status
    ), f"OpenAI answered {status} for model {model_id}: {error_message(exc)}"


def _mid_stream(exc: Any, model_id: str) -> tuple[type[ParlourError], str]:
    kinds = {getattr(exc, "type", None), getattr(exc, "code", None)}
    retryable = bool(kinds & MID_STREAM_RETRYABLE)
    verdict = RetryableLLMError if retryable else UncorrectableLLMError
    kind = getattr(exc, "type", None) or getattr(exc, "code", None) or "an error"
    return verdict, f"OpenAI failed mid-stream with {kind} for model {model_id}: {exc.message}"


def _unreachable(exc: Any, model_id: str) -> tuple[type[ParlourError], str]:
    return RetryableLLMError, f"OpenAI could not be reached for model {model_id}: {exc}"


ERROR_MAP: ErrorMap = (
    ("APIConnectionError", _unreachable),  # timeouts are a subclass
    ("APIStatusError", _status_error),  # every HTTP status
    ("APIError", _mid_stream),  # an error object in a stream that had begun
    ("OpenAIError", UncorrectableLLMError),  # anything else the SDK raises
)


# -- the client ----------------------------------------------------------------------------------


class OpenAIClient(HttpSdkClient):
    """OpenAI's Chat Completions through the official ``openai`` SDK.

    Args:
        model: a catalog id or a ``ModelSpec`` (``ModelSpec.custom`` for a model outside
            the catalog).
        api_key: else ``OPENAI_API_KEY``; not needed with a base URL.
        client: a ready ``openai.OpenAI`` (tests pass one over a mock transport).
        max_retries: the SDK's own retry with backoff.
        base_url: an OpenAI-compatible server (vLLM, Ollama, llama.cpp), else
            ``OPENAI_BASE_URL``, else OpenAI's; with either, no key is required.

    Raises:
        ImportError: the SDK is missing (``pip install -e '.[openai]'``).
        UncorrectableLLMError: no API key is configured, and no base URL.
        ValueError: the base URL is not an http(s) URL with a host.
    """

    module = "openai"
    provider = "OpenAI"
    env_var = "OPENAI_API_KEY"
    default_model = "gpt-5-mini"
    error_map = ERROR_MAP
    endpoint = "/chat/completions"
    post_options: ClassVar[Mapping[str, Any]] = {"security": {"bearer_auth": True}}  # as create
    base_url_env = "OPENAI_BASE_URL"
    keyless = True

    def encode(self, request: WireRequest) -> dict[str, Any]:
        return build_openai_body(request)

    def _call(self, body: dict[str, Any]) -> LLMResponse:
        return self._whole_answer(self._whole(body), body)

    async def _acall(self, body: dict[str, Any], on_text: TextCallback | None) -> LLMResponse:
        if on_text is None:
            return self._whole_answer(await self._awhole(body), body)
        assembly = _StreamAssembly(body["model"])
        async with self._astreamed(body | _STREAMED) as response:
            reader = self._reader(response, body)
            async for piece in self._aread(response):
                for chunk in reader.feed(piece):
                    delta = assembly.feed(chunk)
                    if delta:
                        on_text(delta)
            for chunk in reader.close():
                assembly.feed(chunk)
        return assembly.response(reader.done)

    def _call_streaming(self, body: dict[str, Any]) -> Iterator[str | LLMResponse]:
        assembly = _StreamAssembly(body["model"])
        with self._streamed(body | _STREAMED) as response:
            reader = self._reader(response, body)
            for piece in self._read(response):
                for chunk in reader.feed(piece):
                    delta = assembly.feed(chunk)
                    if delta:
                        yield delta
            for chunk in reader.close():
                assembly.feed(chunk)
        yield assembly.response(reader.done)

    def _whole_answer(self, response: Any, body: dict[str, Any]) -> LLMResponse:
        """A non-streamed answer's HTTP response as parlour's response.

        Raises:
            UncorrectableLLMError: it is not the API's answer (not JSON, no choice).
        """
        with unreadable(self.provider, body["model"]):
            return decode_completion(completion(response.content))

    def _reader(self, response: Any, body: dict[str, Any]) -> ChunkReader:
        """A reader of ``response``'s chunks (``_openai_stream``) for ``body``'s model: an
        ``error`` chunk raises the SDK's ``APIError`` on its request, as its stream does."""
        api_error = self._sdk.APIError
        request = response.request
        return ChunkReader(lambda text, error: api_error(text, request, body=error), body["model"])
