"""The breakpoint budget as a property over any conversation."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from parlour.runtime import ConversationContext, Depth, OutgoingMessage, WireRequest
from parlour.runtime.blocks import ContentBlock, ImageBlock, SkillBlock, TextBlock, ToolResultBlock
from parlour.runtime.providers import AnthropicClient, build_anthropic_params
from parlour.runtime.testing import fake_spec

# Built once: constructing the first client imports the SDK, which would blow the deadline.
CLIENTS = {
    caching: AnthropicClient(
        fake_spec(id="claude-test", provider="anthropic", supports_prompt_caching=caching),
        client=object(),
    )
    for caching in (False, True)
}
BLOCKS = st.sampled_from(["text", "skill", "image", "result"])


def unchecked_request(c: ConversationContext, client: AnthropicClient) -> WireRequest:
    """``c`` rendered as a request without the template's pairing check: the results below
    answer no call, and the breakpoints are the encoder's own rule."""
    return WireRequest(
        prepared=c.prepare_messages_for_llm(client.formatter, False),
        spec=client.spec,
        depth=Depth.IMMEDIATE,
        output_budget=1_000,
        max_tokens=1_000,
        thinking_active=False,
    )


def block(kind: str, n: int) -> ContentBlock:
    if kind == "text":
        return TextBlock(text=f"t{n}")
    if kind == "skill":
        return SkillBlock(name=f"s{n}", body="b")
    if kind == "image":
        return ImageBlock(data="aGk=", mime_type="image/png")
    return ToolResultBlock(tool_use_id=f"id{n}", content="r")


@given(
    turns=st.lists(st.tuples(st.booleans(), st.lists(BLOCKS, min_size=1, max_size=4)), max_size=9),
    objective=st.booleans(),
    cache_system=st.booleans(),
    caching=st.booleans(),
)
def test_breakpoints_follow_the_budget(
    turns: list[tuple[bool, list[str]]], objective: bool, cache_system: bool, caching: bool
) -> None:
    c = ConversationContext("h-1")
    c.output_declaration, c.depth = 1_000, Depth.IMMEDIATE
    if objective:
        c.put_main_objective("task", "Objective.")
    c.set_cache_main_objective(cache_system)
    for n, (flag, kinds) in enumerate(turns):
        c.add_message(OutgoingMessage(blocks=[block(k, n) for k in kinds], cache=flag))
    body = build_anthropic_params(unchecked_request(c, CLIENTS[caching]))

    system_marked = objective and cache_system and caching
    assert ("cache_control" in json.dumps(body.get("system", []))) is system_marked
    expected: list[int] = []
    budget = 4 - system_marked
    for n, (flag, kinds) in enumerate(turns):
        if caching and flag and budget and any(k in ("text", "skill") for k in kinds):
            expected.append(n)
            budget -= 1
    marked = [
        n
        for n, message in enumerate(body["messages"])
        for part in message["content"]
        if "cache_control" in part
    ]
    assert marked == expected  # at most one per turn, first eligible turns first
    for n in expected:
        first = next(p for p in body["messages"][n]["content"] if p["type"] == "text")
        assert "cache_control" in first
    assert json.dumps(body).count("cache_control") <= 4
