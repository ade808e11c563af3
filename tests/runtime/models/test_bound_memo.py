"""The conversation's kept bound (``BoundMemo``): whatever happens to the messages between two
checks (appends, edits in place, replaced or removed messages, a compaction rewriting the
list, exact counts, another counter's counts, a forgotten memo), the bound a check returns
is never below the exact count, and while nothing but this conversation's own counting
touched the memos it is exactly the bound a check from scratch computes."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from parlour.runtime import (
    ConversationContext,
    EncodingCounter,
    IncomingMessage,
    Message,
    OutgoingMessage,
    counter_for,
)
from parlour.runtime.blocks import PojoBlock, TextBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.models._tokens import utf8_bound
from tests.runtime._list_changes import LIST_CHANGES


class FakeSpec:
    id = "fake"
    encoding: str | None = None


SPEC = FakeSpec()
_TEXT = st.text(max_size=60)


def _message(kind: int, text: str, n: int) -> Message:
    if kind == 0:
        return OutgoingMessage(text or None, [TextBlock(text=text)] if text else [])
    if kind == 1:
        return IncomingMessage(
            blocks=[TextBlock(text=text), ToolUseBlock(id=f"t{n}", name="f", input_json="{}")]
        )
    if kind == 2:
        return OutgoingMessage(blocks=[ToolResultBlock(tool_use_id=f"t{n}", content=text)])
    return OutgoingMessage(blocks=[PojoBlock(value={"note": text})])  # bounded by its render


class BoundMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.context = ConversationContext("bound")
        self.shared = counter_for(None)
        self.foreign = EncodingCounter(self.shared.encoding)  # memos of its own epoch
        self.tight = True  # only this conversation's own counting touched the memos
        self.made = 0

    @rule(kind=st.integers(0, 3), text=_TEXT)
    def append(self, kind: int, text: str) -> None:
        self.made += 1
        self.context.add_message(_message(kind, text, self.made))

    @precondition(lambda self: self.context.messages)
    @rule(at=st.integers(0, 1000), text=_TEXT)
    def edit_in_place(self, at: int, text: str) -> None:
        messages = self.context.messages
        messages[at % len(messages)].add_text(text + "x")

    @precondition(lambda self: self.context.messages)
    @rule(at=st.integers(0, 1000), kind=st.integers(0, 3), text=_TEXT)
    def replace_one(self, at: int, kind: int, text: str) -> None:
        self.made += 1
        messages = self.context.messages
        messages[at % len(messages)] = _message(kind, text, self.made)

    @precondition(lambda self: self.context.messages)
    @rule()
    def remove_last(self) -> None:
        self.context.messages.pop()

    @precondition(lambda self: self.context.messages)
    @rule(change=st.sampled_from(sorted(LIST_CHANGES)), at=st.integers(0, 9), text=_TEXT)
    def change_the_list_in_place(self, change: str, at: int, text: str) -> None:
        self.made += 1
        LIST_CHANGES[change](self.context.messages, at, _message(0, text, self.made))

    @rule(step=st.integers(1, 3))
    def rewrite_the_list(self, step: int) -> None:
        self.context.messages[:] = self.context.messages[::step]  # as a compaction does

    @rule()
    def check(self) -> None:
        self.context.get_token_bound(SPEC)

    @rule()
    def count_exactly(self) -> None:
        self.context.get_total_tokens(SPEC)
        self.tight = True  # every message now holds its exact count, and the memo knows

    @rule()
    def count_with_another_counter(self) -> None:
        self.foreign.count_messages(self.context.messages, self.context._weighed)
        self.tight = False

    @rule()
    def forget_every_memo(self) -> None:
        self.shared.clear_memo()

    @invariant()
    def never_below_the_exact_count(self) -> None:
        bound = self.context.get_token_bound(SPEC)
        assert bound >= self._exact()
        if self.tight:
            assert bound == self._from_scratch()

    def _exact(self) -> int:
        """The exact count by a counter of its own, every message's memo put back after."""
        messages = self.context.messages
        kept: list[Any] = [m._tokens for m in messages]
        try:
            exact = EncodingCounter(self.shared.encoding)
            return exact.count_messages(messages, self.context._weighed) + self._head(exact)
        finally:
            for m, memo in zip(messages, kept, strict=True):
                m._tokens = memo

    def _head(self, counter: EncodingCounter) -> int:
        return self.context._tally(counter.count, 0)

    def _from_scratch(self) -> int:
        messages = list(self.context.messages)  # a copy: no memo of the conversation's
        bound = self.shared.bound_messages(messages, self.context._weighed)
        return self.context._tally(utf8_bound, bound)


BoundMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
test_the_kept_bound_is_never_below_the_count_and_tight_while_nothing_else_counted = (
    BoundMachine.TestCase
)
