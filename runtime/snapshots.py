"""Persistence snapshots: a conversation as plain msgspec data, with a format version.

Evolve by msgspec's rules: new fields get defaults; never reorder or retype a stored field.
``FORMAT_VERSION`` names the newest format this code writes; decoding a newer one is refused.
Decoding never depends on the caller's stack depth, and a stored value nested deeper than
``MAX_NESTING`` is a ``CorruptSnapshotError`` (parlour never writes one).
"""

from __future__ import annotations

import datetime as dt
import operator
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec

from ._handlers import ResponseHandler
from ._messages import (
    IncomingMessage,
    Message,
    OutgoingMessage,
    _set_snapshot,
    last_change,
)
from ._objective import ObjectiveSlot
from ._pairing import answer_dangling
from ._roles import Depth, Grade, OutputSize
from ._settled import copy_entries
from ._stored import stored_message
from ._validation import MAX_NESTING, nesting_depth
from .artifacts._serializer import registry_entries, restore_registry
from .blocks import (
    ContentBlock,
    PojoBlock,
    SkillBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
    revive,
)
from .errors import CorruptSnapshotError, IllegalStateError

if TYPE_CHECKING:
    from ._context import ConversationContext

__all__ = [
    "FORMAT_VERSION",
    "ConversationPersistenceSnapshot",
    "MessageSnapshot",
    "ObjectiveSlot",
    "decode_message_snapshot",
    "decode_snapshot",
    "decode_usage_entry",
    "encode_snapshot",
    "message_snapshots",
    "repaired_messages",
]

FORMAT_VERSION = 1

# The class a snapshot restores into. The context module imports this one (a context turns
# itself into a snapshot), so this module never imports it back: ``parlour.runtime._context``
# registers its class here when imported, and importing any ``parlour.runtime`` module
# imports the package, which imports the context first.
_restore_class: list[type[ConversationContext]] = []


def restore_as(cls: type[ConversationContext]) -> None:
    """Make ``to_conversation`` build ``cls`` (called once, by the context module)."""
    _restore_class[:] = [cls]


def _conversation_class() -> type[ConversationContext]:
    if not _restore_class:
        raise IllegalStateError(
            "No conversation class is registered to restore snapshots into: import "
            "parlour.runtime before restoring one."
        )
    return _restore_class[0]


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


