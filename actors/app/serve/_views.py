"""What the HTTP API answers about stored conversations, as plain JSON-ready values.

These functions read the store and count tokens, so the app calls them off its event loop.
A conversation of another user is read exactly like a missing one: ``None``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from parlour.runtime import ModelSpec, Transcript
from parlour.runtime.blocks import ReasoningBlock, RedactedThinkingBlock, ThinkingBlock
from parlour.runtime.snapshots import ConversationPersistenceSnapshot, encode_snapshot
from parlour.stores import ConversationSummary, PersistentStore

from ...agent._ledger import ModelCallRecord

__all__ = [
    "conversation_view",
    "empty_view",
    "export",
    "keeps_history",
    "load_mine",
    "load_version",
    "page_of",
    "versions_of",
]

_HIDDEN = (ThinkingBlock, RedactedThinkingBlock, ReasoningBlock)


def load_mine(
    store: PersistentStore, conversation_id: str, user_id: str
) -> ConversationPersistenceSnapshot | None:
    """The user's stored conversation; None when missing and when another user's."""
    try:
        return store.load(conversation_id, user_id)
    except PermissionError:
        return None


def conversation_view(
    snapshot: ConversationPersistenceSnapshot, spec: ModelSpec, usage: list[Any]
) -> dict[str, Any]:
    """A conversation as the inspector shows it: messages (thinking left out), the
    transcript, the token count against the model's window, and the usage ledger."""
    context = snapshot.to_conversation()
    return {
        "conversation_id": snapshot.conversation_id,
        "title": snapshot.title,
        "created_at": snapshot.created_at.isoformat(),
        "version": snapshot.stored_version,
        "messages": [_message(m) for m in snapshot.messages],
        "transcript": Transcript.render(context),
        "tokens": {"used": context.get_total_tokens(spec), "window": spec.max_context_tokens},
        "usage": [_entry(e) for e in usage],
    }


def empty_view(conversation_id: str, spec: ModelSpec) -> dict[str, Any]:
    """A conversation created but not stored yet (its first turn stores it)."""
    return {
        "conversation_id": conversation_id,
        "title": "",
        "created_at": None,
        "version": 0,
        "messages": [],
        "transcript": "",
        "tokens": {"used": 0, "window": spec.max_context_tokens},
        "usage": [],
    }


def _message(message: Any) -> dict[str, Any]:
    blocks = [msgspec.to_builtins(b) for b in message.blocks if not isinstance(b, _HIDDEN)]
    return {"role": message.role, "direction": message.direction, "blocks": blocks}


def _entry(entry: Any) -> dict[str, Any]:
    built: dict[str, Any] = msgspec.to_builtins(entry)
    built["kind"] = "model_call" if isinstance(entry, ModelCallRecord) else "compaction"
    return built


def page_of(
    summaries: list[ConversationSummary], fresh: list[str], cursor: int, limit: int
) -> dict[str, Any]:
    """One page of the user's conversations, newest first (fresh ones, not stored yet,
    ahead of the stored ones); ``next`` is the cursor of the page after, or None."""
    rows: list[dict[str, Any]] = [{"conversation_id": cid, "title": ""} for cid in fresh]
    rows += [
        {
            "conversation_id": s.conversation_id,
            "title": s.title,
            "created_at": s.created_at.isoformat(),
            "updated_at": s.updated_at.isoformat(),
        }
        for s in summaries
        if s.conversation_id not in fresh
    ]
    page = rows[cursor : cursor + limit]
    after = cursor + limit
    return {"conversations": page, "next": after if after < len(rows) else None}


def keeps_history(store: PersistentStore) -> bool:
    """Whether the store answers version-history reads: every ``PersistentStore`` has them
    (one keeping no versions answers none); one that raises ``NotImplementedError`` (asked
    once, on no conversation) is shown as keeping none."""
    try:
        store.get_version_history("parlour-probe", "parlour-probe")
    except NotImplementedError:
        return False
    except Exception:  # a store that looked the probe up and refused it does keep history
        return True
    return True


def versions_of(
    store: PersistentStore, conversation_id: str, user_id: str
) -> list[dict[str, object]]:
    """The kept versions (number and save time), oldest first.

    Raises:
        NotImplementedError: the store said it keeps no version history.
    """
    kept = store.get_version_history(conversation_id, user_id)  # most recent first
    return [{"version": v.version, "saved_at": v.saved_at.isoformat()} for v in reversed(kept)]


def load_version(
    store: PersistentStore, conversation_id: str, user_id: str, version: int | dt.datetime
) -> ConversationPersistenceSnapshot | None:
    """The conversation as it was saved at ``version`` (its number, or a time: the version
    current then); None when missing or foreign.

    Raises:
        NotImplementedError: the store said it keeps no version history.
    """
    try:
        return store.load_version(conversation_id, version, user_id)
    except PermissionError:
        return None


def export(snapshot: ConversationPersistenceSnapshot) -> bytes:
    """The conversation's full record, as the store's own JSON snapshot format."""
    return encode_snapshot(snapshot)
