"""Following a running turn and offering it messages: the agent's thinker carries both.

A running turn has a ``TurnState``: the log of its events, numbered as they are published
(``seq`` 1, 2, 3...), read by its followers (a follower joining with no ``after`` first gets
the text so far, then live events; with ``after`` every event numbered above it, the
published ones first; its iteration ends with the turn), and an inbox of offered messages
(taken at the turn's boundaries in arrival order; once the turn closes it, an offer is
refused). ``AgentThinker`` is the core's ``Joinable``: its ``follow`` and ``offer`` reach
the running turn. There is no registry of its own: the service's ``join`` and ``offer``
find the thinker through its user-guarded ``owning_thinker``, so another user's
conversation is indistinguishable from an idle one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, Callable
from typing import Any, TypeVar

from msgspec.structs import replace

from .._kept import Kept
from .._thinker import BasicThinker, Event
from ._events import Restarted, TextDelta, TurnDone

__all__ = ["AgentThinker", "TurnState"]

E = TypeVar("E", bound=Event)
# One entry of a turn's log: the event numbered by its place, or a text delta's text alone
# while nobody has needed it as an event (the sync path's deltas: built for a reader only).
Logged = str | Event


class _Follower:
    """One follower's wake-up: an asyncio event on its own loop, set at most once per look
    (``due`` is under the turn state's lock), so a slow follower costs one post, not one
    per event."""

    __slots__ = ("due", "loop", "ready")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.ready = asyncio.Event()
        self.due = False

    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # the follower's loop closed: nobody listens
            self.loop.call_soon_threadsafe(self.ready.set)


class TurnState:
    """One running turn's event log and inbox.

    The log keeps every event of the turn, in publishing order, for its followers to read
    and resume in: memory is bounded by the turn (it goes with the state when the turn has
    ended and its last follower has read to the end). A text delta costs one list entry,
    the same text the follower's "text so far" needs anyway.

    Thread-safety: every method may be called from any thread; one lock guards both.
    """

    __slots__ = (
        "_closed",
        "_committed",
        "_ended",
        "_followers",
        "_lock",
        "_log",
        "_offers",
        "_partial_from",
        "_source",
        "turn_id",
    )

    def __init__(self) -> None:
        self.turn_id = ""  # the turn's id, set as it starts: every event carries it
        self._lock = threading.Lock()
        self._log: list[Logged] = []  # entry i is the event numbered i + 1
        self._committed: list[str] = []  # the text of the model calls that finished
        self._partial_from = 0  # where the current call's text starts in the log
        self._followers: list[_Follower] = []
        self._offers: list[str] = []
        self._source: object = None  # the token of the call whose deltas text_sink takes
        self._closed = False
        self._ended = False

    # -- the log ------------------------------------------------------------------------------

    def publish(self, event: E) -> E:
        """Number ``event`` as the turn's next, log it and wake every follower; returns
        the numbered event (what the turn's own caller is given)."""
        with self._lock:
            log = self._log
            numbered = replace(event, seq=len(log) + 1, turn=self.turn_id)
            log.append(numbered)
            if type(event) is Restarted:  # the attempt's text is discarded
                self._partial_from = len(log)
            if not self._followers:
                return numbered
            due = self._due()
        for follower in due:
            follower.wake()
        return numbered

    def publish_delta(self, text: str) -> TextDelta:
        """``publish(TextDelta(text=text))``, the event built numbered at once."""
        with self._lock:
            log = self._log
            event = TextDelta(text=text, seq=len(log) + 1, turn=self.turn_id)
            log.append(event)
            if not self._followers:
                return event
            due = self._due()
        for follower in due:
            follower.wake()
        return event

    def publish_text(self, text: str) -> None:
        """A text delta nobody here reads: logged as its text, built for a follower only."""
        with self._lock:
            self._log.append(text)
            if not self._followers:
                return
            due = self._due()
        for follower in due:
            follower.wake()

    def text_sink(self, refused: type[Exception]) -> tuple[Callable[[str], None], object]:
        """A model call's delta callback: each delta is logged (no event built: a follower
        builds its own) and wakes the followers, until ``stop_stream`` with the returned
        token; a later delta raises ``refused`` and publishes nothing. The state's lock
        orders each delta against the stop."""
        token = object()
        with self._lock:
            self._source = token
        acquire, release, append = self._lock.acquire, self._lock.release, self._log.append

        def on_text(text: str) -> None:  # once per delta: the lock taken by hand, cheaper
            acquire()
            try:
                if self._source is not token:
                    raise refused()
                append(text)
                if not self._followers:
                    return
                due = self._due()
            finally:
                release()
            for follower in due:
                follower.wake()

        return on_text, token

    def stop_stream(self, token: object) -> None:
        """The deltas of ``token``'s call are refused from now on (abandoned or done)."""
        with self._lock:
            if self._source is token:
                self._source = None

    def commit_text(self) -> None:
        """The current model call finished: its text is no longer discarded by a restart."""
        with self._lock:
            self._committed += _texts(self._log[self._partial_from :])
            self._partial_from = len(self._log)

    def end(self) -> None:
        """The turn is over: every follower reads to the end of the log, then stops."""
        with self._lock:
            self._ended = True
            due, self._followers = self._due(), []
        for follower in due:
            follower.wake()

    def _due(self) -> list[_Follower]:
        """The followers not woken since their last look, marked woken (under the lock)."""
        due = [f for f in self._followers if not f.due]
        for follower in due:
            follower.due = True
        return due

    # -- following ----------------------------------------------------------------------------

    def follow(self, after: int | None = None) -> tuple[_Follower, int, TextDelta | None] | None:
        """A new follower (call it on the follower's event loop), the log index it reads
        from, and its head: with ``after`` None, the text so far (numbered as the turn's
        latest event, so resuming after it loses nothing) and the index of the next event;
        else no head and the index after the event numbered ``after`` (the log's end, live
        events only, when the turn never reached it). None once the turn has ended."""
        follower = _Follower()
        with self._lock:
            if self._ended:
                return None
            count = len(self._log)
            if after is not None:
                self._followers.append(follower)
                return follower, min(max(after, 0), count), None
            so_far = "".join(self._committed + _texts(self._log[self._partial_from :]))
            self._followers.append(follower)
        head = TextDelta(text=so_far, seq=count, turn=self.turn_id) if so_far else None
        return follower, count, head

    def read(self, follower: _Follower, at: int) -> tuple[list[Event], bool]:
        """The events from log index ``at`` on, numbered, and whether the turn has ended
        (then they are its last). Clears the follower's wake-up first: a later event wakes
        it again."""
        follower.ready.clear()
        with self._lock:
            follower.due = False
            entries, ended = self._log[at:], self._ended
        turn = self.turn_id
        return [
            TextDelta(text=e, seq=n, turn=turn) if isinstance(e, str) else e
            for n, e in enumerate(entries, at + 1)
        ], ended

    def unfollow(self, follower: _Follower) -> None:
        with self._lock:
            self._followers = [f for f in self._followers if f is not follower]

    # -- the inbox ----------------------------------------------------------------------------

    def offer(self, text: str) -> bool:
        """Queue ``text`` for the turn's next boundary; False once the turn has closed."""
        with self._lock:
            if self._closed:
                return False
            self._offers.append(text)
            return True

    def take(self, *, close_if_empty: bool = False) -> list[str]:
        """The offers so far, in arrival order. With ``close_if_empty``, an empty inbox is
        closed in the same step, so no offer can arrive unanswered after the last look."""
        with self._lock:
            taken, self._offers = self._offers, []
            if close_if_empty and not taken:
                self._closed = True
            return taken

    def close(self) -> list[str]:
        """Refuse further offers; returns those not taken yet."""
        with self._lock:
            self._closed = True
            taken, self._offers = self._offers, []
            return taken


def _texts(entries: list[Logged]) -> list[str]:
    """The text of the text deltas among ``entries``."""
    texts = []
    for entry in entries:
        if isinstance(entry, str):
            texts.append(entry)
        elif isinstance(entry, TextDelta):
            texts.append(entry.text)
    return texts


class AgentThinker(BasicThinker):
    """The thinker of an ``Agent``'s chat: it carries the running turn's state, turns
    ``cancel_workflow`` (what ``force_release`` calls) into a cancellation of that turn, and
    lets others follow the turn and offer it messages (the core's ``Joinable``).

    Thread-safety: ``cancel_workflow`` and ``offer`` may be called from any thread,
    ``follow`` iterated on any event loop.
    """

    def __init__(self, user_id: str, **kwargs: Any) -> None:
        super().__init__(user_id, **kwargs)
        # the chat keeps its lease between its own turns (see the core's _kept.py)
        self.kept_lease: Kept | None = None
        self.turn: TurnState | None = None
        self._on_cancel: Callable[[], None] | None = None

    def begin_turn(self) -> TurnState:
        """A fresh turn state; clears an earlier turn's cancellation."""
        self.cancelled = None
        self._on_cancel = None
        self.turn = TurnState()
        return self.turn

    def set_cancel_hook(self, hook: Callable[[], None]) -> None:
        """Called (from any thread) when the running turn is cancelled."""
        self._on_cancel = hook
        if self.cancelled is not None:
            hook()

    def end_turn(self) -> None:
        turn, self.turn, self._on_cancel = self.turn, None, None
        if turn is not None:
            turn.end()

    def cancel_workflow(self, reason: str) -> None:
        """Cancel the running turn at its next boundary (at once on the async path)."""
        self.cancelled = reason
        hook = self._on_cancel
        if hook is not None:
            hook()

    async def follow(self, after: int | None = None) -> AsyncGenerator[Event, None]:
        """The running turn's events up to ``TurnDone`` or the turn's end; nothing when no
        turn runs. With ``after`` None: first its text so far, then live events; else each
        event numbered above ``after`` once, in order, the published ones first."""
        turn = self.turn
        joined = turn.follow(after) if turn is not None else None
        if turn is None or joined is None:
            return
        follower, at, head = joined
        try:
            if head is not None:
                yield head
            while True:
                events, ended = turn.read(follower, at)
                at += len(events)
                for event in events:
                    yield event
                    if type(event) is TurnDone:
                        return
                if ended:
                    return
                await follower.ready.wait()
        finally:
            turn.unfollow(follower)

    def offer(self, text: str) -> bool:
        """Queue ``text`` for the running turn's next boundary; False when none runs or it
        has closed its inbox."""
        turn = self.turn
        return turn is not None and turn.offer(text)
