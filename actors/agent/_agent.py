"""The agent host's ``Agent`` (a model, tools, an objective, declarations); ``agent.chat``
opens a ``Chat`` (``_chat.py``, one user's conversation with it), with whole turns from
threads and from asyncio.

    agent = Agent(client, tools=[get_weather], objective="Answer briefly.",
                  output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
    chat = agent.chat(service, user_id="alice")       # a new durable conversation
    reply = chat.send("Weather in Paris?")             # obtain, save, call, tools, save, release
    for event in chat.stream("And tomorrow?"): ...     # the same turn as typed events
    reply = await chat.asend("...")                    # the loop serves other chats meanwhile
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, Self

from parlour.runtime import (
    ConversationContext,
    Depth,
    FunctionTool,
    LLMClient,
    ModelBinding,
    ModelSpec,
    OutputSize,
    PojoResponseHandler,
)
from parlour.runtime.compaction import ContextCompactor, ContextWindowManager
from parlour.runtime.errors import UncorrectableLLMError

from .._service import ConversationService
from ._approvals import NeedsApproval, approval_rule
from ._calls import start_workers
from ._chat import Chat
from ._compactor import default_compactor
from ._effects import Compact, RetryPolicy
from ._ledger import UsageLedger
from ._limits import Limits, UsageLimits
from ._tools import ToolBox, Toolset

__all__ = ["Agent"]

BeforeModelCall = Callable[[ConversationContext, UsageLedger], None]


class Agent:
    """A model with tools, an objective and its declarations, hosted on a service.

    Args:
        client: the model client (``client_for("claude-sonnet-4-5")``, a ``ScriptedClient``).
        tools: annotated functions, sync or async (the docstring describes each), or
            ``FunctionTool``s. They are declared on every turn (add-only).
        objective: the standing instruction (the conversation's system content).
        output, depth: the declarations every turn is sent with (None: the client's
            binding decides, and a client with none refuses the call).
        max_rounds: most model calls answering one user message (at least 1).
        output_type: a msgspec Struct or dataclass the final answer must parse as
            (``reply.output``); a malformed answer is re-asked once.
        tool_timeout_s, model_timeout_s: the most one tool call (it then gets an error
            result) and one model call (a retryable error, retried within the budget) may
            take (on ``send`` a call that streams nothing is bounded by the SDK, given it as
            the request's timeout: actors/agent/PACKAGE.md, "Timeouts").
        retry: backoff for retryable provider errors, within a per-turn budget.
        compactor: writes the summaries when a conversation outgrows its window (by
            default the offline compactor for the scripted model, else summaries by the
            catalog's smallest model of the client's provider, through the client).
        comfort_tokens, compaction_trigger: the seat's comfort window and trigger share
            (None: the model's catalog entry, else the defaults).
        compaction: False turns compaction off (a conversation past the hard context then
            fails at the provider).
        before_model_call: called before every model call with the context and the ledger.
        sleep, async_sleep: how backoff waits; inject them in tests.
        retain: how long an idle conversation stays in memory after a turn.
        turn_limits, chat_limits: the most one turn, and the chat's whole conversation
            (counted from its stored usage ledger, so across restarts), may spend in model
            requests and tokens (``UsageLimits``); a turn that would pass one raises
            ``UsageLimitExceeded`` (see ``parlour.actors.agent._limits``).
        rerun_on_recovery: names of tools safe to run again with the same arguments and
            idempotency key (as ``FunctionTool(..., rerun_on_recovery=True)`` declares one):
            ``Chat.resume`` runs a call of theirs that a crash interrupted again, instead of
            leaving the model its interrupted result.
        toolsets: more tools from elsewhere: MCP servers (``parlour.actors.agent.mcp``'s
            ``MCPServerStdio``, ``MCPServerHTTP``), started and listed at the first turn,
            listed again when the server says its list changed, declared add-only like
            the functions; ``close`` (or leaving ``with agent:``, or the stop of a service
            the agent chatted on) stops them, and a later turn starts them again.
        needs_approval: the calls a person must approve before they run: a set of tool
            names, or a predicate given the tool's name, the arguments' JSON text and the
            call's ``ToolContext`` (True: approval needed); with the tools declared
            ``needs_approval`` themselves. A turn reaching one parks (``Chat.approve``).

    Raises:
        ValueError: ``max_rounds`` is below 1, two tools share a name, ``rerun_on_recovery``
            or ``needs_approval`` names no tool, or the comfort window or the trigger is
            out of range.

    Thread-safety: one agent serves many chats on many threads and loops at once.
    """

    def __init__(
        self,
        client: LLMClient,
        *,
        tools: Iterable[Callable[..., Any] | FunctionTool] = (),
        objective: str | None = None,
        output: OutputSize | int | None = None,
        depth: Depth | None = None,
        max_rounds: int = 8,
        output_type: type | None = None,
        tool_timeout_s: float = 60.0,
        model_timeout_s: float = 600.0,
        retry: RetryPolicy | None = None,
        compactor: ContextCompactor | None = None,
        comfort_tokens: int | None = None,
        compaction_trigger: float | None = None,
        compaction: bool = True,
        before_model_call: BeforeModelCall | None = None,
        sleep: Callable[[float], None] = time.sleep,
        async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        retain: dt.timedelta = dt.timedelta(minutes=5),
        rerun_on_recovery: Iterable[str] = (),
        turn_limits: UsageLimits | None = None,
        chat_limits: UsageLimits | None = None,
        toolsets: Iterable[Toolset] = (),
        needs_approval: Iterable[str] | NeedsApproval | None = None,
    ) -> None:
        if max_rounds < 1:
            raise ValueError(f"An agent needs max_rounds of at least 1, not {max_rounds}.")
        self.client = client
        self.tools = ToolBox(tools, rerun_on_recovery, toolsets)
        self.approval = approval_rule(needs_approval, self.tools.approval, self.tools.tools)
        self.objective = objective
        self.output = output
        self.depth = depth
        self.max_rounds = max_rounds
        scopes = (("turn", turn_limits), ("chat", chat_limits))
        self.limits: Limits = tuple((s, lim) for s, lim in scopes if lim is not None)
        self.handler = PojoResponseHandler(output_type) if output_type is not None else None
        self.tool_timeout_s = tool_timeout_s
        self.model_timeout_s = model_timeout_s
        self.retry = retry or RetryPolicy()
        self.before_model_call = before_model_call
        self.sleep, self.async_sleep = sleep, async_sleep
        self.retain = retain
        # held by the chats on each conversation (weakly here: a host's agent outlives
        # thousands of chats, and a conversation nobody chats on needs no copy)
        self._ledgers: weakref.WeakValueDictionary[str, UsageLedger] = weakref.WeakValueDictionary()
        self._services: list[ConversationService] = []  # whose stop closes the toolsets
        self._lock = threading.Lock()
        self.compaction = compaction
        self.compactor = compactor or default_compactor(client, model_timeout_s)
        self._overrides = (comfort_tokens, compaction_trigger)
        self._windows = {client.spec.id: self._new_window(client.spec)}  # checks the overrides
        start_workers()  # process-wide, once: no turn waits for their threads to start

    def chat(
        self,
        service: ConversationService,
        *,
        user_id: str,
        conversation_id: str | None = None,
        temporary: bool = False,
        deps: Any = None,
    ) -> Chat:
        """A chat for ``user_id``: a new durable conversation (minted), the stored one named
        by ``conversation_id`` (adopted: its first turn fails if no store holds it), or with
        ``temporary`` a conversation that is never persisted. ``deps`` (any object: a
        database handle, a client) reaches every tool call of the chat that takes a
        ``ToolContext``, as ``context.deps``.

        Raises:
            ValueError: both ``conversation_id`` and ``temporary`` are given.
        """
        if conversation_id is not None and temporary:
            raise ValueError(
                f"Conversation {conversation_id} is stored, so it cannot be resumed as temporary."
            )
        if self.tools.toolsets:
            self._close_with(service)
        return Chat(self, service, user_id, conversation_id, temporary, deps)

    def _close_with(self, service: ConversationService) -> None:
        """Close the toolsets when ``service`` stops (registered once per service)."""
        with self._lock:
            if any(seen is service for seen in self._services):
                return
            self._services.append(service)
        service.on_stop.append(self.close)

    def close(self) -> None:
        """Stop the agent's toolsets (an MCP server's process ends, its session closes);
        idempotent. A later turn starts them again."""
        for toolset in self.tools.toolsets:
            toolset.close()

    async def aclose(self) -> None:
        """``close`` on the running loop, never blocking it."""
        for toolset in self.tools.toolsets:
            await toolset.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def ledger(self, conversation_id: str) -> UsageLedger:
        with self._lock:
            return self._ledgers.setdefault(conversation_id, UsageLedger())

    def window(self, context: ConversationContext) -> Compact | None:
        """The compaction before the next model call of ``context`` (its owner's thread), or None:
        compaction off, a bound that encodes nothing proving it fits
        (``ContextWindowManager.surely_fits``, first with the largest reserve any seat has, the
        model's ceiling: no budget resolved far below the window), or no reserve declared yet
        (the model call then refuses or binds the seat, as without compaction)."""
        if not self.compaction:
            return None
        binding = context.model_binding  # resolved: its spec, else the client's
        spec = binding.spec if binding is not None else None
        if spec is None:
            spec = self.client.spec
        manager = self._window(spec)
        if manager.surely_fits(context, spec.max_output_tokens):
            return None  # far below the window: nothing to measure, nothing to climb
        try:
            reserve = ModelBinding.of(context).output_reserve(spec)
        except UncorrectableLLMError:
            return None
        if manager.surely_fits(context, reserve):
            return None
        return Compact(context, manager, reserve)

    def window_comfort(self) -> int | None:
        """The seat's comfort window override (None: the catalog entry's or the default)."""
        return self._overrides[0]

    def _window(self, spec: ModelSpec) -> ContextWindowManager:
        manager = self._windows.get(spec.id)
        if manager is None:
            manager = self._windows.setdefault(spec.id, self._new_window(spec))
        return manager

    def _new_window(self, spec: ModelSpec) -> ContextWindowManager:
        """A manager for ``spec``, its tokenizer loaded now (the first count loads the
        encoding, a few hundred milliseconds that no turn should wait for)."""
        comfort, trigger = self._overrides
        manager = ContextWindowManager(spec, comfort, trigger, self.compactor)
        if self.compaction:
            warm = ConversationContext()
            warm.add_user_message("warm")
            manager.measure(warm)
        return manager
