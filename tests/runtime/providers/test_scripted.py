"""The scripted model: declarations resolved as the real clients resolve them, and scripted
answers that call tools with arguments."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parlour.runtime import (
    ConversationContext,
    Depth,
    OutgoingMessage,
    StopReason,
    Turn,
    TurnRole,
)
from parlour.runtime import blocks as b
from parlour.runtime.blocks import ContentBlock, ToolDefinitionBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.errors import UncorrectableLLMError
from parlour.runtime.providers import AnthropicClient
from parlour.runtime.providers._scripted import _Tallies, _Tally, _words
from parlour.runtime.testing import ScriptedClient, fake_spec, scripted_tool_calls

SEARCH = ToolDefinitionBlock(name="search", description="Searches", schema_json="{}")


def refusal(client: object, c: ConversationContext) -> str:
    with pytest.raises(UncorrectableLLMError) as caught:
        client.respond(c)  # type: ignore[attr-defined]
    return str(caught.value)


@pytest.mark.parametrize("declared", ["nothing", "depth only", "output only"])
def test_without_defaults_an_undeclared_seat_is_refused_as_a_real_client_refuses_it(
    declared: str,
) -> None:
    def seat() -> ConversationContext:
        c = ConversationContext("s-1")
        if declared == "depth only":
            c.depth = Depth.IMMEDIATE
        if declared == "output only":
            c.output_declaration = 1_000
        c.add_user_message("hi")
        return c

    spec = fake_spec(id="claude-t", provider="anthropic")
    real = AnthropicClient(spec, client=object())
    scripted = ScriptedClient(spec=spec, depth=None, output_declaration=None)
    message = refusal(real, seat())
    assert refusal(scripted, seat()) == message
    assert "declares no" in message


def test_a_scripted_answer_calls_tools_with_arguments() -> None:
    c = ConversationContext("s-2")
    c.add_tool(SEARCH)
    c.add_user_message("Find kettles.")
    script = [scripted_tool_calls(("search", {"q": "kettle", "limit": 3}), text="Looking.")]
    client = ScriptedClient(script)
    response = client.respond(c)
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.text == "Looking."
    assert response.tool_uses == [
        ToolUseBlock(
            id="toolu_0001_1", name="search", input_json=json.dumps({"q": "kettle", "limit": 3})
        )
    ]
    c.add_message(response.to_message())
    c.add_message(
        OutgoingMessage(blocks=[ToolResultBlock(tool_use_id="toolu_0001_1", content="ok")])
    )
    c.add_user_message("more")
    assert client.respond(c).text.startswith("Answer 2")  # the script ran out: the default


def test_a_scripted_call_to_a_tool_never_announced_is_refused() -> None:
    c = ConversationContext("s-3")
    c.add_user_message("Find kettles.")
    with pytest.raises(ValueError, match="calls search, which the conversation never announced"):
        ScriptedClient([scripted_tool_calls(("search", {}))]).respond(c)


def test_scripted_results_answer_through_the_default_policy() -> None:
    c = ConversationContext("s-4")
    c.add_tool(SEARCH)
    c.add_user_message("go")
    client = ScriptedClient([scripted_tool_calls(("search", {"q": "x"}))])
    c.add_message(client.respond(c).to_message())
    c.add_message(
        OutgoingMessage(blocks=[ToolResultBlock(tool_use_id="toolu_0001_1", content="3 hits")])
    )
    assert client.respond(c).text == "The tools answered: toolu_0001_1 returned 3 hits."


def test_the_scripted_client_calls_a_named_tool_then_reports_its_result() -> None:
    c = ConversationContext("c1")
    c.add_tool(b.ToolDefinitionBlock(name="get_time", description="now"))
    c.add_user_message("please use get_time")
    client = ScriptedClient()
    first = client.respond(c)
    assert first.stop_reason is StopReason.TOOL_USE
    [call] = first.tool_uses
    assert call.name == "get_time"
    c.add_message(first.to_message())
    c.add_message(OutgoingMessage(blocks=[b.ToolResultBlock(tool_use_id=call.id, content="12:00")]))
    second = client.respond(c)
    assert second.stop_reason is StopReason.END_TURN and "12:00" in second.text
    assert second.end_time is not None and second.start_time is not None
    assert ScriptedClient(["scripted answer"]).respond(c).text == "scripted answer"


# -- the default policy's counts, kept per conversation ---------------------------------------

_TEXTS = [b.TextBlock(text="hello"), b.TextBlock(text="a longer line of text")]
_ANNOUNCED = [SEARCH, ToolDefinitionBlock(name="search", description="Searches better")]
_SHAPES: list[list[ContentBlock]] = [[_TEXTS[0]], [_TEXTS[1], _ANNOUNCED[0]], [_ANNOUNCED[1]], []]
_POOL = [Turn(role=role, blocks=blocks) for role in TurnRole for blocks in _SHAPES]
_EDITS = st.lists(
    st.tuples(st.sampled_from(["grow", "edit", "drop", "again"]), st.sampled_from(_POOL)),
    min_size=1,
    max_size=10,
)


@given(_EDITS, st.lists(st.sampled_from(["c", "d"]), min_size=10, max_size=10))
def test_property_the_kept_counts_equal_counts_made_afresh_after_any_edit(
    edits: list[tuple[str, Turn]], conversations: list[str]
) -> None:
    """Two conversations edited in any interleaving: each one's kept counts are its own
    (a tool one announces never shows in the other's, nor in a fresh tally's)."""
    tallies, histories = _Tallies(), {"c": list[Turn](), "d": list[Turn]()}
    for (edit, turn), cid in zip(edits, conversations, strict=False):
        turns = histories[cid]
        if edit == "grow":
            turns = [*turns, turn]
        elif edit == "edit" and turns:
            turns = [turn, *turns[1:]]
        elif edit == "drop":
            turns = turns[1:]
        histories[cid] = turns
        kept, afresh = tallies.of(cid, turns), _Tally([], 0, 0, {}).extended(turns)
        assert (kept.answered, kept.chars) == (afresh.answered, afresh.chars)
        assert list(kept.announced.items()) == list(afresh.announced.items())
    assert _Tallies().of("e", []).announced == {}


def test_a_rewritten_history_is_counted_again_in_the_usage_and_the_turn_number() -> None:
    c = ConversationContext("s-5")
    kept = ScriptedClient()
    for text in ("one", "two", "three"):
        c.add_user_message(text)
        c.add_message(kept.respond(c).to_message())
    c.messages[1:5] = []  # one answer left
    c.messages[0].blocks = [b.TextBlock(text="a much longer first question than before")]
    c.add_user_message("four")
    answer, afresh = kept.respond(c), ScriptedClient().respond(c)
    assert answer.usage == afresh.usage and answer.text == afresh.text
    assert answer.text.startswith("Answer 2:")


def _words_by_split(text: str) -> list[str]:
    words = text.split(" ")
    return [word if at == 0 else " " + word for at, word in enumerate(words) if word or at]


@given(st.text(alphabet=st.sampled_from(["a", "é", " ", "\x00", "\n"]), max_size=30))
def test_property_the_scripted_deltas_are_the_words_each_after_the_first_with_its_space(
    text: str,
) -> None:
    deltas = _words(text)
    assert deltas == _words_by_split(text)
    assert "".join(deltas) == text and "" not in deltas


def test_respond_and_stream_hand_out_the_same_deltas_and_answer() -> None:
    def fresh() -> ConversationContext:
        c = ConversationContext("c-deltas")
        c.add_message(OutgoingMessage("what should I read next about actors?"))
        return c

    seen: list[str] = []
    answered = ScriptedClient().respond(fresh(), on_text=seen.append)
    stream = ScriptedClient().stream(fresh())
    streamed = list(stream)
    assert seen == streamed == _words(answered.text) and len(seen) > 3
    assert stream.response.text == answered.text == "".join(seen)
