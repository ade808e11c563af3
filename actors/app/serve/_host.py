"""The chat host behind the HTTP API: one slot per conversation, turns detached from the
requests that start them, sends never interleaved.

A send while a turn runs is offered to that turn (``service.offer``); refused (the turn has
closed its inbox, or has not obtained the lease yet) or with a turn already waiting, it
becomes a turn of its own, queued behind the others in arrival order. Each turn runs as its
own task, so a client that goes away mid-turn does not cancel it; ``cancel`` does, through
``force_release``. Where the turns run (this process, or a cluster's shards) is the
``Turns`` the host is given.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Literal

from loguru import logger

from parlour.runtime.errors import ParlourError

from ...agent._agent import Agent
from ...agent._chat import Chat
from ...agent._events import AgentEvent, TurnCancelledError
from ._feed import TurnFeed, WireEvent, wire_event
from ._turns import HostedChat, LocalTurns, Turns

__all__ = ["ChatHost", "ShuttingDownError"]

SendStatus = Literal["started", "queued", "offered"]
Events = Callable[[], AsyncIterator[AgentEvent]]  # a turn's events, other than a send's
IDLE_PING_S = 15.0
MAX_SLOTS = 10_000


class ShuttingDownError(RuntimeError):
    """The host is shutting down and starts no more turns."""


class _Slot:
    """One conversation's chat, its running or latest turn, and the turns waiting."""

    def __init__(self, chat: HostedChat) -> None:
        self.chat = chat
        self.lock = asyncio.Lock()
        self.sending = asyncio.Lock()
        self.feed: TurnFeed | None = None
        self.task: asyncio.Task[None] | None = None
        self.waiting = 0
        self.watchers = 0
        self.turns = 0
        self.next_turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def idle(self) -> bool:
        """Nothing runs, waits or watches: the slot can go (a later send makes a new one)."""
        busy = self.waiting or self.watchers or self.sending.locked()
        return self.running is None and not busy

    @property
    def running(self) -> TurnFeed | None:
        feed = self.feed
        return feed if feed is not None and not feed.done else None

    def announce(self) -> None:
        """Wake every watcher waiting for this conversation's next turn."""
        announced, self.next_turn = self.next_turn, asyncio.get_running_loop().create_future()
        announced.set_result(None)


