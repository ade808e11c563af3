"""``Chat``: one user's conversation with an agent, whole turns from threads and from
asyncio, and ``Seat``, what a chat needs of its agent (``Agent`` is one).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from parlour.runtime import ConversationContext, Depth, OutputSize
from parlour.runtime.blocks import ContentBlock
from parlour.runtime.errors import IllegalStateError, StaleVersionError

from .._gate import gating, turn_gate
from .._service import ConversationService
from ._approvals import DECIDE_ATTEMPTS, checked_decision, pending_of
from ._drive import drive, drive_async, run
from ._effects import Compact
from ._events import AgentEvent, PendingApproval, Reply, TurnDone
from ._history import HistoryMessage, ahistory, history, stopped_early
from ._joiners import AgentThinker
from ._ledger import LedgerEntry, UsageLedger, decode_entries
from ._otel import tracer, turn_span
from ._plan import TurnPlan
from ._tools import ToolBox
from ._turn import decision_steps, turn_steps

__all__ = ["Chat", "Seat"]

_HELD = turn_gate.held  # one bound method for every chat, not one each


class Seat(Protocol):
    """What a chat needs of its agent: its declarations and retention, a ledger per
    conversation, and the settings a turn reads (``TurnPlan``)."""

    depth: Depth | None
    output: OutputSize | int | None
    retain: dt.timedelta
    tools: ToolBox

    def ledger(self, conversation_id: str) -> UsageLedger: ...

    def window(self, context: ConversationContext) -> Compact | None: ...


def workflow_of(conversation_id: str) -> str:
    """The workflow id of every durable chat of ``conversation_id``: ``wf-`` and 12 hex
    digits of its BLAKE2b digest. The conversation stores its owner's workflow id, so a
    chat per request (a web handler, ``parlour serve``) with ids of its own would change
    what is stored at every turn, making each turn's first save rewrite the conversation
    whole instead of appending to it."""
    digest = hashlib.blake2b(conversation_id.encode("utf-8", "surrogatepass"), digest_size=6)
    return "wf-" + digest.hexdigest()


class Chat:
    """One user's conversation with an agent; one turn at a time.

    Thread-safety: a chat may be used from any thread or loop, one turn at a time; a second
    turn started while one runs raises ``IllegalStateError``.
    """

    def __init__(
        self,
        agent: Seat,
        service: ConversationService,
        user_id: str,
        conversation_id: str | None,
        temporary: bool,
        deps: Any = None,
    ) -> None:
        self.agent = agent
        self.service = service
        self.deps = deps  # every tool call that takes a ToolContext gets it
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
        if not temporary:  # every chat of a conversation continues its one workflow
            self.thinker.workflow_id = workflow_of(self.thinker.conversation_id)
        self.temporary = temporary
        self._busy = threading.Lock()
        self._ledger = agent.ledger(self.conversation_id)  # its id is fixed from here on
        # ``send`` holds the process's turn gate where every wait lets it go (see _gate.py)
        gated = gating(service.store, service.session)
        self._gate: Callable[[], AbstractContextManager[None]] = (
            _HELD if gated else contextlib.nullcontext
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

    def history(self) -> list[HistoryMessage]:
        """The conversation's messages as its user sees them, in order (``_history.py``):
        the stored record as of its last saved boundary, read without the lease (a running
        turn goes on); a chat that is not durable reads its live copy, between turns.

        Raises:
            PermissionError: the conversation belongs to another user.
            IllegalStateError: a chat that is not durable is running a turn.
        """
        return history(self.service, self.thinker, self.durable, self._busy)[0]

    @property
    def interrupted(self) -> bool:
        """True when the conversation's last turn stopped before the model's last word (the
        process died, or the turn failed or was cancelled, after the user's message or a
        round of tool results): ``resume`` continues it, and so does the next ``send``
        (first). Read from the stored open-turn record; a conversation saved before
        records by its last message. Reads what ``history`` reads."""
        return stopped_early(*history(self.service, self.thinker, self.durable, self._busy))

    @property
    def pending(self) -> list[PendingApproval]:
        """The tool calls waiting for a person's approval, in call order: read from the
        store (any process, after any restart); empty when none. Reads what ``history``
        reads, and raises what it raises."""
        return pending_of(history(self.service, self.thinker, self.durable, self._busy)[1])

    def approve(self, call_id: str) -> Reply:
        """Approve the pending call ``call_id``. While other calls of the turn stay
        undecided the reply lists them in ``pending`` (no model call made); the last
        decision runs the approved calls, gives the denied ones an error result with their
        reason, and goes on with the turn: the reply is that turn's.

        Raises:
            NoSuchApprovalError: no call of this id waits for approval.
            AlreadyDecidedError: it was decided already (here, or by another process).
            ValueError: ``call_id`` is not a usable id. And what ``send`` raises.
        """
        return self._decide([call_id], True, "")

    def deny(self, call_id: str, reason: str = "") -> Reply:
        """Deny the pending call ``call_id``: the model reads an error result saying a
        person denied it, with ``reason``. Otherwise as ``approve``.

        Raises:
            ValueError: ``reason`` is over 4096 characters or is not valid text. And what
                ``approve`` raises.
        """
        return self._decide([call_id], False, reason)

    def deny_all(self, reason: str = "") -> Reply:
        """Deny every undecided pending call (so a new message can be sent); as ``deny``."""
        return self._decide(None, False, reason)

    async def aapprove(self, call_id: str) -> Reply:
        """``approve`` on the running loop, never blocking it; raises what it raises."""
        return await self._adecide([call_id], True, "")

    async def adeny(self, call_id: str, reason: str = "") -> Reply:
        """``deny`` on the running loop, never blocking it; raises what it raises."""
        return await self._adecide([call_id], False, reason)

    async def adeny_all(self, reason: str = "") -> Reply:
        """``deny_all`` on the running loop, never blocking it; raises what it raises."""
        return await self._adecide(None, False, reason)

    def _decide(self, call_ids: list[str] | None, approved: bool, reason: str) -> Reply:
        checked_decision(call_ids, reason)
        for attempt in range(DECIDE_ATTEMPTS):
            plan = self._begin(deltas=False)
            try:
                with self._gate(), turn_span(plan.tracer, self.thinker):
                    steps = decision_steps(plan, call_ids, approved, reason)
                    reply = run(steps, plan, self.service)
                self._done(plan, reply)
                return reply
            except StaleVersionError:  # another process saved first: look again
                if attempt + 1 == DECIDE_ATTEMPTS:
                    raise
            finally:
                self._end()
        raise AssertionError("unreachable")  # pragma: no cover

    def astream_decision(
        self, call_id: str | None, approved: bool, reason: str = ""
    ) -> AsyncIterator[AgentEvent]:
        """A decision on the running loop as its events (for a host that shows them):
        ``ApprovalDecided`` once saved; after the last decision of the turn, the rest of the
        turn's events; ``TurnDone`` last, its reply what ``approve`` returns. ``call_id``
        None decides every undecided call (as ``deny_all``). Raises what ``approve``
        raises; closing the iteration cancels the turn as ``astream``'s does."""
        ids = None if call_id is None else [call_id]
        return self._aevents(lambda emit: self._adecide(ids, approved, reason, emit))

    async def _adecide(
        self,
        call_ids: list[str] | None,
        approved: bool,
        reason: str,
        emit: Callable[[AgentEvent], None] = lambda event: None,
    ) -> Reply:
        checked_decision(call_ids, reason)
        for attempt in range(DECIDE_ATTEMPTS):
            plan = self._begin()
            try:
                with turn_span(plan.tracer, self.thinker):
                    steps = decision_steps(plan, call_ids, approved, reason)
                    reply = await drive_async(steps, plan, self.service, emit)
                emit(self._done(plan, reply))
                return reply
            except StaleVersionError:
                if attempt + 1 == DECIDE_ATTEMPTS:
                    raise
            finally:
                self._end()
        raise AssertionError("unreachable")  # pragma: no cover

    async def ahistory(self) -> list[HistoryMessage]:
        """``history`` on the running loop, never blocking it; raises what it raises."""
        return (await ahistory(self.service, self.thinker, self.durable, self._busy))[0]

    # -- from threads ---------------------------------------------------------------------------

    def send(self, text: str, attachments: Sequence[ContentBlock] = ()) -> Reply:
        """One whole turn; blocks this thread until it ends.

        Raises:
            TurnCancelledError: ``force_release`` cancelled it (after its boundary save).
            ConversationUnavailableError, PermissionError: it could not be obtained.
            RetryableLLMError, UncorrectableLLMError: the model failed it (after the save).
            IllegalStateError: a turn is already running on this chat.
            ValueError: ``text`` is blank and there is no attachment (nothing obtained).
        """
        return self._send(text, attachments)

    def resume(self) -> Reply:
        """Continue an interrupted turn from its last durable step: the model is asked again
        with what the conversation holds (the user's message, the results of the tools that
        finished, an interrupted call's error result), and the turn goes on as any turn
        does; no new user message is added. Raises what ``send`` raises, and
        ``IllegalStateError`` when the conversation has no interrupted turn."""
        return self._send(None, ())

    def _send(self, text: str | None, attachments: Sequence[ContentBlock]) -> Reply:
        if self.agent.tools.stale:  # a toolset to list first (its server started, at first)
            self.agent.tools.refresh()
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
        if self.agent.tools.stale:
            self.agent.tools.refresh()
        plan = self._begin(deltas)
        try:
            with turn_span(plan.tracer, self.thinker):
                reply = yield from drive(turn_steps(plan, text, attachments), plan, self.service)
            yield self._done(plan, reply)
        finally:
            self._end()

    # -- from asyncio ---------------------------------------------------------------------------

    async def asend(self, text: str, attachments: Sequence[ContentBlock] = ()) -> Reply:
        """``send`` on the running loop: it waits for the model and its tools without
        holding the loop (only a commit's fsync, led on the loop for all the saves of a turn
        of it, holds it). Cancelling the awaiting task cancels the turn (saved and released
        first) and raises ``CancelledError``."""
        return await self._arun(text, attachments, lambda event: None, deltas=False)

    async def aresume(self) -> Reply:
        """``resume`` on the running loop, never blocking it; raises what it raises."""
        return await self._arun(None, (), lambda event: None, deltas=False)

    def astream(
        self, text: str, attachments: Sequence[ContentBlock] = ()
    ) -> AsyncIterator[AgentEvent]:
        """``stream`` on the running loop. Closing or cancelling the iteration cancels the
        turn (saved and released before the close returns)."""
        return self._aevents(lambda emit: self._arun(text, attachments, emit))

    async def _aevents(
        self, turn: Callable[[Callable[[AgentEvent], None]], Awaitable[Reply]]
    ) -> AsyncIterator[AgentEvent]:
        """The events ``turn`` emits, as it runs in a task of its own; closing the
        iteration cancels the task (waited for)."""
        queue: asyncio.Queue[AgentEvent] = asyncio.Queue()
        task = asyncio.ensure_future(turn(queue.put_nowait))
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
        self,
        text: str | None,
        attachments: Sequence[ContentBlock],
        emit: Callable[[AgentEvent], None],
        *,
        deltas: bool = True,
    ) -> Reply:
        if self.agent.tools.stale:
            await self.agent.tools.arefresh()
        plan = self._begin(deltas)
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
        state = thinker.begin_turn()
        return TurnPlan(self.agent, thinker, state, self._ledger, deltas, tracer(), self.deps)

    def _done(self, plan: TurnPlan, reply: Reply) -> TurnDone:
        """The turn's ``TurnDone``, published (numbered) to its followers."""
        return plan.state.publish(TurnDone(reply=reply))

    def _end(self) -> None:
        self.thinker.end_turn()
        self._busy.release()
