"""A running turn's inbox as a state machine: every accepted offer is taken exactly once, in
arrival order; once closed (explicitly, or by a look that found it empty) it refuses offers."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from parlour.actors.agent._joiners import TurnState


class Inbox(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = TurnState()
        self.pending: list[str] = []
        self.closed = False
        self.accepted: list[str] = []
        self.taken: list[str] = []
        self.n = 0

    @rule()
    def offer(self) -> None:
        self.n += 1
        text = f"offer {self.n}"
        accepted = self.state.offer(text)
        assert accepted == (not self.closed)
        if accepted:
            self.accepted.append(text)
            self.pending.append(text)

    @rule(close_if_empty=st.booleans())
    def take(self, close_if_empty: bool) -> None:
        got = self.state.take(close_if_empty=close_if_empty)
        assert got == self.pending
        if close_if_empty and not got:
            self.closed = True
        self.taken += got
        self.pending = []

    @rule()
    def close(self) -> None:
        got = self.state.close()
        assert got == self.pending
        self.taken += got
        self.pending, self.closed = [], True

    @invariant()
    def nothing_lost_or_doubled(self) -> None:
        assert self.taken + self.pending == self.accepted


TestInbox = Inbox.TestCase
