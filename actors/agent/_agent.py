"""The agent host: ``Agent`` (a model, tools, an objective, declarations) and ``Chat`` (one
user's conversation with it), with whole turns from threads and from asyncio.

    agent = Agent(client, tools=[get_weather], objective="Answer briefly.",
                  output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
    chat = agent.chat(service, user_id="alice")       # a new durable conversation
    reply = chat.send("Weather in Paris?")             # obtain, save, call, tools, save, release
    for event in chat.stream("And tomorrow?"): ...     # the same turn as typed events
    reply = await chat.asend("...")                    # never blocks the event loop
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

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
from parlour.runtime.blocks import ContentBlock
from parlour.runtime.compaction import (
    ContextCompactor,
    ContextWindowManager,
    LLMContextCompactor,
    compactor_for,
    summary_model,
)
from parlour.runtime.errors import IllegalStateError, UncorrectableLLMError

from .._gate import gating, turn_gate
from .._service import ConversationService
from ._calls import start_pools
from ._drive import drive, drive_async, run
from ._effects import Compact, RetryPolicy
from ._events import AgentEvent, Reply, TurnDone
from ._joiners import AgentThinker
from ._ledger import LedgerEntry, UsageLedger, decode_entries
from ._otel import tracer, turn_span
from ._tools import ToolBox
from ._turn import TurnPlan, turn_steps

__all__ = ["Agent", "Chat"]

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
            take, on both paths.
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

    Raises:
        ValueError: ``max_rounds`` is below 1, two tools share a name, or the comfort
            window or the trigger is out of range.

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
    ) -> None:
        if max_rounds < 1:
            raise ValueError(f"An agent needs max_rounds of at least 1, not {max_rounds}.")
        self.client = client
        self.tools = ToolBox(tools)
        self.objective = objective
        self.output = output
        self.depth = depth
        self.max_rounds = max_rounds
        self.handler = PojoResponseHandler(output_type) if output_type is not None else None
        self.tool_timeout_s = tool_timeout_s
        self.model_timeout_s = model_timeout_s
        self.retry = retry or RetryPolicy()
        self.before_model_call = before_model_call
        self.sleep, self.async_sleep = sleep, async_sleep
        self.retain = retain
        self._ledgers: dict[str, UsageLedger] = {}
        self._lock = threading.Lock()
        self.compaction = compaction
        self.compactor = compactor or _default_compactor(client)
        self._overrides = (comfort_tokens, compaction_trigger)
        self._windows = {client.spec.id: self._new_window(client.spec)}  # checks the overrides
        start_pools()  # process-wide, once: no turn waits for their threads to start

    def chat(
        self,
        service: ConversationService,
        *,
        user_id: str,
        conversation_id: str | None = None,
        temporary: bool = False,
    ) -> Chat:
        """A chat for ``user_id``: a new durable conversation (minted), the stored one named
        by ``conversation_id`` (adopted: its first turn fails if no store holds it), or with
        ``temporary`` a conversation that is never persisted.

        Raises:
            ValueError: both ``conversation_id`` and ``temporary`` are given.
        """
        if conversation_id is not None and temporary:
            raise ValueError(
                f"Conversation {conversation_id} is stored, so it cannot be resumed as temporary."
            )
        return Chat(self, service, user_id, conversation_id, temporary)

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


class Chat:
    """One user's conversation with an agent; one turn at a time.

    Thread-safety: a chat may be used from any thread or loop, one turn at a time; a second
    turn started while one runs raises ``IllegalStateError``.
    """

    def __init__(
        self,
        agent: Agent,
        service: ConversationService,
        user_id: str,
        conversation_id: str | None,
        temporary: bool,
    ) -> None:
        self.agent = agent
        self.service = service
        self.thinker = AgentThinker(
            user_id,
            depth=agent.depth,
            output_declaration=agent.output,
            retain_duration=agent.retain,
        )
        if conversation_id is not None:
            self.thinker.set_conversation_id(conversation_id)
        elif not temporary:
            self.thinker.mint_conversation_id()
        self.temporary = temporary
        self._busy = threading.Lock()
        self._ledger = agent.ledger(self.conversation_id)  # its id is fixed from here on
        # ``send`` holds the process's turn gate where every wait lets it go (see _gate.py)
        gated = gating(service.store, service.session)
        self._gate: Callable[[], AbstractContextManager[None]] = (
            turn_gate.held if gated else contextlib.nullcontext
        )

    @property
    def conversation_id(self) -> str:
        return self.thinker.conversation_id

    @property
    def user_id(self) -> str:
        return self.thinker.user_id

    @property
    def durable(self) -> bool:
        """True when every turn is saved to a persistent store."""
        return not self.temporary and self.service.store is not None

    def usage(self) -> list[LedgerEntry]:
        """The conversation's ledger: every model call's usage (the summary calls of
        compactions included), every compaction, as saved with the conversation; after a
        restart, read from the store until this process runs a turn on it.

        Raises:
            PermissionError: the stored conversation belongs to another user.
        """
        store = self.service.store
        if self._ledger.seeded or self.temporary or store is None:
            return self._ledger.entries()
        snapshot = store.load(self.conversation_id, self.user_id)
        return decode_entries(snapshot.usage) if snapshot is not None else []

    # -- from threads ---------------------------------------------------------------------------

    def send(self, text: str, attachments: Sequence[ContentBlock] = ()) -> Reply:
        """One whole turn; blocks this thread until it ends.

        Raises:
            TurnCancelledError: ``force_release`` cancelled it (after its boundary save).
            ConversationUnavailableError, PermissionError: it could not be obtained.
            RetryableLLMError, UncorrectableLLMError: the model failed it (after the save).
            IllegalStateError: a turn is already running on this chat.
        """
        plan = self._begin(deltas=False)
        try:
            with self._gate(), turn_span(plan.tracer, self.thinker):
                reply = run(turn_steps(plan, text, attachments), plan, self.service)
            self._done(plan, reply)
            return reply
        finally:
            self._end()

    def stream(
        self, text: str, attachments: Sequence[ContentBlock] = ()
    ) -> Generator[AgentEvent, None, None]:
        """One whole turn as its events, ending with ``TurnDone``; raises what ``send``
        raises. Closing the iterator early cancels the turn (saved and released first)."""
        return self._events(text, attachments, deltas=True)

    def _events(
        self, text: str, attachments: Sequence[ContentBlock], *, deltas: bool
    ) -> Generator[AgentEvent, None, None]:
        """The turn's events; without ``deltas`` no ``TextDelta`` is yielded (joiners
        still get them), for a caller that reads only the reply."""
        plan = self._begin(deltas)
        try:
            with turn_span(plan.tracer, self.thinker):
                reply = yield from drive(turn_steps(plan, text, attachments), plan, self.service)
            yield self._done(plan, reply)
        finally:
            self._end()

    # -- from asyncio ---------------------------------------------------------------------------

    async def asend(self, text: str, attachments: Sequence[ContentBlock] = ()) -> Reply:
        """``send`` on the running loop, never blocking it. Cancelling the awaiting task
        cancels the turn (saved and released first) and raises ``CancelledError``."""
        return await self._arun(text, attachments, lambda event: None)

    async def astream(
        self, text: str, attachments: Sequence[ContentBlock] = ()
    ) -> AsyncIterator[AgentEvent]:
        """``stream`` on the running loop. Closing or cancelling the iteration cancels the
        turn (saved and released before the close returns)."""
        queue: asyncio.Queue[AgentEvent] = asyncio.Queue()
        task = asyncio.ensure_future(self._arun(text, attachments, queue.put_nowait))
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                    continue
                getter.cancel()
                while not queue.empty():  # the turn's TurnDone last, when it succeeded
                    yield queue.get_nowait()
                task.result()  # raises what the turn raised
                return
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait([task])

    async def _arun(
        self, text: str, attachments: Sequence[ContentBlock], emit: Callable[[AgentEvent], None]
    ) -> Reply:
        plan = self._begin()
        try:
            with turn_span(plan.tracer, self.thinker):
                steps = turn_steps(plan, text, attachments)
                reply = await drive_async(steps, plan, self.service, emit)
            emit(self._done(plan, reply))
            return reply
        finally:
            self._end()

    # -- the turn's frame -----------------------------------------------------------------------

    def _begin(self, deltas: bool = True) -> TurnPlan:
        if not self._busy.acquire(blocking=False):
            raise IllegalStateError(
                f"A turn is already running on conversation {self.conversation_id}; wait for "
                "it to end, or offer the message to it with service.offer."
            )
        thinker = self.thinker
        return TurnPlan(self.agent, thinker, thinker.begin_turn(), self._ledger, deltas, tracer())

    def _done(self, plan: TurnPlan, reply: Reply) -> TurnDone:
        """The turn's ``TurnDone``, published (numbered) to its followers."""
        return plan.state.publish(TurnDone(reply=reply))

    def _end(self) -> None:
        self.thinker.end_turn()
        self._busy.release()


def _default_compactor(client: LLMClient) -> ContextCompactor:
    """``compactor_for(client)``, with an async summary call beside the sync one for a real
    client, so a turn on an event loop makes a level's summaries concurrently on the loop."""
    compactor = compactor_for(client)
    if compactor.can_await:
        return compactor
    model = summary_model(client.spec)

    def complete(prompt: str) -> Any:
        return client.respond(ConversationContext.single_turn(model, prompt, _SUMMARY))

    async def acomplete(prompt: str) -> Any:
        return await client.arespond(ConversationContext.single_turn(model, prompt, _SUMMARY))

    return LLMContextCompactor(complete, acomplete=acomplete, model_id=model.id)


_SUMMARY = 2_000  # a summary call's output backstop
