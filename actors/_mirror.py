"""What the supervisor shares with the service (``Mirror``), and the test seams between
the steps of a race (``Seams``)."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable

import pykka

from parlour.runtime import ConversationContext

from ._conversation import ConversationActor

ActorRef = pykka.ActorRef[ConversationActor]


class Mirror:
    """What the supervisor shares with the service for lock-free reads: the registry's refs
    and the retirement epoch, which only the supervisor writes, one atomic operation at a
    time; and ``touched``, where the service's warm path marks each obtain with a tick
    (one dict store, never a message), which the live cap reads to keep a true LRU."""

    __slots__ = ("epoch", "parked", "refs", "ticks", "touched")

    def __init__(self) -> None:
        self.refs: dict[str, ActorRef] = {}
        # idle conversations held without an actor: {id: (context, expires_at)}, LRU order
        self.parked: OrderedDict[str, tuple[ConversationContext, float]] = OrderedDict()
        self.epoch = 0
        self.ticks = itertools.count(1)  # next() is atomic under the GIL
        self.touched: dict[str, int] = {}

    def touch(self, conversation_id: str) -> None:
        """Mark a warm obtain (any thread)."""
        self.touched[conversation_id] = next(self.ticks)


class Seams:
    """Test seams: hooks called between two steps of a race, None in production.

    ``after_idle_answer(cid)`` runs in the supervisor's handler between an actor's "I am
    idle" answer and its unregistering; ``after_load(cid)`` runs in the obtaining thread
    between the restore's load and its spawn; ``on_look_again(cid)`` runs in the obtaining
    thread when an activation answered ``Retiring``.
    """

    def __init__(
        self,
        after_idle_answer: Callable[[str], None] | None = None,
        after_load: Callable[[str], None] | None = None,
        on_look_again: Callable[[str], None] | None = None,
    ) -> None:
        self.after_idle_answer = after_idle_answer
        self.after_load = after_load
        self.on_look_again = on_look_again
