"""Render cost: ``prepare_messages_for_llm`` on a 200-message conversation with 20 tools.

What it measures, in one run on this machine:

- ``plain copy``: the floor, a loop that only copies each message into a ``Turn`` (role
  lookup, a list copy of the blocks). Every ratio below is against this number.
- ``prepare, prose``: a frozen conversation whose asks carry no response handler.
- ``prepare, thinking asks``: every user turn asked through a ``ThinkingResponseHandler``,
  so every asking turn gets its instructions appended at render.
- ``prepare after N renders``: the same render after N earlier renders, to show that the
  work of a render does not grow with the number of renders before it.

Run it as ``python benchmarks/render.py``; it prints µs per call. The cases are measured
interleaved, round after round, and each reports its best round: on a shared machine the
minimum is the number least disturbed by other work, and interleaving exposes every case to
the same disturbances, so the ratios hold even when the absolute numbers wander.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable

import msgspec

from parlour.runtime import (
    ConversationContext,
    GenericContentFormatter,
    IncomingMessage,
    OutgoingMessage,
    ThinkingResponseHandler,
    Turn,
    TurnRole,
)
from parlour.runtime.blocks import (
    ContentBlock,
    TextBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)

MESSAGES = 200
TOOLS = 20
ROUNDS = 30
CALLS = 50


class Answer(msgspec.Struct):
    summary: str
    confidence: float


def build(asks_with_handler: bool) -> ConversationContext:
    """A conversation of MESSAGES alternating turns, TOOLS declared tools, one render done."""
    c = ConversationContext("bench")
    c.put_main_objective("task", "Answer the user's questions using the tools. " * 10)
    c.add_tools(
        ToolDefinitionBlock(name=f"tool_{i}", description=f"Tool number {i}.", schema_json="{}")
        for i in range(TOOLS)
    )
    handler = ThinkingResponseHandler(Answer) if asks_with_handler else None
    for i in range(MESSAGES // 2):
        question = f"Question {i}: what does tool_{i % TOOLS} say? " * 4
        blocks: list[ContentBlock] = [TextBlock(text=question)]
        if i:
            blocks.insert(0, ToolResultBlock(tool_use_id=f"call-{i - 1}", content='{"ok":1}'))
        c.add_message(OutgoingMessage(blocks=blocks, response_handler=handler))
        c.add_message(
            IncomingMessage(
                blocks=[
                    TextBlock(text=f"Calling tool_{i % TOOLS}."),
                    ToolUseBlock(id=f"call-{i}", name=f"tool_{i % TOOLS}", input_json="{}"),
                ]
            )
        )
    c.prepare_messages_for_llm(GenericContentFormatter())
    return c


_ROLES = {"user": TurnRole.USER, "assistant": TurnRole.ASSISTANT}


def plain_copy(c: ConversationContext) -> list[Turn]:
    return [Turn(role=_ROLES[m.role], blocks=list(m.blocks), cache=m.cache) for m in c.messages]


def interleaved_best_us(cases: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Best µs per call of each case, the cases timed in turn within every round."""
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(ROUNDS):
        for name, call in cases.items():
            seconds = timeit.timeit(call, number=CALLS)
            best[name] = min(best[name], seconds / CALLS * 1e6)
    return best


def main() -> None:
    formatter = GenericContentFormatter()
    prose = build(asks_with_handler=False)
    asks = build(asks_with_handler=True)
    seasoned = build(asks_with_handler=False)
    for _ in range(10_000):
        seasoned.prepare_messages_for_llm(formatter)
    assert len(seasoned.messages) == MESSAGES  # reconciliation appended nothing
    best = interleaved_best_us(
        {
            "plain copy (baseline)": lambda: plain_copy(prose),
            "prepare, prose": lambda: prose.prepare_messages_for_llm(formatter),
            "prepare, thinking asks": lambda: asks.prepare_messages_for_llm(formatter),
            "prepare, prose, after 10k renders": (
                lambda: seasoned.prepare_messages_for_llm(formatter)
            ),
        }
    )
    baseline = best["plain copy (baseline)"]
    print(f"{MESSAGES} messages, {TOOLS} tools; best of {ROUNDS} rounds of {CALLS} calls")
    print(f"{'case':<36}{'µs/call':>10}{'× baseline':>12}")
    for name, us in best.items():
        print(f"{name:<36}{us:>10.1f}{us / baseline:>12.2f}")


if __name__ == "__main__":
    main()
