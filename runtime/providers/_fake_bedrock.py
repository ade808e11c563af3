"""Fakes of Bedrock's side of boto3: ``Stubber`` answers and ``converse_stream`` bodies
(see ``testing``)."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import Any


def dummy_bedrock_client(region_name: str = "us-east-1") -> Any:
    """A real ``bedrock-runtime`` client with dummy credentials and no retries."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "bedrock-runtime",
        region_name=region_name,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )


def converse_response(
    text: str = "Hello.",
    *,
    stop_reason: str = "end_turn",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read: int | None = None,
    cache_write: int | None = None,
) -> dict[str, Any]:
    """A ``converse`` response, valid against the service model (for ``Stubber``)."""
    usage: dict[str, Any] = {
        "inputTokens": input_tokens,
        "outputTokens": output_tokens,
        "totalTokens": input_tokens + output_tokens,
    }
    if cache_read is not None:
        usage["cacheReadInputTokens"] = cache_read
    if cache_write is not None:
        usage["cacheWriteInputTokens"] = cache_write
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": stop_reason,
        "usage": usage,
        "metrics": {"latencyMs": 1},
    }


def record_params(client: Any, operation: str = "Converse") -> list[dict[str, Any]]:
    """Record the parameters of every ``operation`` call on ``client`` (as the SDK sees
    them, before serialization); works alongside a ``Stubber``."""
    seen: list[dict[str, Any]] = []

    def hook(params: dict[str, Any], **_: Any) -> None:
        seen.append(params)

    client.meta.events.register(f"provide-client-params.bedrock-runtime.{operation}", hook)
    return seen


# -- the event stream --------------------------------------------------------------------------


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return (
        struct.pack("!B", len(raw_name))
        + raw_name
        + b"\x07"
        + struct.pack("!H", len(raw_value))
        + raw_value
    )


def encode_event(event_type: str, body: dict[str, Any]) -> bytes:
    """One AWS event-stream message (prelude, headers, JSON payload, both CRCs); a type
    ending in ``Exception`` (``throttlingException``) is encoded as an exception message."""
    kind = "exception" if event_type.endswith("Exception") else "event"
    headers = (
        _header(f":{kind}-type", event_type)
        + _header(":content-type", "application/json")
        + _header(":message-type", kind)
    )
    payload = json.dumps(body).encode()
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack("!II", total, len(headers))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    message = prelude + headers + payload
    return message + struct.pack("!I", zlib.crc32(message))


def converse_stream_events(
    text: str,
    *,
    stop_reason: str = "end_turn",
    chunk: int = 4,
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> list[tuple[str, dict[str, Any]]]:
    """The events of a streamed text answer: start, deltas, stop, metadata."""
    events: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": "assistant"})]
    for at in range(0, len(text), chunk):
        delta = {"contentBlockIndex": 0, "delta": {"text": text[at : at + chunk]}}
        events.append(("contentBlockDelta", delta))
    events.append(("contentBlockStop", {"contentBlockIndex": 0}))
    events.append(("messageStop", {"stopReason": stop_reason}))
    usage = {
        "inputTokens": input_tokens,
        "outputTokens": output_tokens,
        "totalTokens": input_tokens + output_tokens,
    }
    events.append(("metadata", {"usage": usage, "metrics": {"latencyMs": 1}}))
    return events


class _RawStream:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data

    def read(self, *_: Any) -> bytes:
        return self._data

    def close(self) -> None:
        pass


StreamAnswer = Iterable[tuple[str, dict[str, Any]]] | BaseException


class ConverseStreamMock:
    """Answers ``converse_stream`` on ``client`` from queued answers, each a list of events
    or an exception to raise as the HTTP layer would (``EndpointConnectionError``);
    ``bodies`` holds the JSON body of each request the SDK serialized and would have sent."""

    def __init__(self, client: Any, *answers: StreamAnswer) -> None:
        self._answers: list[list[tuple[str, dict[str, Any]]] | BaseException] = []
        self.add(*answers)
        self.bodies: list[dict[str, Any]] = []
        client.meta.events.register("before-send.bedrock-runtime.ConverseStream", self._send)

    def add(self, *answers: StreamAnswer) -> None:
        self._answers.extend(a if isinstance(a, BaseException) else list(a) for a in answers)

    def _send(self, request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        self.bodies.append(json.loads(request.body))
        answer = self._answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        data = b"".join(encode_event(kind, body) for kind, body in answer)
        headers = {"content-type": "application/vnd.amazon.eventstream"}
        return AWSResponse(request.url, 200, headers, _RawStream(data))