class ChatHost:
    """The agent's chats on one event loop, for the HTTP API.

    Args:
        turns: where the turns run (``LocalTurns``: an agent on a service here;
            ``ClusterTurns``: a cluster's shards).
        max_slots: how many conversations' slots are kept before idle ones are dropped.

    Thread-safety: none; every method runs on the server's event loop.
    """

    def __init__(self, turns: Turns, max_slots: int = MAX_SLOTS) -> None:
        self.turns = turns
        self.max_slots = max_slots
        self.closing = False
        self._slots: dict[str, tuple[str, _Slot]] = {}
        self._fresh: dict[str, dict[str, None]] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self._closed: asyncio.Event | None = None

    @property
    def agent(self) -> Agent:
        """The local agent.

        Raises:
            AttributeError: the turns run on a cluster, whose agents live in its shards.
        """
        if not isinstance(self.turns, LocalTurns):
            raise AttributeError("The turns run on a cluster; its agents live in its shards.")
        return self.turns.agent

    # -- conversations --------------------------------------------------------------------

    def create(self, user_id: str) -> str:
        """A new conversation for ``user_id``; stored with its first turn.

        Raises:
            ShuttingDownError: the host is shutting down.
        """
        self._refuse_if_closing()
        self._prune()
        chat = self.turns.chat(user_id)
        self._slots[chat.conversation_id] = (user_id, _Slot(chat))
        self._fresh.setdefault(user_id, {})[chat.conversation_id] = None
        return chat.conversation_id

    def fresh(self, user_id: str) -> list[str]:
        """The user's conversations created here and not stored yet, newest first."""
        return list(reversed(self._fresh.get(user_id, {})))

    def is_fresh(self, user_id: str, conversation_id: str) -> bool:
        return conversation_id in self._fresh.get(user_id, ())

    def forget(self, user_id: str, conversation_id: str) -> None:
        """Drop the slot of a deleted conversation."""
        entry = self._slots.get(conversation_id)
        if entry is not None and entry[0] == user_id:
            del self._slots[conversation_id]
        self._fresh.get(user_id, {}).pop(conversation_id, None)

    def running(self, user_id: str, conversation_id: str) -> bool:
        slot = self._mine(user_id, conversation_id)
        return slot is not None and slot.running is not None

    def running_turns(self) -> int:
        return sum(1 for _, slot in self._slots.values() if slot.running is not None)

    def _mine(self, user_id: str, conversation_id: str) -> _Slot | None:
        entry = self._slots.get(conversation_id)
        return entry[1] if entry is not None and entry[0] == user_id else None

    def _slot(self, user_id: str, conversation_id: str) -> _Slot:
        slot = self._mine(user_id, conversation_id)
        if slot is None:
            self._prune()
            chat = self.turns.chat(user_id, conversation_id)
            slot = _Slot(chat)
            self._slots[conversation_id] = (user_id, slot)
        return slot

    def _prune(self, room: int = 1) -> None:
        """Past ``max_slots`` (less ``room``), drop the idle slots of stored conversations,
        oldest first."""
        excess = len(self._slots) - self.max_slots + room
        for cid, (user_id, slot) in list(self._slots.items()):
            if excess <= 0:
                return
            if slot.idle and not self.is_fresh(user_id, cid):
                del self._slots[cid]
                excess -= 1

    # -- sending --------------------------------------------------------------------------

    async def send(
        self, user_id: str, conversation_id: str, text: str
    ) -> tuple[SendStatus, TurnFeed, int]:
        """Offer ``text`` to the running turn, or start (or queue) a turn for it.

        The caller has checked that ``user_id`` may see the conversation.

        Returns:
            How it was taken, the feed of the turn that answers it, and the index in that
            feed its events start at.

        Raises:
            ShuttingDownError: the host is shutting down.
        """
        self._refuse_if_closing()
        slot = self._slot(user_id, conversation_id)
        async with slot.sending:  # decided one at a time, in arrival order
            running = slot.running
            if running is not None and running.started and not slot.waiting:
                start = len(running.events)
                offer = self.turns.offer  # asks the conversation's actor: off the loop
                if await asyncio.to_thread(offer, conversation_id, user_id, text):
                    return "offered", running, start
            return self._start(slot, conversation_id, text)

    def _start(
        self, slot: _Slot, conversation_id: str, text: str, events: Events | None = None
    ) -> tuple[SendStatus, TurnFeed, int]:
        status: SendStatus = "queued" if slot.lock.locked() or slot.waiting else "started"
        feed = TurnFeed(conversation_id, text)
        slot.waiting += 1
        run = self._run(slot, feed, events)
        task = asyncio.create_task(run, name=f"turn {conversation_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return status, feed, 0

    async def decide(
        self, user_id: str, conversation_id: str, call_id: str, approved: bool, reason: str
    ) -> TurnFeed:
        """Approve or deny a pending call, as a turn of the conversation's (queued behind a
        running one; its events, ``approval_decided`` first, go to the watchers as a turn's
        do). After the last pending call's decision the turn goes on in the same feed,
        detached from the request. Returns once the decision is saved.

        The caller has checked that ``user_id`` may see the conversation.

        Raises:
            ShuttingDownError: the host is shutting down.
            ApprovalError: no such pending call, or it was decided (nothing saved).
            NotImplementedError: the turns run on a cluster, which takes no decisions here.
        """
        self._refuse_if_closing()
        slot = self._slot(user_id, conversation_id)
        chat = slot.chat
        if not isinstance(chat, Chat):
            raise NotImplementedError("Approvals are decided on the shard's own process.")
        saved: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def events() -> AsyncIterator[AgentEvent]:
            try:
                async for event in chat.astream_decision(call_id, approved, reason):
                    if not saved.done():
                        saved.set_result(None)  # the first event: the saved decision
                    yield event
            except BaseException as exc:
                if not saved.done():
                    saved.set_exception(exc)
                raise
            if not saved.done():  # pragma: no cover - a decision always announces itself
                saved.set_result(None)

        _, feed, _ = self._start(slot, conversation_id, "", events)
        async for _ in feed.follow():  # settled before its first event reaches the feed
            if saved.done():
                saved.result()  # raises the refusal
                return feed
        raise ShuttingDownError("The server is shutting down; nothing was decided.")

    async def _run(self, slot: _Slot, feed: TurnFeed, events: Events | None = None) -> None:
        async with slot.lock:
            slot.waiting -= 1
            slot.feed, slot.task = feed, asyncio.current_task()
            feed.started = True
            slot.turns += 1
            feed.push({"type": "turn_start", "conversation_id": feed.conversation_id})
            slot.announce()
            try:
                await self._drive(slot.chat, feed, events)
            finally:
                feed.finish()
                slot.task = None
        self._fresh.get(slot.chat.user_id, {}).pop(feed.conversation_id, None)
        if len(self._slots) > self.max_slots:
            self._prune(room=0)

    async def _drive(self, chat: HostedChat, feed: TurnFeed, events: Events | None) -> None:
        if self.closing:
            feed.push({"type": "error", "message": "The server is shutting down."})
            return
        try:
            async for event in chat.astream(feed.text) if events is None else events():
                feed.push(wire_event(event))
        except TurnCancelledError as exc:
            feed.push({"type": "cancelled", "message": str(exc)})
        except asyncio.CancelledError:
            feed.push({"type": "cancelled", "message": "The turn was cancelled."})
        except (ParlourError, PermissionError) as exc:
            feed.push({"type": "error", "message": str(exc)})
        except Exception as exc:
            logger.opt(exception=exc).error("turn on {} failed", feed.conversation_id)
            feed.push({"type": "error", "message": "The turn failed; the server logged why."})

    # -- following and cancelling ---------------------------------------------------------

    async def watch(
        self, user_id: str, conversation_id: str, *, once: bool, after: int | None = None
    ) -> AsyncIterator[list[WireEvent]]:
        """The conversation's turns as they run, in batches of events: first a
        ``watching`` event (from then on no turn is missed), then the running turn from its
        start (given ``after``, a reconnect's last seq: from just past that event), then
        each next one from its start (``once``: only the running one; nothing when idle).
        Idle, a ``ping`` event comes every so often; it ends when the host shuts down."""
        slot = self._slot(user_id, conversation_id)
        slot.watchers += 1
        try:
            async for batch in self._watch(slot, once, after):
                yield batch
        finally:
            slot.watchers -= 1

    async def _watch(
        self, slot: _Slot, once: bool, after: int | None
    ) -> AsyncIterator[list[WireEvent]]:
        conversation_id, user_id = slot.chat.conversation_id, slot.chat.user_id
        running = slot.running
        seen = slot.turns - (1 if running is not None else 0)
        yield [{"type": "watching", "running": running is not None}]
        while not self.closing:
            feed = slot.feed
            if feed is not None and slot.turns > seen:  # running, or run since the last look
                seen = slot.turns
                # a reconnect resumes the turn it left, not one begun since
                start = feed.index_after(after) if after is not None and feed is running else 0
                async for batch in feed.follow(start):
                    yield batch
            else:
                joined = self.turns.join_running(conversation_id, user_id, after=after)
                async for agent_event in joined:
                    yield [wire_event(agent_event)]  # a turn this host did not start
            after = None  # only the turn running at a reconnect resumes; later ones start whole
            if once or self.closing:
                return
            if slot.turns == seen and not await self._next_turn(slot):
                yield [{"type": "ping"}]

    async def _next_turn(self, slot: _Slot) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(slot.next_turn), IDLE_PING_S)
            return True
        return False

    async def cancel(self, user_id: str, conversation_id: str) -> bool:
        """Cancel the conversation's running turn (it saves at its boundary and releases);
        False when none runs for this user."""
        slot = self._mine(user_id, conversation_id)
        if slot is None or slot.running is None:
            return False
        try:
            owner = await asyncio.to_thread(self.turns.force_release, conversation_id, user_id)
        except (ValueError, PermissionError):
            owner = None
        if owner is None and slot.task is not None:  # not holding the lease yet
            slot.task.cancel()
        return True

    # -- shutting down --------------------------------------------------------------------

    def _refuse_if_closing(self) -> None:
        if self.closing:
            raise ShuttingDownError("The server is shutting down and starts no new turns.")

    def begin_shutdown(self) -> None:
        """Start no more turns, end every watcher, and cancel every running turn at its
        next boundary (after that boundary's save)."""
        if self.closing:
            return
        self.closing = True
        for user_id, slot in list(self._slots.values()):
            slot.announce()
            if slot.running is not None:
                task = asyncio.create_task(self.cancel(user_id, slot.chat.conversation_id))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def aclose(self, timeout_s: float = 30.0) -> None:
        """``begin_shutdown``, then wait (up to ``timeout_s``) for every turn to end."""
        self.begin_shutdown()
        pending = set(self._tasks)
        if pending:
            _, late = await asyncio.wait(pending, timeout=timeout_s)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
