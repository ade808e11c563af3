"""``Kept``: a lease its job keeps between its own consecutive turns.

A chat's next turn would obtain the lease its last turn just gave back: an ``Acquire`` and
a ``Release`` through the activation for nothing. A thinker that keeps its lease
(``keeps_lease``) ends a turn by letting go of its ``Kept`` instead, and its next turn takes
the ``Kept`` back without a message. The activation still names the job its owner; it takes
the lease back whenever anyone else needs it: another owner's obtain, a sweep past
retention, parking, a force release, a doom, ``stop``.

The hand-off between the two sides is one lock, ``turn``: held by the owner's turn, and by
the activation for ever once it took the lease back. So whoever gets it first wins, and the
loser learns it at once:

- the activation (in its handler) sets ``wanted`` first, then tries the lock; failing, the
  owner is inside a turn, and gives the lease back at that turn's end;
- the owner ends a turn by letting the lock go and then reading ``wanted``; set, it tries
  the lock again and, getting it, releases for real (the activation hands over to whoever
  waits); not getting it, the activation took the lease back meanwhile;
- the owner's next turn tries the lock: not getting it, the lease was taken back (obtain
  anew); getting it with ``wanted`` set, someone queued behind the last turn (release for
  real, then obtain behind them).

``wanted`` is set before the try, and read after the let-go, so a request queued while a
turn runs is always seen by that turn's end: no waiter is stranded, and never two owners.
"""

from __future__ import annotations

import threading
from typing import Any

from parlour.runtime import ConversationContext

__all__ = ["Kept"]


class Kept:
    """One kept lease: ``turn`` (held while the owner's turn runs, and for good once the
    activation took the lease back), ``wanted`` (someone else needs it), ``taken`` (the
    activation took it back), ``idle_since`` (the clock reading at the last turn's end,
    from which retention counts); between turns, the conversation ``cid``, its ``context``
    and the activation ``ref`` that granted it (dropped when taken back, so a kept lease
    never holds an evicted conversation in memory).

    Thread-safety: ``take`` only in the activation's handlers; ``keep`` and ``reclaim``
    only by the owner's thread.
    """

    __slots__ = ("cid", "context", "idle_since", "ref", "taken", "turn", "wanted")

    def __init__(self) -> None:
        self.turn = threading.Lock()
        self.turn.acquire()  # granted at the start of a turn
        self.wanted = False
        self.taken = False
        self.idle_since = 0.0
        self.cid = ""
        self.context: ConversationContext | None = None
        self.ref: Any = None

    def in_turn(self) -> bool:
        """True while the owner's turn runs (or the lease is being given back)."""
        return self.turn.locked() and not self.taken

    def take(self, want: bool = True) -> bool:
        """The activation takes the lease back when its owner is between turns; True when
        taken. With ``want``, a running turn gives it back at its end instead."""
        if want:
            self.wanted = True  # before the try: see the module's docstring
        if not self.turn.acquire(blocking=False):
            return False
        self.taken = True
        self.context = self.ref = None
        return True

    def keep(self, now: float, context: ConversationContext, ref: Any) -> bool:
        """End the owner's turn keeping the lease; False when it must be released for real
        now (someone wants it, and the activation has not taken it back itself)."""
        if self.wanted:
            return False
        self.idle_since = now
        self.context, self.ref = context, ref
        self.turn.release()
        if not self.wanted:
            return True
        return not self.turn.acquire(blocking=False)  # taken meanwhile: nothing to release

    def reclaim(self) -> bool | None:
        """The owner's next turn: True when the lease is still its own (the turn holds it
        now), False when someone waits for it (release it for real, then obtain), None when
        the activation took it back (obtain anew)."""
        if not self.turn.acquire(blocking=False):
            return None
        return not self.wanted
