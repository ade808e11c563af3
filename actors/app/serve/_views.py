"""What the HTTP API answers about stored conversations, as plain JSON-ready values.

These functions read the store and count tokens, so the app calls them off its event loop.
A conversation of another user is read exactly like a missing one: ``None``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from parlour.runtime import ContentFormatter, ConversationContext, ModelSpec, Transcript
from parlour.runtime.blocks import (
    ReasoningBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from parlour.runtime.errors import ParlourError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot, encode_snapshot
from parlour.stores import ConversationSummary, PersistentStore

from ...agent._history import entries, stopped_early
from ...agent._ledger import ModelCallRecord, decode_entries

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
    snapshot: ConversationPersistenceSnapshot,
    spec: ModelSpec,
    formatter: ContentFormatter | None = None,
) -> dict[str, Any]:
    """A conversation as the inspector shows it: messages (thinking left out), the
    transcript, the token count against the model's window, the usage ledger saved with it
    (so it reads the same after a restart, and for turns another process ran), whether its
    last turn stopped early (``interrupted``), and, given the client's ``formatter``, what
    the model is sent (``prompt``)."""
    context = snapshot.to_conversation()
    prompt = prompt_view(snapshot.to_conversation(), formatter) if formatter else None
    return {
        "conversation_id": snapshot.conversation_id,
        "title": snapshot.title,
        "created_at": snapshot.created_at.isoformat(),
        "version": snapshot.stored_version,
        "messages": [_message(m) for m in snapshot.messages],
        "transcript": Transcript.render(context),
        "tokens": {"used": context.get_total_tokens(spec), "window": spec.max_context_tokens},
        "usage": [_entry(e) for e in decode_entries(snapshot.usage)],
        "interrupted": stopped_early(entries(snapshot.messages), snapshot.turn),
        "prompt": prompt,
    }


def prompt_view(context: ConversationContext, formatter: ContentFormatter) -> dict[str, Any]:
    """What the model is sent besides the messages: the system text (the head freezes at
    the first call, so every call saw this one) and the tools, each with the message it
    was announced at (0: in the head, from the first call on)."""
    try:
        prepared = context.prepare_messages_for_llm(formatter)
    except ParlourError as exc:  # a stored message no model could be sent: say so, not 500
        return {"system": f"(this conversation does not render: {exc})", "tools": []}
    tools = [_tool(d, 0) for d in prepared.tool_definitions]
    for at, turn in enumerate(prepared.turns, start=1):
        tools += [_tool(b, at) for b in turn.blocks if isinstance(b, ToolDefinitionBlock)]
    return {"system": prepared.system_text, "tools": tools}


def _tool(definition: ToolDefinitionBlock, announced_at: int) -> dict[str, Any]:
    return {
        "name": definition.name,
        "description": definition.description,
        "schema": msgspec.json.decode(definition.schema_json) if definition.schema_json else None,
        "announced_at": announced_at,
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
        "interrupted": False,
        "prompt": None,
    }


def _message(message: Any) -> dict[str, Any]:
    blocks = [msgspec.to_builtins(b) for b in message.blocks if not isinstance(b, _HIDDEN)]
    return {"role": message.role, "direction": message.direction, "blocks": blocks}


def _entry(entry: Any) -> dict[str, Any]:
    built: dict[str, Any] = msgspec.to_builtins(entry)
    built["kind"] = "model_call" if isinstance(entry, ModelCallRecord) else "compaction"
    return built


def page_of(
    summaries: list[ConversationSummary],
    fresh: list[str],
    cursor: int,
    limit: int,
    query: str = "",
) -> dict[str, Any]:
    """One page of the user's conversations, newest first (fresh ones, not stored yet,
    ahead of the stored ones); ``next`` is the cursor of the page after, or None. With a
    ``query``, only those whose title holds it (in any case; fresh ones have none)."""
    if query:
        folded = query.casefold()
        summaries = [s for s in summaries if folded in s.title.casefold()]
        fresh = []
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
    store: PersistentStore, conversation_id: str, user_id: str, labelled: int = 100
) -> list[dict[str, object]]:
    """The kept versions (number, save time, and for the ``labelled`` latest the step that
    made each: what its save added to the one before), oldest first.

    Raises:
        NotImplementedError: the store said it keeps no version history.
    """
    kept = list(reversed(store.get_version_history(conversation_id, user_id)))  # oldest first
    found: list[dict[str, object]] = [
        {"version": v.version, "saved_at": v.saved_at.isoformat(), "step": ""} for v in kept
    ]
    before: list[Any] | None = None
    for row, version in list(zip(found, kept, strict=True))[-labelled - 1 :]:
        snapshot = load_version(store, conversation_id, user_id, version.version)
        messages = snapshot.messages if snapshot is not None else []
        if before is not None or row is found[0]:
            row["step"] = step_of(before or [], messages)
        before = messages
    return found


def step_of(before: list[Any], after: list[Any]) -> str:
    """What a save did, in words: the messages it added, or a compaction."""
    if len(after) < len(before):
        return "compacted"
    added = after[len(before) :]
    if not added:
        return "saved (usage or state, no new message)"
    return "; ".join(_said(m) for m in added)


def _said(message: Any) -> str:
    blocks = message.blocks
    calls = [b.name for b in blocks if isinstance(b, ToolUseBlock)]
    results = [b for b in blocks if isinstance(b, ToolResultBlock)]
    if calls:
        return "model called " + ", ".join(calls)
    if results:
        errors = sum(1 for r in results if r.is_error)
        return f"{len(results)} tool result(s)" + (f", {errors} failed" if errors else "")
    who = "summary" if message.app_authored else message.role
    if any(isinstance(b, TextBlock) for b in blocks):
        return {"user": "user message", "assistant": "model answered"}.get(who, f"{who} text")
    return f"{who} message"


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
