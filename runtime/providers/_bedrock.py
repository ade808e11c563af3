"""The Bedrock Converse dialect through boto3: system blocks, tools as text where they sit,
tool calls parsed from the answer's envelope under runtime-minted ids, ``maxTokens``.

The request builder is ``build_converse_request`` (in ``_converse``: no credentials, no SDK
needed); ``ERROR_MAP`` is this dialect's table of botocore errors.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .._handlers import GenericContentFormatter
from .._roles import Depth
from ..blocks import ContentBlock, TextBlock
from ..errors import ParlourError, RetryableLLMError, UncorrectableLLMError
from ..models._catalog import ModelCatalog
from ..models._spec import ModelSpec
from ._converse import (
    DEFAULT_USER_OPENER,
    build_converse_request,
    parse_tool_calls,
)
from ._errors import ErrorMap, map_errors, require_sdk
from ._http import UNSET, injected
from ._image_size import MAX_SIDE
from ._response import LLMResponse, StopReason, Usage
from ._shared import OutputDeclaration, spec_of
from ._sse import cut_short
from ._template import LLMClient, WireRequest

_STOP = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "guardrail_intervened": StopReason.CONTENT_FILTERED,
    "content_filtered": StopReason.CONTENT_FILTERED,
}


# -- decoding ------------------------------------------------------------------------------------


def _usage(usage: dict[str, Any] | None) -> Usage:
    if not usage:
        return Usage()
    return Usage.additive(
        usage.get("inputTokens", 0),
        usage.get("cacheWriteInputTokens"),
        usage.get("cacheReadInputTokens"),
        usage.get("outputTokens", 0),
    )


def _answer(model_id: str, text: str, stop: str | None, usage: Any) -> LLMResponse:
    blocks: list[ContentBlock] = [TextBlock(text=text)] if text else []
    calls = parse_tool_calls(text)
    blocks.extend(calls)
    stop_reason = _STOP.get(stop or "", StopReason.UNKNOWN)
    if calls and stop_reason is StopReason.END_TURN:
        stop_reason = StopReason.TOOL_USE
    return LLMResponse(
        model_id=model_id, blocks=blocks, stop_reason=stop_reason, usage=_usage(usage)
    )


def decode_converse(model_id: str, response: dict[str, Any]) -> LLMResponse:
    """A ``converse`` response as parlour's response, tool calls parsed from its text."""
    content = response.get("output", {}).get("message", {}).get("content", [])
    text = "".join(part.get("text", "") for part in content)
    return _answer(model_id, text, response.get("stopReason"), response.get("usage"))


# -- the error map -------------------------------------------------------------------------------

# Service error codes that retry. A failure in ``converse_stream`` arrives as an exception
# event whose code is lowerCamel (``throttlingException``); it is compared in UpperCamel, so
# a mid-stream error maps exactly as its HTTP twin does (``validationException`` is final).
RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "ServiceUnavailableException",
        "InternalServerException",
        "ModelStreamErrorException",
        "ModelNotReadyException",
        "ModelTimeoutException",
        "ServiceQuotaExceededException",
    }
)


def _client_error(exc: Any, model_id: str) -> tuple[type[ParlourError], str]:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", "Unknown"))
    where = " mid-stream" if type(exc).__name__ == "EventStreamError" else ""
    text = f"Bedrock answered {code}{where} for model {model_id}: {error.get('Message', exc)}"
    if code[:1].upper() + code[1:] in RETRYABLE_CODES:
        return RetryableLLMError, text
    return UncorrectableLLMError, text


def _unreachable(exc: Any, model_id: str) -> tuple[type[ParlourError], str]:
    return RetryableLLMError, f"Bedrock could not be reached for model {model_id}: {exc}"


def _no_credentials(exc: Any, model_id: str) -> tuple[type[ParlourError], str]:
    return UncorrectableLLMError, (
        f"No AWS credentials for Bedrock model {model_id}: set AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or pass a configured boto3 client as client=."
    )


