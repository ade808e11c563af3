"""OpenTelemetry spans of an agent turn: the turn, each model call with GenAI attributes,
each tool round, each save; nothing recorded while no tracer provider is configured."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from parlour.actors import Agent, ConversationService
from parlour.actors.agent import _otel
from parlour.runtime import Depth, OutputSize, ScriptedClient

from .agent_helpers import calls


class Recorded:
    def __init__(self, name: str, attributes: dict[str, Any]) -> None:
        self.name = name
        self.attributes = dict(attributes)

        self.events: list[tuple[str, dict[str, Any]]] = []

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def add_event(self, name: str, attributes: dict[str, Any]) -> None:
        self.events.append((name, dict(attributes)))


class RecordingProvider:
    """The two calls parlour makes of a tracer provider, recording every span."""

    def __init__(self) -> None:
        self.spans: list[Recorded] = []

    def get_tracer(self, name: str) -> RecordingProvider:
        return self

    @contextmanager
    def start_as_current_span(self, name: str, attributes: dict[str, Any]) -> Iterator[Recorded]:
        span = Recorded(name, attributes)
        self.spans.append(span)
        yield span


def weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


def test_a_turn_records_its_spans_with_genai_attributes(
    service: ConversationService, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = RecordingProvider()
    monkeypatch.setattr(_otel.trace, "get_tracer_provider", lambda: provider)  # type: ignore[attr-defined]
    agent = Agent(
        ScriptedClient([calls(("weather", {"city": "Rome"}))]),
        tools=[weather],
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )
    agent.chat(service, user_id="alice").send("Weather?")
    names = [s.name for s in provider.spans]
    assert names[0] == "parlour.turn"
    assert names.count("chat scripted") == 2 and names.count("parlour.tools") == 1
    # the user message, the answer calling the tool, its result, the final answer
    assert names.count("parlour.save") == 4
    model = next(s for s in provider.spans if s.name == "chat scripted")
    assert model.attributes["gen_ai.request.model"] == "scripted"
    assert model.attributes["gen_ai.usage.input_tokens"] > 0
    assert model.attributes["gen_ai.usage.cache_read.input_tokens"] == 0


def test_no_span_is_made_while_no_tracer_provider_is_configured() -> None:
    with _otel.span("parlour.turn") as current:
        assert current is None


def test_an_async_turn_records_the_same_spans(
    service: ConversationService, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    provider = RecordingProvider()
    monkeypatch.setattr(_otel.trace, "get_tracer_provider", lambda: provider)  # type: ignore[attr-defined]
    agent = Agent(
        ScriptedClient([calls(("weather", {"city": "Rome"}))]),
        tools=[weather],
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )
    asyncio.run(agent.chat(service, user_id="alice").asend("Weather?"))
    names = sorted(s.name for s in provider.spans)
    assert names == sorted(
        ["parlour.turn", "chat scripted", "chat scripted", "parlour.tools"] + ["parlour.save"] * 4
    )


def test_a_compaction_is_a_span_and_an_event_with_levels_and_tokens(
    service: ConversationService, monkeypatch: pytest.MonkeyPatch
) -> None:
    from .test_agent_compaction import long_agent

    provider = RecordingProvider()
    monkeypatch.setattr(_otel.trace, "get_tracer_provider", lambda: provider)  # type: ignore[attr-defined]
    chat = long_agent().chat(service, user_id="alice")
    for turn in range(12):
        chat.send(f"Question {turn}")
    compactions = [s for s in provider.spans if s.name == "parlour.compaction"]
    assert compactions, "no compaction span in twelve long turns"
    first = compactions[0]
    assert first.events and first.events[0][0] == "parlour.compaction"
    before = first.attributes["parlour.compaction.tokens_before"]
    assert first.attributes["parlour.compaction.tokens_after"] < before
    assert "light" in first.attributes["parlour.compaction.levels"]
