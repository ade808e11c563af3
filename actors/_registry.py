"""``Registry``: the live conversations as the service's parts reach them.

The supervisor's registry is reached two ways: asked through the supervisor's ref (each ask
answers a default once the supervisor has stopped, so every query after ``stop`` is empty),
and read without asking through its ``Mirror`` (the warm path's refs). The session cache
sits beside it, so that forgetting a conversation clears both.
"""

from __future__ import annotations

from typing import Any

import pykka

from parlour.runtime.errors import not_owned
from parlour.stores import SessionStore

from ._conversation import ConversationActor
from ._messages import Drop, Holder, Lookup, QueryHolder, QueryOwner, Sweep, shutting_down
from ._mirror import Mirror

__all__ = ["Registry"]

ActorRef = pykka.ActorRef[ConversationActor]


class Registry:
    """The supervisor (``supervisor``, its ref), its mirror and the session cache.

    Thread-safety: every method from any thread; it holds no state but its three parts.
    """

    __slots__ = ("mirror", "session", "supervisor")

    def __init__(
        self, supervisor: pykka.ActorRef[Any], mirror: Mirror, session: SessionStore | None
    ) -> None:
        self.supervisor = supervisor
        self.mirror = mirror
        self.session = session

    def ask(self, message: Any, default: Any) -> Any:
        """Ask the supervisor; ``default`` once it has stopped."""
        try:
            return self.supervisor.ask(message, block=True)
        except pykka.ActorDeadError:
            return default

    def ask_or_refuse(self, message: Any) -> Any:
        """Ask the supervisor.

        Raises:
            IllegalStateError: it has stopped (the service is shutting down).
        """
        try:
            return self.supervisor.ask(message, block=True)
        except pykka.ActorDeadError as exc:
            raise shutting_down() from exc

    def find(self, conversation_id: str) -> ActorRef | None:
        """The live activation: the mirror's, else the supervisor's answer (None: none)."""
        ref: ActorRef | None = self.mirror.refs.get(conversation_id) or self.ask(
            Lookup(conversation_id), None
        )
        return ref

    def holder(self, conversation_id: str, user_id: str, take_back: bool = False) -> Holder | None:
        """The live activation's holder; None when none is live. With ``take_back``, a
        lease kept between its owner's turns is taken back first.

        Raises:
            PermissionError: the live conversation belongs to another user.
        """
        ref = self.find(conversation_id)
        if ref is None:
            return None
        try:
            holder: Holder = ref.ask(QueryHolder(user_id if take_back else None), block=True)
        except pykka.ActorDeadError:
            return None
        if holder.user_id is not None and holder.user_id != user_id:
            raise not_owned(conversation_id, user_id)
        return holder

    def forget(self, conversation_id: str, reason: str, reload: bool = False) -> None:
        """No cache and no warm activation serves the conversation after this: its cache
        entry is deleted and its activation doomed (``Drop``, with ``reason`` for its
        waiters, who obtain again from a fresh load with ``reload``: the copy was stale,
        the record is there), a retirement recorded even when none is live."""
        if self.session is not None:
            self.session.delete(conversation_id)
        self.ask(Drop(conversation_id, reason, reload), None)

    def deleted(self, conversation_id: str) -> None:
        """The store deleted the conversation's record: ``forget`` it, except a live one
        never saved (minted: its record is its owner's first save to make), which the
        deleted record, another user's, was not."""
        if not self._unsaved(conversation_id):
            self.forget(conversation_id, f"Conversation {conversation_id} was deleted.")

    def _unsaved(self, conversation_id: str) -> bool:
        """Whether the live (or parked) conversation was never saved: minted, its record
        still to be made by its owner's first save."""
        parked = self.mirror.parked.get(conversation_id)
        if parked is not None:
            return not parked[0].stored
        ref = self.mirror.refs.get(conversation_id)
        if ref is None:
            return False
        try:
            holder: Holder = ref.ask(QueryHolder(), block=True)
        except pykka.ActorDeadError:
            return False
        return not holder.stored

    def count(self) -> tuple[int, int]:
        """How many conversations are live, and how many of them owned: the actors asked
        all at once from the calling thread (never through the supervisor, so a spawn is
        never held up), each answering after what this thread sent it before; the parked
        ones counted as idle."""
        asked = [ref.ask(QueryOwner(), block=False) for ref in self.mirror.refs.copy().values()]
        total, owned = len(self.mirror.parked), 0  # parked: idle, held without an actor
        for reply in asked:
            try:
                owner = reply.get()
            except pykka.ActorDeadError:
                continue  # stopped meanwhile: no longer live
            total += 1
            owned += owner is not None
        return total, owned

    def sweep(self) -> int:
        """Have the supervisor sweep (in slices) and wait for the count it evicted; 0 once
        it has stopped."""
        done: pykka.ThreadingFuture[int] = pykka.ThreadingFuture()
        try:
            self.supervisor.ask(Sweep(done), block=True)
        except pykka.ActorDeadError:
            return 0
        evicted: int = done.get()  # the supervisor completes it, also when it stops
        return evicted
