"""The compaction check on the hot path: ``ContextWindowManager.needs_compaction`` on a
200- and a 2,000-message conversation (questions, tool calls, long tool results, answers),
cold (every per-block count forgotten) and warm (nothing changed since the last check),
against a bare tiktoken ``encode_ordinary`` of the same text concatenated.

Run: ``python benchmarks/compaction.py [--runs N]``. The ratio column is how many times
cheaper than the bare count each case is; the warm check must be at least 20x cheaper at
2,000 messages (the script exits non-zero when it is not). A last table shows one offline
climb of the ladder on the 2,000-message conversation.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable

from parlour.runtime import (
    ContextWindowManager,
    ConversationContext,
    IncomingMessage,
    OfflineCompactor,
    OutgoingMessage,
    counter_for,
)
from parlour.runtime.blocks import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.testing import fake_spec

_PROSE = (
    "the model reads every turn of the conversation and the runtime counts its tokens "
    "before each call so that compaction starts in time artifact registry summary cache "
    "prompt prefix provider tool result search documents 2026 json {} [] ünïcode"
)
_WORDS = _PROSE.split(" ")
REQUIRED_WARM_RATIO = 20.0


def _text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choices(_WORDS, k=rng.randint(low, high)))


def build_conversation(messages: int, seed: int = 7) -> ConversationContext:
    """Exchanges of four messages: a question, a tool call, a long result, an answer."""
    rng = random.Random(seed)
    c = ConversationContext(f"bench-{messages}")
    c.put_main_objective("task", _text(rng, 300, 300))
    for i in range(messages):
        kind = i % 4
        if kind == 0:
            c.add_user_message(_text(rng, 20, 80))
        elif kind == 1:
            blocks: list[ContentBlock] = [
                TextBlock(text="Let me search."),
                ToolUseBlock(id=f"c{i}", name="search", input_json='{"q": "tokens"}'),
            ]
            c.add_message(IncomingMessage(blocks=blocks))
        elif kind == 2:
            result = ToolResultBlock(tool_use_id=f"c{i - 1}", content=_text(rng, 100, 300))
            c.add_message(OutgoingMessage(blocks=[result]))
        else:
            c.add_message(IncomingMessage(blocks=[TextBlock(text=_text(rng, 40, 160))]))
    return c


def _time(fn: Callable[[], object], runs: int, before: Callable[[], None]) -> float:
    samples = []
    for _ in range(runs):
        before()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _concatenated(c: ConversationContext) -> str:
    parts = [str(v) for v in c.get_main_objective().values()]
    for m in c.messages:
        parts.append(m.raw_content)
        parts.extend(b.content for b in m.blocks if isinstance(b, ToolResultBlock))
    return "\n\n".join(parts)


def measure(messages: int, runs: int) -> tuple[float, float, float, int]:
    """Median seconds of the bare count, the cold check and the warm check; the tokens."""
    c = build_conversation(messages)
    manager = ContextWindowManager(fake_spec(), compactor=OfflineCompactor())
    counter = counter_for(fake_spec().encoding)
    text = _concatenated(c)

    def nothing() -> None:
        return None

    bare = _time(lambda: counter.encoding.encode_ordinary(text), runs, nothing)
    cold = _time(lambda: manager.needs_compaction(c), runs, counter.clear_memo)
    manager.needs_compaction(c)
    warm = _time(lambda: manager.needs_compaction(c), runs * 5, nothing)
    return bare, cold, warm, manager.measure(c)


def climb(messages: int) -> None:
    c = build_conversation(messages)
    manager = ContextWindowManager(
        fake_spec(), comfort_override=20_000, compactor=OfflineCompactor()
    )
    start = time.perf_counter()
    report = manager.fit(c, reserve=4_000)
    seconds = time.perf_counter() - start
    print(f"\nOne offline climb on {messages} messages ({seconds * 1000:.0f} ms), window 20,000:")
    print(f"{'level':<12}{'tokens before':>16}{'tokens after':>16}{'calls':>8}")
    for step in report.steps:
        calls = len(step.result.calls)
        print(f"{step.level.value:<12}{step.tokens_before:>16,}{step.tokens_after:>16,}{calls:>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print(f"{'messages':>9}  {'case':<30}{'ms':>10}{'x cheaper than bare':>22}")
    warm_ratio_at_largest = 0.0
    for messages in (200, 2_000):
        bare, cold, warm, tokens = measure(messages, args.runs)
        for name, seconds in (
            (f"bare tiktoken ({tokens:,} tok)", bare),
            ("needs_compaction, cold", cold),
            ("needs_compaction, warm", warm),
        ):
            print(f"{messages:>9}  {name:<30}{seconds * 1000:>10.3f}{bare / seconds:>22.1f}")
        warm_ratio_at_largest = bare / warm
    climb(2_000)
    if warm_ratio_at_largest < REQUIRED_WARM_RATIO:
        print(f"\nFAIL: the warm check is only {warm_ratio_at_largest:.1f}x cheaper at 2,000.")
        sys.exit(1)


if __name__ == "__main__":
    main()
