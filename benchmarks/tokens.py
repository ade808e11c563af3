"""Token counting throughput: ``ConversationContext.get_total_tokens`` on a 200-message
conversation, with a cold memo (every text encoded) and a warm one (every text a memo hit),
against a bare ``encode_ordinary`` of the same text concatenated, measured in the same run.

Run: ``python benchmarks/tokens.py [--runs N]``. The ratio column is each case's tokens per
second divided by the bare encode's: above 1 is faster than encoding the text once.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from parlour.runtime import ConversationContext, IncomingMessage, counter_for
from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock

_WORDS = [
    "the",
    "model",
    "reads",
    "every",
    "turn",
    "of",
    "the",
    "conversation",
    "and",
    "the",
    "runtime",
    "counts",
    "its",
    "tokens",
    "before",
    "each",
    "call",
    "so",
    "that",
    "compaction",
    "starts",
    "in",
    "time",
    "artifact",
    "registry",
    "summary",
    "cache",
    "prompt",
    "prefix",
    "provider",
    "tool",
    "result",
    "search",
    "documents",
    "2026",
    "json",
    "{}",
    "[]",
    "ünïcode",
]


class _Spec:
    encoding: str | None = None


def build_conversation(messages: int = 200, seed: int = 7) -> ConversationContext:
    """A deterministic conversation: an objective, then alternating user and assistant
    turns of 40-160 words, every tenth assistant turn calling a tool."""
    rng = random.Random(seed)
    c = ConversationContext("bench")
    c.put_main_objective("task", " ".join(rng.choices(_WORDS, k=300)))
    for i in range(messages):
        text = " ".join(rng.choices(_WORDS, k=rng.randint(40, 160)))
        if i % 2 == 0:
            c.add_user_message(text)
            continue
        blocks: list[TextBlock | ToolUseBlock | ToolResultBlock] = [TextBlock(text=text)]
        if i % 10 == 1:
            blocks.append(ToolUseBlock(id=f"c{i}", name="search", input_json='{"q": "tokens"}'))
        c.add_message(IncomingMessage(None, blocks))
    return c


def _time(fn: Callable[[], object], runs: int, before: Callable[[], None]) -> float:
    samples = []
    for _ in range(runs):
        before()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()

    spec = _Spec()
    conversation = build_conversation()
    counter = counter_for(None)
    tokens = conversation.get_total_tokens(spec)
    text = "\n\n".join(
        [str(v) for v in conversation.get_main_objective().values()]
        + [m.raw_content for m in conversation.messages]
    )
    bare_tokens = len(counter.encoding.encode_ordinary(text))

    def nothing() -> None:
        return None

    bare = _time(lambda: counter.encoding.encode_ordinary(text), args.runs, nothing)
    cold = _time(lambda: conversation.get_total_tokens(spec), args.runs, counter.clear_memo)
    conversation.get_total_tokens(spec)
    warm = _time(lambda: conversation.get_total_tokens(spec), args.runs, nothing)

    print(
        f"encoding {counter.name}; 200 messages; {tokens} tokens estimated, "
        f"{bare_tokens} in the bare concatenation; median of {args.runs} runs"
    )
    print(f"{'case':<28}{'ms':>10}{'tokens/s':>16}{'vs bare':>10}")
    base_rate = bare_tokens / bare
    for name, seconds, count in (
        ("bare encode (baseline)", bare, bare_tokens),
        ("get_total_tokens, cold memo", cold, tokens),
        ("get_total_tokens, warm memo", warm, tokens),
    ):
        rate = count / seconds
        print(f"{name:<28}{seconds * 1000:>10.3f}{rate:>16,.0f}{rate / base_rate:>10.2f}")


if __name__ == "__main__":
    main()
