"""Whatever the model asks for, a finished turn leaves every tool call answered exactly once,
in the order asked, and the conversation stored as the turn saw it."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.actors import Agent, ConversationService
from parlour.runtime import Depth, OutputSize, ScriptedClient

from .agent_helpers import answerable, calls, stored, stored_calls, stored_results


def echo(text: str) -> str:
    """Echo the text."""
    return text


def fail(text: str) -> str:
    """Always raises."""
    raise ValueError(text)


CALL = st.sampled_from(
    [("echo", {"text": "hi"}), ("fail", {"text": "no"}), ("missing", {}), ("echo", {"x": 1})]
)
ANSWERS = st.lists(st.lists(CALL, min_size=1, max_size=3), max_size=4)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(answers=ANSWERS, max_rounds=st.integers(1, 5))
def test_every_tool_call_is_answered_once_in_order(
    service: ConversationService, answers: list[list[tuple[str, dict[str, Any]]]], max_rounds: int
) -> None:
    script = [calls(*pairs, round_=k) for k, pairs in enumerate(answers, 1)]
    agent = Agent(
        ScriptedClient(script),
        tools=[echo, fail],
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
        max_rounds=max_rounds,
    )
    chat = agent.chat(service, user_id="alice")
    reply = chat.send("Go")
    snapshot = stored(service, chat.conversation_id, "alice")
    asked = [c.id for c in stored_calls(snapshot)]
    assert len(set(asked)) == len(asked)
    assert [r.tool_use_id for r in stored_results(snapshot)] == asked
    assert answerable(snapshot)
    model_calls = min(len(answers) + 1, max_rounds)
    assert len(chat.usage()) == model_calls
    assert reply.rounds_exhausted == (len(answers) >= max_rounds)
    assert len(snapshot.messages) == len(reply.messages)
