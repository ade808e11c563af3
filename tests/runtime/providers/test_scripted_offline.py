"""The offline model as an application's tests use it: the default policy calls a tool the
message asks for with arguments its schema accepts (so the tool really runs), a test
scripts answers per conversation, and ``scripted_tool_calls`` sits beside
``ScriptedClient`` in ``parlour.runtime``."""

from __future__ import annotations

import datetime as dt
import enum
import json
from typing import Any

import jsonschema
from hypothesis import given
from hypothesis import strategies as st

import parlour.runtime
from parlour.runtime import ConversationContext, StopReason, tool_from_function
from parlour.runtime.providers._scripted_args import arguments_for, names_tool, tool_asked_for
from parlour.runtime.testing import ScriptedClient


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


def get_weather(city: str, days: int = 1) -> str:
    """The weather in a city."""
    return f"Sunny and 21 C in {city}."


def book_trip(
    city: str, when: dt.date, nights: int, unit: Unit, stops: list[str], direct: bool
) -> str:
    """Book a trip."""
    return f"{city} on {when.isoformat()} for {nights} nights, {unit.value}, via {stops}"


def asked(text: str, *tools: Any) -> ConversationContext:
    c = ConversationContext("offline-1")
    for tool in tools:
        c.add_tool(tool_from_function(tool).definition())
    c.add_user_message(text)
    return c


def test_the_default_policy_calls_the_tool_a_message_asks_for_with_arguments_it_accepts() -> None:
    response = ScriptedClient().respond(asked("Weather in Paris?", get_weather))
    assert response.stop_reason is StopReason.TOOL_USE
    [call] = response.tool_uses
    assert call.name == "get_weather" and json.loads(call.input_json) == {"city": "Paris"}
    assert tool_from_function(get_weather).call(call.input_json) == "Sunny and 21 C in Paris."


def test_every_required_argument_is_made_from_the_schema_and_the_tool_runs_with_them() -> None:
    c = asked("Please book_trip to Lisbon", book_trip)
    [call] = ScriptedClient().respond(c).tool_uses
    arguments = json.loads(call.input_json)
    assert arguments == {
        "city": "Lisbon",
        "when": "2025-01-01",
        "nights": 1,
        "unit": "celsius",
        "stops": ["Lisbon"],
        "direct": True,
    }
    result = tool_from_function(book_trip).call(call.input_json)
    assert result.startswith("Lisbon on 2025-01-01 for 1 nights, celsius")
    again = ScriptedClient().respond(asked("Please book_trip to Lisbon", book_trip))
    assert again.tool_uses == [call]  # deterministic


def test_a_message_that_asks_for_no_tool_is_answered_and_common_words_ask_for_none() -> None:
    assert ScriptedClient().respond(asked("Hello there", get_weather)).tool_uses == []
    assert not names_tool("get me a list", "list_files")  # "list" is too common to count
    assert names_tool("show the files", "list_files") and names_tool("holdOn please", "holdOn")
    assert names_tool("I will hold on", "hold_on") and not names_tool("go on", "hold_on")
    tools = ["get_weather", "weather_alerts"]
    assert tool_asked_for("use weather_alerts", tools) == "weather_alerts"  # a whole name first
    assert tool_asked_for("any weather news?", tools) == "get_weather"  # then the first by word


SCHEMAS: st.SearchStrategy[dict[str, Any]] = st.recursive(
    st.sampled_from(
        [
            {"type": "string"},
            {"type": "string", "minLength": 12},
            {"type": "string", "maxLength": 2},
            {"type": "string", "format": "date-time"},
            {"type": "integer"},
            {"type": "integer", "minimum": 5, "maximum": 9},
            {"type": "integer", "exclusiveMinimum": 0},
            {"type": "number", "maximum": -3},
            {"type": "boolean"},
            {"type": "null"},
            {"enum": ["a", "b"]},
            {"const": 7},
            {"type": ["null", "integer"]},
            {"anyOf": [{"type": "null"}, {"type": "string"}]},
        ]
    ),
    lambda inner: st.one_of(
        st.builds(lambda i: {"type": "array", "items": i, "minItems": 2}, inner),
        st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, min_size=1).map(
            lambda props: {"type": "object", "properties": props, "required": sorted(props)}
        ),
    ),
    max_leaves=8,
)


@given(st.dictionaries(st.sampled_from(["x", "y", "z"]), SCHEMAS, min_size=1), st.text())
def test_property_the_arguments_made_for_any_schema_validate_against_it(
    properties: dict[str, Any], text: str
) -> None:
    schema = {"type": "object", "properties": properties, "required": sorted(properties)}
    arguments = arguments_for(schema, text)
    jsonschema.validate(arguments, schema)
    assert arguments == arguments_for(schema, text)


def test_a_test_scripts_answers_per_conversation_and_others_get_the_shared_ones() -> None:
    client = ScriptedClient(["shared"], scripts={"a": ["for a, first"]})
    client.script("a", "for a, second")
    client.script("b", "for b")
    ask = {cid: ConversationContext(cid) for cid in ("a", "b", "c")}
    for c in ask.values():
        c.add_user_message("hi")
    assert client.respond(ask["b"]).text == "for b"
    assert client.respond(ask["c"]).text == "shared"
    assert client.respond(ask["a"]).text == "for a, first"
    assert client.respond(ask["a"]).text == "for a, second"
    assert client.respond(ask["b"]).text.startswith("Answer 1")  # its script ran out


def test_scripted_tool_calls_is_exported_beside_scripted_client() -> None:
    assert "scripted_tool_calls" in parlour.runtime.__all__
    assert parlour.runtime.ScriptedClient is ScriptedClient
    call = parlour.runtime.scripted_tool_calls(("get_weather", {"city": "Oslo"}))
    [use] = ScriptedClient([call]).respond(asked("hi", get_weather)).tool_uses
    assert json.loads(use.input_json) == {"city": "Oslo"}
