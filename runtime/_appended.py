"""What a conversation added since its last durable save, when adding is all it did.

A turn's boundary saves usually only append: the user's message, the model's answer, a
round of tool results, a usage ledger entry or two, the open-turn record moved on. A store
that can take such a save as an append (``PersistentStore.appends``) writes the new records
and the header, with no snapshot of the whole conversation, no plan against what it wrote
before and no comparison of the body. ``Appended`` is that save; ``changes_since`` says
whether the conversation's changes since its last save are only that, from the
``SavedMark`` its persister left at that save (``mark``).

The mark is exact, never hopeful: anything it cannot prove unchanged makes ``changes_since``
answer None, and the persister then saves the whole snapshot as before. It proves the body
unchanged by identity (every scalar field the very object it was, or a string equal to it:
an owner's ids and the model's id are set again at every obtain, often as new objects of
the same text; the objective map and the
palette unchanged by their own change counters, no artifact, no ``PojoBlock`` slot: a
value that may change in place), the saved messages unchanged by their memoized snapshots
(``MessageSnapshot.of``: any change to a message forgets its memo) and the usage ledger by
its origin token (``_settled.Ledger``: any change but an append takes a new one).
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple, Protocol

from ._message_snapshot import MessageSnapshot
from ._messages import Message, last_change
from ._open_turn import OpenTurn
from ._settled import Ledger

__all__ = ["Appended", "Marked", "SavedMark", "changes_since", "mark"]

_memo = operator.attrgetter("_snapshot")


class Appended(NamedTuple):
    """A save that only appends to ``conversation_id`` as stored at ``version``: messages
    from index ``start`` on, usage ledger entries from ``usage_start`` on, and the open-turn
    record (which every save writes, whatever it is)."""

    conversation_id: str
    version: int
    start: int
    messages: list[MessageSnapshot]
    usage_start: int
    usage: list[dict[str, Any]]
    turn: OpenTurn | None


class Marked(Protocol):
    """What a mark reads of a conversation (a ``ConversationContext``): its identity,
    messages, ledger and open-turn record, and the body's proof (``_body_*``)."""

    conversation_id: str | None
    stored_version: int
    usage_ledger: list[dict[str, Any]]
    open_turn: OpenTurn | None
    _saved_mark: SavedMark | None

    @property
    def messages(self) -> list[Message]: ...
    @property
    def artifact_registry(self) -> Any: ...
    def first_user_utterance(self) -> str | None: ...
    def _body_scalars(self) -> tuple[object, ...]: ...
    def _body_counters(self) -> tuple[int, int]: ...
    def _body_markable(self) -> bool: ...


class SavedMark:
    """A conversation as its last durable save left it, as far as ``changes_since`` needs:
    the version, the messages list and their snapshots as saved, the change stamp then, the
    ledger's origin and length, and the body's proof (scalars, change counters, title)."""

    __slots__ = (
        "body",
        "messages",
        "objective",
        "origin",
        "palette",
        "saved",
        "stamp",
        "titled",
        "usage",
        "version",
    )

    def __init__(
        self,
        context: Marked,
        version: int,
        saved: list[MessageSnapshot],
    ) -> None:
        self.saved = saved  # its messages' snapshots as stored, owned by this mark
        ledger = context.usage_ledger
        self.origin = ledger.origin if type(ledger) is Ledger else None
        self.body = context._body_scalars()
        self.objective, self.palette = context._body_counters()
        self.titled = context.first_user_utterance() is not None
        self.moved_on(context, version)

    def moved_on(self, context: Marked, version: int) -> None:
        """The mark of a later save that left the body as this one proved it (an append):
        its version, the messages list and ledger length, the change stamp now."""
        self.version = version
        self.messages = context.messages  # the very list (a replaced one is checked anew)
        self.stamp = last_change()
        self.usage = len(context.usage_ledger)


def mark(
    context: Marked,
    version: int,
    snapshots: list[MessageSnapshot] | None = None,
    appended: Appended | None = None,
) -> None:
    """Leave the mark of a durable save as ``version`` on ``context``: of its whole
    ``snapshots`` (the messages a whole save stored), or of ``appended`` on top of the
    previous mark (an append). A body that can change in place leaves no mark."""
    previous = context._saved_mark
    if appended is not None:
        if previous is None or previous.version != appended.version:
            context._saved_mark = None  # not made from this mark: nothing proves what is stored
        else:  # the append proved the body as the mark has it: only the rest moves on
            previous.saved.extend(appended.messages)
            previous.moved_on(context, version)
        return
    if not context._body_markable():
        context._saved_mark = None
        return
    context._saved_mark = SavedMark(context, version, [] if snapshots is None else list(snapshots))


def changes_since(context: Marked) -> Appended | None:
    """What ``context`` added since its last mark, when that is all that changed (its
    stored version the mark's); None when anything else changed, or there is no mark."""
    was = context._saved_mark
    if was is None or was.version != context.stored_version or context.conversation_id is None:
        return None
    messages, saved = context.messages, was.saved
    count = len(saved)
    if len(messages) < count:
        return None
    if (messages is not was.messages or last_change() != was.stamp) and not all(
        map(operator.is_, saved, map(_memo, messages[:count]))
    ):
        return None  # a saved message changed, moved or went
    ledger = context.usage_ledger
    if type(ledger) is not Ledger or ledger.origin is not was.origin or len(ledger) < was.usage:
        return None
    if (
        not _same_scalars(was.body, context._body_scalars())
        or (was.objective, was.palette) != context._body_counters()  # no PojoBlock slot since
        or len(context.artifact_registry)  # an artifact may change in place
        or (not was.titled and context.first_user_utterance() is not None)  # a new title
    ):
        return None
    return Appended(
        context.conversation_id,
        was.version,
        count,
        [m._snapshot or MessageSnapshot.of(m) for m in messages[count:]],
        was.usage,
        ledger[was.usage :],
        context.open_turn,
    )


def _same_scalars(was: tuple[Any, ...], now: tuple[Any, ...]) -> bool:
    """Every scalar the very object it was (at C speed), or else a string equal to it (no
    other type: an equal datetime in another zone, say, encodes otherwise)."""
    return all(map(operator.is_, was, now)) or all(
        a is b or (type(a) is str and type(b) is str and a == b)
        for a, b in zip(was, now, strict=True)
    )
