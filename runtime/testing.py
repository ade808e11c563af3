"""Test doubles shipped with the library, so applications test their agents the same way.

``ScriptedClient`` is the offline model (``scripted_tool_calls`` scripts an answer that
calls tools with arguments); ``FakeClock`` is a clock tests advance by hand;
``fake_spec`` makes a ``ModelSpec`` with round numbers. The fakes of the providers' servers
(``MockProvider`` and the answer builders for anthropic and openai, the boto3 doubles for
Bedrock) live in ``parlour.runtime.providers.testing`` and are re-exported here. None of it
touches the network.
"""

from __future__ import annotations

from typing import Any

from ._roles import Depth, OutputSize
from .models._spec import ModelSpec, ThinkingMode
from .providers._scripted import ScriptedClient, scripted_tool_calls
from .providers.testing import (
    ConverseStreamMock,
    MockProvider,
    anthropic_message,
    anthropic_sse,
    anthropic_sse_error,
    converse_response,
    converse_stream_events,
    dummy_bedrock_client,
    encode_event,
    mock_anthropic_sdk,
    mock_async_anthropic_sdk,
    mock_async_openai_sdk,
    mock_openai_sdk,
    openai_completion,
    openai_reasoning,
    openai_response,
    openai_response_sse,
    openai_response_sse_error,
    openai_sse,
    openai_sse_error,
    record_params,
)

__all__ = [
    "ConverseStreamMock",
    "FakeClock",
    "MockProvider",
    "ScriptedClient",
    "anthropic_message",
    "anthropic_sse",
    "anthropic_sse_error",
    "converse_response",
    "converse_stream_events",
    "dummy_bedrock_client",
    "encode_event",
    "fake_spec",
    "mock_anthropic_sdk",
    "mock_async_anthropic_sdk",
    "mock_async_openai_sdk",
    "mock_openai_sdk",
    "openai_completion",
    "openai_reasoning",
    "openai_response",
    "openai_response_sse",
    "openai_response_sse_error",
    "openai_sse",
    "openai_sse_error",
    "record_params",
    "scripted_tool_calls",
]


class FakeClock:
    """A clock that moves only when told to. Thread-safe for reads (a float attribute)."""

    def __init__(self, start: float = 1_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def fake_spec(**overrides: Any) -> ModelSpec:
    """A ``ModelSpec`` with round numbers: ceiling 64,000, context 200,000, rungs
    1,000 / 4,000 / 16,000 / 32,000, thinking 8,000 / 16,000 / 32,000 above IMMEDIATE
    (plus 2,000 at IMMEDIATE, booked only in reasoning-effort mode), anthropic thinking mode,
    prompt caching on. Any field can be overridden."""
    fields: dict[str, Any] = {
        "id": "fake-model",
        "provider": "scripted",
        "max_context_tokens": 200_000,
        "max_output_tokens": 64_000,
        "output_budgets": {
            OutputSize.VERDICT: 1_000,
            OutputSize.COMPACT: 4_000,
            OutputSize.STANDARD: 16_000,
            OutputSize.EXTENDED: 32_000,
        },
        "thinking_budgets": {
            Depth.IMMEDIATE: 2_000,
            Depth.STANDARD: 8_000,
            Depth.THOROUGH: 16_000,
            Depth.ULTRA_THOROUGH: 32_000,
        },
        "thinking_mode": ThinkingMode.ANTHROPIC,
        "supports_prompt_caching": True,
    }
    fields.update(overrides)
    return ModelSpec(**fields)