ERROR_MAP: ErrorMap = (
    ("ClientError", _client_error),  # every service error; EventStreamError is mid-stream
    ("NoCredentialsError", _no_credentials),
    ("ConnectionError", _unreachable),  # endpoint unreachable, connect timeout
    ("HTTPClientError", _unreachable),  # read timeout, a dropped connection
    ("BotoCoreError", UncorrectableLLMError),  # anything else botocore raises
)


# -- the client ----------------------------------------------------------------------------------


class BedrockClient(LLMClient):
    """Bedrock's Converse API through boto3, in the text tool dialect.

    Args:
        model: a catalog id or a ``ModelSpec``.
        client: a ready ``bedrock-runtime`` client (tests pass a stubbed one); else one is
            made from the environment's AWS credentials and ``region_name``, with botocore's
            standard retry mode (backoff) for throttling and overload and without its
            client-side parameter validation. ``boto_client=`` is its deprecated name.
        user_opener: the user text sent ahead of a history that opens with an assistant
            turn (Converse requires the first message to be the user's).

    Raises:
        ImportError: boto3 is missing (``pip install -e '.[bedrock]'``).
        UncorrectableLLMError: no region: neither ``region_name`` nor the AWS
            configuration (``AWS_REGION``, ``AWS_DEFAULT_REGION``, a profile) names one.
    """

    formatter = GenericContentFormatter()
    image_sides = ("Converse", MAX_SIDE)

    def __init__(
        self,
        model: str | ModelSpec = "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        *,
        client: Any = None,
        region_name: str | None = None,
        max_attempts: int = 3,
        user_opener: str = DEFAULT_USER_OPENER,
        catalog: ModelCatalog | None = None,
        depth: Depth | None = None,
        output_declaration: OutputDeclaration | None = None,
        boto_client: Any = UNSET,
    ) -> None:
        super().__init__(
            spec_of(model, catalog), depth=depth, output_declaration=output_declaration
        )
        client = injected(client, boto_client, "boto_client")
        if client is None:
            boto3 = require_sdk("boto3", "bedrock")
            config = require_sdk("botocore.config", "bedrock").Config(
                retries={"mode": "standard", "max_attempts": max_attempts},
                # botocore checks every parameter against the service model on every call,
                # in Python: 2.7 ms of CPU a call at 200 messages. The body is built to the
                # Converse shapes (the tests' stubbed clients still check it), and the
                # service refuses what does not fit (a 400: UncorrectableLLMError either way).
                parameter_validation=False,
            )
            exceptions = require_sdk("botocore.exceptions", "bedrock")
            try:
                client = boto3.client("bedrock-runtime", region_name=region_name, config=config)
            except exceptions.NoRegionError as exc:
                raise UncorrectableLLMError(
                    f"Bedrock model {self.spec.id} needs an AWS region: pass region_name=... "
                    "to BedrockClient, or set AWS_REGION (or a region in the AWS profile)."
                ) from exc
        self._sdk = require_sdk("botocore.exceptions", "bedrock")
        self.sdk_client = client
        self.user_opener = user_opener

    def encode(self, request: WireRequest) -> dict[str, Any]:
        return build_converse_request(request, opener=self.user_opener)

    def _send(self, request: WireRequest) -> LLMResponse:
        params = self.encode(request)
        with map_errors(self._sdk, ERROR_MAP, "Bedrock", request.spec.id):
            return decode_converse(request.spec.id, self.sdk_client.converse(**params))

    def _stream(self, request: WireRequest) -> Iterator[str | LLMResponse]:
        params = self.encode(request)
        text: list[str] = []
        stop: str | None = None
        usage: Any = None
        with map_errors(self._sdk, ERROR_MAP, "Bedrock", request.spec.id):
            for event in self.sdk_client.converse_stream(**params)["stream"]:
                delta = event.get("contentBlockDelta", {}).get("delta", {}).get("text")
                if delta:
                    text.append(delta)
                    yield delta
                stop = event.get("messageStop", {}).get("stopReason", stop)
                usage = event.get("metadata", {}).get("usage", usage)
        if stop is None:  # no messageStop: never a partial answer to keep
            raise cut_short("Bedrock", request.spec.id, "its message")
        yield _answer(request.spec.id, "".join(text), stop, usage)