class ConversationPersistenceSnapshot(msgspec.Struct, kw_only=True):
    """Everything a conversation needs to come back, and nothing live (no binding, no freeze)."""

    version: int = FORMAT_VERSION
    conversation_id: str | None
    user_id: str | None = None
    workflow_id: str | None = None
    title: str = ""
    created_at: dt.datetime
    objective: list[ObjectiveSlot] = msgspec.field(default_factory=list)
    # written by nothing; read from records that predate named slots
    legacy_objective: list[ContentBlock] | None = msgspec.field(default=None, name="main_objective")
    declared_tools: list[ToolDefinitionBlock] = msgspec.field(default_factory=list)
    messages: list[MessageSnapshot] = msgspec.field(default_factory=list)
    grade: Grade | None = None
    depth: Depth | None = None
    output_declaration: OutputSize | int | None = None
    interactive: bool = False
    compactable: bool = True
    temporary: bool = False
    cache_main_objective: bool = True
    prior_spec_id: str | None = None
    # Top-level artifacts in their plain form; iterands ride inside their list.
    artifacts: list[dict[str, Any]] = msgspec.field(default_factory=list)
    skills: list[SkillBlock] = msgspec.field(default_factory=list)
    # The fencing version of the stored record: what a store loaded it at or saved it as
    # (0: never stored). A store stamps it from its own record on load; a save names it.
    stored_version: int = 0
    # The usage ledger in its plain form (model calls, compactions); never sent to a model.
    usage: list[dict[str, Any]] = msgspec.field(default_factory=list)

    @classmethod
    def of(cls, context: ConversationContext) -> ConversationPersistenceSnapshot:
        return cls(
            conversation_id=context.conversation_id,
            user_id=context.user_id,
            workflow_id=context.workflow_id,
            title=context.title,
            created_at=context.created_at,
            objective=context._objective.stored(),
            declared_tools=context.declared_tool_definitions(),
            messages=message_snapshots(context),
            grade=context.grade,
            depth=context.depth,
            output_declaration=context.output_declaration,
            interactive=context.interactive,
            compactable=context.compactable,
            temporary=context.temporary,
            cache_main_objective=context.cache_main_objective,
            prior_spec_id=context.served_spec_id(),
            artifacts=registry_entries(context.artifact_registry),
            skills=context.admitted_skills(),
            stored_version=context.stored_version,
            usage=copy_entries(context.usage_ledger),
        )

    def to_conversation(self, handler: ResponseHandler | None = None) -> ConversationContext:
        """A fresh, unfrozen, unbound context holding this snapshot's state."""
        c = _conversation_class()(
            self.conversation_id,
            user_id=self.user_id,
            workflow_id=self.workflow_id,
            temporary=self.temporary,
            created_at=self.created_at,
        )
        for key, block in self.objective_slots():
            c.put_main_objective(key, revive(block))
        c.messages = [m.to_message(handler) for m in repaired_messages(self.messages)]
        c.add_tools(self.declared_tools)
        c.grade, c.depth = self.grade, self.depth
        c.output_declaration = self.output_declaration
        c.interactive = self.interactive
        c.compactable = self.compactable
        c.cache_main_objective = self.cache_main_objective
        c.prior_spec_id = self.prior_spec_id
        c.stored_version = self.stored_version
        c.usage_ledger.extend(self.usage)  # its own fresh Ledger: an append keeps its token
        for skill in self.skills:
            c.admit_skill(skill)
        restore_registry(c.artifact_registry, self.artifacts)  # unknown aliases: skipped
        return c

    def objective_slots(self) -> list[tuple[str, ContentBlock]]:
        """The stored objective as (key, block) pairs, in order.

        A legacy record's anonymous block list gets keys: a tool definition its ``tool:``
        slot, anything else ``objective-N`` by its place in the list.
        """
        if self.objective or not self.legacy_objective:
            return [(slot.key, slot.block) for slot in self.objective]
        return [
            (f"tool:{b.name}" if isinstance(b, ToolDefinitionBlock) else f"objective-{i}", b)
            for i, b in enumerate(self.legacy_objective)
        ]


def message_snapshots(context: ConversationContext) -> list[MessageSnapshot]:
    """Each message's snapshot (a fresh list): the settled ones as the previous call (a save,
    a transcript) kept them, then the memoized snapshots of the rest (one read each)."""
    messages, settled, stamp = context.messages, context._settled_snapshots, last_change()
    known = settled.settled(messages, stamp)
    snapshots = settled.values if known else []
    snapshots += [m._snapshot or MessageSnapshot.of(m) for m in messages[known:]]
    settled.keep(messages, snapshots, stamp)
    return settled.copy()


def _without_orphan_results(messages: list[MessageSnapshot]) -> list[MessageSnapshot]:
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


def repaired_messages(messages: list[MessageSnapshot]) -> list[MessageSnapshot]:
    """``messages`` as a restore takes them: orphans dropped, dangling calls answered."""
    return answer_dangling(_without_orphan_results(messages), MessageSnapshot)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ConversationPersistenceSnapshot)
_message_decoder = msgspec.json.Decoder(MessageSnapshot)
_usage_decoder = msgspec.json.Decoder(dict[str, Any])
_T = TypeVar("_T")


def encode_snapshot(snapshot: ConversationPersistenceSnapshot) -> bytes:
    return _encoder.encode(snapshot)


