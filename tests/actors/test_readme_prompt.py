"""What the README promises a newcomer about the offline model and the system text: its
example really calls its weather tool offline, and parlour adds to the objective only the
tool-weight guidance (with tools) and, for a typed answer, the notation's legend, while the
response instructions ride the asking turn and are never stored."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from parlour.actors import Agent, ConversationService
from parlour.runtime import (
    SCHEMA_NOTATION_GUIDANCE,
    TOOL_WEIGHT_GUIDANCE,
    Depth,
    OutputSize,
    ScriptedClient,
    WireRequest,
)
from parlour.runtime.blocks import TextBlock

README = Path(__file__).resolve().parents[2] / "README.md"


class Forecast(msgspec.Struct):
    city: str
    sky: str


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny and 21 C in {city}."


def first_request(service: ConversationService, **kwargs: object) -> WireRequest:
    sent: list[WireRequest] = []
    answers = ['{"city": "Paris", "sky": "clear"}'] if "output_type" in kwargs else []
    agent = Agent(
        ScriptedClient(answers, requests=sent),
        objective="Answer briefly.",
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
        **kwargs,  # type: ignore[arg-type]
    )
    agent.chat(service, user_id="alice").send("Forecast for Paris")
    return sent[0]


def test_the_readme_example_calls_its_weather_tool_on_the_offline_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    assert 'client_for("scripted")' in code
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "<readme>", "exec", dont_inherit=True), {"__name__": "readme"})
    first_line = capsys.readouterr().out.splitlines()[0]
    assert "returned Sunny and 21 C in Paris." in first_line  # the tool ran, with the city


def test_without_tools_the_system_text_is_the_objective_alone(
    service: ConversationService,
) -> None:
    assert first_request(service).prepared.system_text == "Answer briefly."


def test_with_tools_the_system_text_adds_the_tool_weight_guidance(
    service: ConversationService,
) -> None:
    system = first_request(service, tools=[get_weather]).prepared.system_text
    assert system.startswith("Answer briefly.\n\n" + TOOL_WEIGHT_GUIDANCE)
    assert "get_weather: The weather in a city." in system  # the offline model's listing
    assert "Available tools:" in README.read_text() and "TOOL_WEIGHT_GUIDANCE" in README.read_text()


def test_a_typed_answer_adds_the_legend_and_its_instructions_ride_the_turn_unstored(
    service: ConversationService,
) -> None:
    request = first_request(service, output_type=Forecast)
    prepared = request.prepared
    assert prepared.system_text == "Answer briefly.\n\n" + SCHEMA_NOTATION_GUIDANCE
    said = [b.text for b in prepared.turns[-1].blocks if isinstance(b, TextBlock)]
    assert said[0] == "Forecast for Paris"
    assert said[1].startswith("Reply with one JSON object, and nothing around it")
    assert service.store is not None and request.conversation_id is not None
    stored = service.store.load(request.conversation_id, "alice")
    assert stored is not None
    kept = [b.text for m in stored.messages for b in m.blocks if isinstance(b, TextBlock)]
    assert not any("Reply with one JSON object" in text for text in kept)
