"""Over random conversations with tool calls: compaction at any level never orphans a tool
call or result, keeps what must survive, and never makes a conversation larger."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.runtime import (
    CompactionLevel,
    ContextWindowManager,
    ConversationContext,
    Message,
    OfflineCompactor,
)
from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.testing import fake_spec

from .conftest import answer, ask, declared, prose

SPEC = fake_spec()


@st.composite
def conversations(draw: st.DrawFn) -> ConversationContext:
    """Exchanges of a question, zero to three rounds of tool calls each answered in the next
    message, and a final answer; each message randomly protected; ending on a question,
    on tool results mid-turn, or on an answer."""
    c = declared(ConversationContext("prop"))
    calls = 0
    flag = st.booleans()
    for n in range(draw(st.integers(1, 6))):
        c.add_message(ask(f"Q{n} " + prose(draw(st.integers(1, 60)), n), compactable=draw(flag)))
        for _ in range(draw(st.integers(0, 3))):
            ids = [f"t{calls + k}" for k in range(draw(st.integers(1, 2)))]
            calls += len(ids)
            uses = [ToolUseBlock(id=i, name="search", input_json="{}") for i in ids]
            c.add_message(
                Message(
                    "assistant", None, [TextBlock(text="calling"), *uses], compactable=draw(flag)
                )
            )
            results = [
                ToolResultBlock(tool_use_id=i, content=prose(draw(st.integers(1, 300)), k))
                for k, i in enumerate(ids)
            ]
            c.add_message(Message("user", None, results, compactable=draw(flag)))
        ending = draw(st.sampled_from(["answer", "mid-turn", "last"]))
        if ending != "mid-turn" or n < 2:
            c.add_message(
                answer(f"A{n} " + prose(draw(st.integers(1, 80)), n), compactable=draw(flag))
            )
    if draw(st.booleans()):
        c.add_message(ask("What next?", compactable=draw(flag)))
    return c


def _calls_and_results(messages: list[Message]) -> tuple[list[str], list[str]]:
    uses = [b.id for m in messages for b in m.blocks if isinstance(b, ToolUseBlock)]
    results = [b.tool_use_id for m in messages for b in m.blocks if isinstance(b, ToolResultBlock)]
    return uses, results


def _answered_by_the_next_message(messages: list[Message]) -> bool:
    for index, message in enumerate(messages):
        for block in message.blocks:
            if isinstance(block, ToolResultBlock):
                previous = messages[index - 1].blocks if index else []
                calls = {b.id for b in previous if isinstance(b, ToolUseBlock)}
                if block.tool_use_id not in calls:
                    return False
    return True


def _latest_outgoing(messages: list[Message]) -> Message | None:
    return next((m for m in reversed(messages) if m.role == "user"), None)


@settings(max_examples=60, deadline=None)
@given(conversations(), st.sampled_from(list(CompactionLevel)))
def test_compaction_never_orphans_a_tool_pair_and_keeps_what_must_survive(
    c: ConversationContext, level: CompactionLevel
) -> None:
    before = list(c.messages)
    protected = [m for m in before if not m.compactable]
    latest = _latest_outgoing(before)
    tokens = c.get_total_tokens(SPEC)
    OfflineCompactor(min_result_chars=40).compact(c, level)
    after = c.messages
    uses, results = _calls_and_results(after)
    assert sorted(uses) == sorted(results) and len(set(uses)) == len(uses)
    assert _answered_by_the_next_message(after)
    assert [m for m in after if any(m is p for p in protected)] == protected
    if level is CompactionLevel.LIGHT:
        assert len(after) == len(before)
    if not level.collapses and latest is not None:
        assert any(m is latest for m in after)
    assert c.get_total_tokens(SPEC) <= tokens  # a summary never weighs more than it replaces


@settings(max_examples=40, deadline=None)
@given(conversations())
def test_climbing_the_whole_ladder_never_leaves_a_conversation_larger(
    c: ConversationContext,
) -> None:
    manager = ContextWindowManager(SPEC, comfort_override=1, compactor=OfflineCompactor())
    report = manager.fit(c)
    assert report.levels == tuple(CompactionLevel)  # a one-token window: every rung is tried
    assert all(step.tokens_after <= step.tokens_before for step in report.steps)
    assert manager.measure(c) == report.tokens_after <= report.tokens_before


@settings(max_examples=30, deadline=None)
@given(conversations())
def test_maximum_never_leaves_more_than_aggressive(c: ConversationContext) -> None:
    twin = c.to_snapshot().to_conversation()
    OfflineCompactor(min_result_chars=40).compact(c, CompactionLevel.AGGRESSIVE)
    OfflineCompactor(min_result_chars=40).compact(twin, CompactionLevel.MAXIMUM)
    assert twin.get_total_tokens(SPEC) <= c.get_total_tokens(SPEC)


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_exchanges_partition_the_messages_in_order_and_no_tool_id_spans_two(
    c: ConversationContext,
) -> None:
    from parlour.runtime.compaction._segments import exchanges, tool_ids

    cuts = exchanges(c.messages)
    assert [i for cut in cuts for i in cut] == list(range(len(c.messages)))
    owner = {i: n for n, cut in enumerate(cuts) for i in cut}
    seen: dict[str, int] = {}
    for i, message in enumerate(c.messages):
        for tool_id in tool_ids(message):
            assert seen.setdefault(tool_id, owner[i]) == owner[i]


def test_an_exchange_runs_from_a_question_through_the_final_answer() -> None:
    from parlour.runtime.compaction._segments import exchanges

    from .conftest import call, long_chat

    c = long_chat(3)
    assert exchanges(c.messages) == [range(0, 4), range(4, 8), range(8, 12), range(12, 13)]
    c.add_message(call("toolu_x"))
    assert exchanges(c.messages)[-1] == range(12, 14)