def decode_snapshot(
    data: bytes | memoryview, conversation_id: str
) -> ConversationPersistenceSnapshot:
    """Decode a stored snapshot; the answer never depends on the caller's stack depth.

    Raises:
        CorruptSnapshotError: the bytes do not decode, were written by a newer format, or a
            value in them nests deeper than ``MAX_NESTING``; the message names the
            conversation.
    """
    snapshot = _decode(_decoder, data, conversation_id)
    if snapshot.version > FORMAT_VERSION:
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} has format version {snapshot.version}; "
            f"this parlour reads up to {FORMAT_VERSION}. Upgrade parlour."
        )
    _check_nesting(conversation_id, _free_values(snapshot))
    return snapshot


def decode_message_snapshot(data: bytes | memoryview, conversation_id: str) -> MessageSnapshot:
    """Decode one stored message, with ``decode_snapshot``'s guarantees.

    Raises:
        CorruptSnapshotError: as ``decode_snapshot``.
    """
    message = _decode(_message_decoder, data, conversation_id)
    _check_nesting(conversation_id, _pojo_values(message.blocks))
    return message


def decode_usage_entry(data: bytes | memoryview, conversation_id: str) -> dict[str, Any]:
    """Decode one stored usage ledger entry (a plain dict) with ``decode_snapshot``'s
    guarantees; raises ``CorruptSnapshotError`` as it does."""
    entry = _decode(_usage_decoder, data, conversation_id)
    _check_nesting(conversation_id, [("a usage ledger entry", entry)])
    return entry


def _decode(
    decoder: msgspec.json.Decoder[_T], data: bytes | memoryview, conversation_id: str
) -> _T:
    """``decoder.decode(data)``; a RecursionError (a deep caller stack, or a record nested
    past what any stack holds) is decided again on a fresh thread, so every caller gets
    the same answer for the same bytes."""
    try:
        try:
            return decoder.decode(data)
        except RecursionError:
            return _on_fresh_stack(decoder.decode, data)
    except msgspec.DecodeError as exc:
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} does not decode: {exc}"
        ) from exc
    except RecursionError:
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} nests deeper than parlour reads "
            f"(values may nest {MAX_NESTING} levels)."
        ) from None


def _on_fresh_stack(decode: Callable[[bytes | memoryview], _T], data: bytes | memoryview) -> _T:
    """``decode(data)`` on a new thread (an empty stack), its result or exception here."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, decode(data)))
        except BaseException as exc:  # handed back to the caller's thread below
            outcome.append((False, exc))

    worker = threading.Thread(target=run, name="parlour-decode", daemon=True)
    worker.start()
    worker.join()
    ok, result = outcome[0]
    if not ok:
        raise result
    return result  # type: ignore[no-any-return]


def _check_nesting(conversation_id: str, values: Iterable[tuple[str, object]]) -> None:
    for where, value in values:
        if nesting_depth(value) > MAX_NESTING:
            raise CorruptSnapshotError(
                f"Stored conversation {conversation_id} holds a value ({where}) nested deeper "
                f"than {MAX_NESTING} levels; parlour never writes one."
            )


def _free_values(snapshot: ConversationPersistenceSnapshot) -> Iterator[tuple[str, object]]:
    """Every free-form value a snapshot holds, named: PojoBlock values and artifacts."""
    for slot in snapshot.objective:
        yield from _pojo_values([slot.block], f"objective slot {slot.key!r}")
    yield from _pojo_values(snapshot.legacy_objective or (), "the legacy objective")
    for i, m in enumerate(snapshot.messages):
        yield from _pojo_values(m.blocks, f"message {i}")
    for i, artifact in enumerate(snapshot.artifacts):
        yield f"artifact {i}", artifact


def _pojo_values(
    blocks: Iterable[ContentBlock], where: str = "a message"
) -> Iterator[tuple[str, object]]:
    for i, block in enumerate(blocks):
        if isinstance(block, PojoBlock):
            yield f"{where} block {i}", block.value
