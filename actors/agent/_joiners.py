"""Following a running turn and offering it messages: the agent's thinker carries both.

A running turn has a ``TurnState``: a broadcast of its events (a joiner first gets the
text so far, then live events, and its iteration ends with the turn) and an inbox of
offered messages (taken at the turn's boundaries in arrival order; once the turn closes it,
an offer is refused). ``AgentThinker`` is the core's ``Joinable``: its ``follow`` and
``offer`` reach the running turn. There is no registry of its own: the service's ``join``
and ``offer`` find the thinker through its user-guarded ``owning_thinker``, so another
user's conversation is indistinguishable from an idle one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, Callable
from typing import Any, cast

from .._thinker import BasicThinker, Event
from ._events import AgentEvent, Restarted, TextDelta, TurnDone

__all__ = ["AgentThinker", "TurnState"]

_END = object()


class TurnState:
    """One running turn's broadcast and inbox.

    Thread-safety: every method may be called from any thread; one lock guards both.
    """

    __slots__ = (
        "_closed",
        "_committed",
        "_ended",
        "_followers",
        "_lock",
        "_offers",
        "_partial",
        "_source",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._committed: list[str] = []
        self._partial: list[str] = []
        self._followers: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[Any]]] = []
        self._offers: list[str] = []
        self._source: object = None  # the token of the call whose deltas text_sink takes
        self._closed = False
        self._ended = False

    # -- the broadcast ------------------------------------------------------------------------

    def publish(self, event: AgentEvent) -> None:
        """Record ``event`` in the text so far and pass it to every follower."""
        kind = type(event)
        with self._lock:
            if kind is TextDelta:
                self._partial.append(cast(TextDelta, event).text)
            elif kind is Restarted:
                self._partial.clear()
            if not self._followers:
                return
            followers = list(self._followers)
        for loop, queue in followers:
            _post(loop, queue, event)

    def publish_text(self, text: str) -> None:
        """``publish(TextDelta(text=text))``, the event built only for a follower."""
        with self._lock:
            self._partial.append(text)
            if not self._followers:
                return
            followers = list(self._followers)
        event = TextDelta(text=text)
        for loop, queue in followers:
            _post(loop, queue, event)

    def text_sink(self, refused: type[Exception]) -> tuple[Callable[[str], None], object]:
        """A model call's delta callback: each delta goes to the text so far and to every
        follower (no event built while nobody follows), until ``stop_stream`` with the
        returned token; a later delta raises ``refused`` and publishes nothing. The
        state's lock orders each delta against the stop."""
        token = object()
        with self._lock:
            self._source = token
        acquire, release, append = self._lock.acquire, self._lock.release, self._partial.append

        def on_text(text: str) -> None:  # once per delta: the lock taken by hand, cheaper
            acquire()
            try:
                if self._source is not token:
                    raise refused()
                append(text)
                if not self._followers:
                    return
                followers = list(self._followers)
            finally:
                release()
            event = TextDelta(text=text)
            for loop, queue in followers:
                _post(loop, queue, event)

        return on_text, token

    def stop_stream(self, token: object) -> None:
        """The deltas of ``token``'s call are refused from now on (abandoned or done)."""
        with self._lock:
            if self._source is token:
                self._source = None

    def commit_text(self) -> None:
        """The current model call finished: its text is no longer discarded by a restart."""
        with self._lock:
            self._committed.extend(self._partial)
            self._partial.clear()

    def end(self) -> None:
        """The turn is over: every follower's iteration ends."""
        with self._lock:
            self._ended = True
            followers, self._followers = self._followers, []
        for loop, queue in followers:
            _post(loop, queue, _END)

    def follow(self) -> asyncio.Queue[Any] | None:
        """A queue of this turn's events from now on, headed by the text so far; None once
        the turn has ended. Call it on the follower's event loop."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        with self._lock:
            if self._ended:
                return None
            so_far = "".join(self._committed + self._partial)
            self._followers.append((loop, queue))
        if so_far:
            queue.put_nowait(TextDelta(text=so_far))
        return queue

    def unfollow(self, queue: asyncio.Queue[Any]) -> None:
        with self._lock:
            self._followers = [(lp, q) for lp, q in self._followers if q is not queue]

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


def _post(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any], item: object) -> None:
    with contextlib.suppress(RuntimeError):  # the follower's loop closed: nobody listens
        loop.call_soon_threadsafe(queue.put_nowait, item)


class AgentThinker(BasicThinker):
    """The thinker of an ``Agent``'s chat: it carries the running turn's state, turns
    ``cancel_workflow`` (what ``force_release`` calls) into a cancellation of that turn, and
    lets others follow the turn and offer it messages (the core's ``Joinable``).

    Thread-safety: ``cancel_workflow`` and ``offer`` may be called from any thread,
    ``follow`` iterated on any event loop.
    """

    def __init__(self, user_id: str, **kwargs: Any) -> None:
        super().__init__(user_id, **kwargs)
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

    async def follow(self) -> AsyncGenerator[Event, None]:
        """The running turn's events from now on: first its text so far, then live
        events, up to ``TurnDone`` or the turn's end; nothing when no turn runs."""
        turn = self.turn
        queue = turn.follow() if turn is not None else None
        if turn is None or queue is None:
            return
        try:
            while (event := await queue.get()) is not _END:
                yield event
                if isinstance(event, TurnDone):
                    return
        finally:
            turn.unfollow(queue)

    def offer(self, text: str) -> bool:
        """Queue ``text`` for the running turn's next boundary; False when none runs or it
        has closed its inbox."""
        turn = self.turn
        return turn is not None and turn.offer(text)
