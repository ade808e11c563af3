"""``TurnPlan``: everything one turn needs, filled once at its start; ``Steps``, the type
of a turn written as a generator of effects (``_turn.turn_steps``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any

from parlour.runtime import ConversationContext, LLMClient, Message, ResponseHandler, Usage

from ._effects import Compact, RetryPolicy, Save
from ._events import Reply
from ._joiners import AgentThinker, TurnState
from ._ledger import UsageLedger
from ._limits import Limits
from ._tools import ToolBox

__all__ = ["NO_USAGE", "Steps", "TurnPlan"]

NO_USAGE = Usage()  # a turn's usage before its first call


class TurnPlan:
    """Everything one turn needs: the agent's settings (read from ``seat``, anything with
    the ``Agent``'s attributes of these names), the chat's thinker, ledger and deps, and the
    turn's own state; made by ``Chat`` for each turn (by hand, no keyword binding: it is
    on every turn's path)."""

    __slots__ = (
        "_save",
        "added",
        "approval",
        "async_sleep",
        "before_model_call",
        "call_scope",
        "client",
        "decided",
        "deltas",
        "deps",
        "handler",
        "ledger",
        "limits",
        "max_rounds",
        "model_timeout_s",
        "objective",
        "retry",
        "sleep",
        "start",
        "state",
        "thinker",
        "tool_timeout_s",
        "tools",
        "tracer",
        "turn_id",
        "turn_start",
        "usage",
        "window",
    )
    client: LLMClient
    tools: ToolBox
    objective: str | None
    max_rounds: int
    limits: Limits
    retry: RetryPolicy
    tool_timeout_s: float
    model_timeout_s: float
    sleep: Callable[[float], None]
    async_sleep: Callable[[float], Awaitable[None]]
    before_model_call: Callable[[ConversationContext, UsageLedger], None] | None
    window: Callable[[ConversationContext], Compact | None] | None
    handler: ResponseHandler | None

    def __init__(
        self,
        seat: Any,
        thinker: AgentThinker,
        state: TurnState,
        ledger: UsageLedger,
        deltas: bool,  # the driver's caller reads text deltas (False: only the reply)
        tracer: Any,  # the OpenTelemetry tracer, looked up once per turn (None: no spans)
        deps: Any = None,  # the chat's dependencies, for tools that take a ToolContext
    ) -> None:
        self.client, self.tools, self.objective = seat.client, seat.tools, seat.objective
        self.max_rounds, self.retry, self.limits = seat.max_rounds, seat.retry, seat.limits
        self.turn_start = 0  # the ledger entry the turn's spending counts from: set at obtain
        self.tool_timeout_s, self.model_timeout_s = seat.tool_timeout_s, seat.model_timeout_s
        self.sleep, self.async_sleep = seat.sleep, seat.async_sleep
        self.before_model_call, self.window = seat.before_model_call, seat.window
        self.handler = seat.handler
        self.approval = seat.approval  # ``_approvals.Approval``; None: no call needs one
        self.thinker, self.state, self.ledger = thinker, state, ledger
        self.deltas, self.tracer = deltas, tracer
        self.deps = deps
        self.call_scope: Any = None  # ``_call_context.CallScope``: made when a tool takes one
        self.turn_id = ""  # the turn's id (``_record``), set as the turn starts
        self.start = 0  # the index of the turn's first message, for its open-turn record
        self.decided: Any = None  # a decided turn's record: later records keep its approvals
        self.added: list[Message] = []
        self.usage: Usage = NO_USAGE  # the turn's calls, summed
        self._save: Save | None = None

    def saving(self, context: ConversationContext) -> Save:
        """The ``Save`` of ``context`` (one per turn: effects carry data only)."""
        save = self._save
        if save is None or save.context is not context:
            save = self._save = Save(context)
        return save


Steps = Generator[Any, Any, Reply]
