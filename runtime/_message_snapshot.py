"""A message's stored form (``MessageSnapshot``), memoized on the message, and what a save
takes of a conversation's messages (``message_snapshots``), below the conversation: a
conversation is read through the ``Saved`` protocol, so this module names none.
"""

from __future__ import annotations

import operator
from typing import Literal, Protocol

import msgspec

from ._handlers import ResponseHandler
from ._messages import (
    IncomingMessage,
    Message,
    OutgoingMessage,
    _set_snapshot,
    last_change,
    stored_message,
)
from ._pairing import answer_dangling
from ._settled import Settled
from .blocks import ContentBlock, ToolResultBlock, ToolUseBlock, revive

__all__ = [
    "MessageSnapshot",
    "Saved",
    "message_snapshots",
    "repaired_messages",
    "without_orphan_results",
]


# gc=False: it holds only blocks (values that encode: finite trees), so it closes no cycle
class MessageSnapshot(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    direction: Literal["outgoing", "incoming", "plain"]
    role: str
    blocks: list[ContentBlock]
    raw_content: str | None = None
    compactable: bool = True
    app_authored: bool = False
    cache: bool = False
    requested_output_tokens: int | None = None

    @classmethod
    def of(cls, m: Message) -> MessageSnapshot:
        """The snapshot of ``m``, memoized on the message until the message changes.

        Setting any attribute, or changing the block list in place, forgets the memo. The
        memo makes a save's snapshot cost a pointer copy per unchanged message, and
        lets the LMDB store see (by identity) which messages it has already written.
        """
        memo = m._snapshot
        if memo is not None:
            return memo  # type: ignore[no-any-return]  # only this method sets it
        snapshot = cls._build(m)
        _set_snapshot(m, snapshot)  # a memo, no change: nothing to forget
        return snapshot

    @classmethod
    def _build(cls, m: Message) -> MessageSnapshot:
        direction: Literal["outgoing", "incoming", "plain"] = (
            "outgoing"
            if isinstance(m, OutgoingMessage)
            else "incoming"
            if isinstance(m, IncomingMessage)
            else "plain"
        )
        return cls(
            direction=direction,
            role=m.role,
            blocks=list(m.blocks),
            raw_content=m.raw_content if m.has_raw_text else None,
            compactable=m.compactable,
            app_authored=m.app_authored,
            cache=m.cache,
            requested_output_tokens=m.requested_output_tokens,
        )

    def to_message(self, handler: ResponseHandler | None) -> Message:
        """The message this snapshot describes; it remembers this snapshot as its own when
        reviving changed no block (a typed PojoBlock does not equal its stored dict)."""
        # decoded blocks are storable by construction: the decoder typed every field and
        # refuses lone surrogates, and decode_snapshot checked the nesting
        flags = (self.compactable, self.app_authored, self.cache, self.requested_output_tokens)
        blocks = map(revive, self.blocks)
        message = stored_message(
            self.direction, self.role, self.raw_content, blocks, flags, handler
        )
        if all(map(operator.is_, message.blocks, self.blocks)):  # as many: revive maps each
            _set_snapshot(message, self)
        return message


class Saved(Protocol):
    """What ``message_snapshots`` reads of a conversation (a ``ConversationContext``): its
    messages, and the snapshots the previous save or transcript kept for them."""

    @property
    def messages(self) -> list[Message]: ...
    @property
    def _settled_snapshots(self) -> Settled[MessageSnapshot]: ...


def message_snapshots(context: Saved) -> list[MessageSnapshot]:
    """Each message's snapshot (a fresh list): the settled ones as the previous call (a save,
    a transcript) kept them, then the memoized snapshots of the rest (one read each)."""
    messages, settled, stamp = context.messages, context._settled_snapshots, last_change()
    known = settled.settled(messages, stamp)
    snapshots = settled.values if known else []
    snapshots += [m._snapshot or MessageSnapshot.of(m) for m in messages[known:]]
    settled.keep(messages, snapshots, stamp)
    return settled.copy()


def without_orphan_results(messages: list[MessageSnapshot]) -> list[MessageSnapshot]:
    """Drop every tool result whose call appears nowhere in the transcript: a provider
    refuses the whole conversation over one such orphan. A message left with nothing to say
    goes too."""
    calls: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ToolUseBlock):
                calls.add(b.id)
            elif isinstance(b, ToolResultBlock):
                answered.add(b.tool_use_id)
    if answered <= calls:
        return messages  # no orphan: the usual record
    kept = []
    for m in messages:
        blocks = [
            b for b in m.blocks if not isinstance(b, ToolResultBlock) or b.tool_use_id in calls
        ]
        if len(blocks) == len(m.blocks):
            kept.append(m)
        elif blocks or m.raw_content:
            kept.append(msgspec.structs.replace(m, blocks=blocks))
    return kept


def repaired_messages(
    messages: list[MessageSnapshot], keep: frozenset[str] = frozenset()
) -> list[MessageSnapshot]:
    """``messages`` as a restore takes them: orphans dropped, dangling calls answered (but
    those named in ``keep``: calls parked for a person's approval)."""
    return answer_dangling(without_orphan_results(messages), MessageSnapshot, keep)
