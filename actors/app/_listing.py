"""How the store commands print what they read: ``parlour list`` as a table on a terminal,
tab-separated lines when piped, or JSON; a stored message as what a person reads (a tool
call's name and arguments, a result's content), not the blocks' class names."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import msgspec
from rich.console import Console
from rich.table import Table

from parlour.runtime.blocks import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.snapshots import MessageSnapshot
from parlour.stores import ConversationSummary

__all__ = ["print_conversations", "said", "when"]


class Listed(msgspec.Struct, frozen=True):
    """One conversation of ``parlour list --json``."""

    conversation_id: str
    title: str
    updated_at: dt.datetime
    created_at: dt.datetime


def print_conversations(
    found: list[ConversationSummary], user: str, data_dir: Path, as_json: bool, console: Console
) -> None:
    """``found`` as JSON, a table on a terminal, or one tab-separated line each (id, updated,
    created, title) when stdout is a pipe; none is a line saying so (``[]`` as JSON)."""
    if as_json:
        rows = [Listed(s.conversation_id, s.title, s.updated_at, s.created_at) for s in found]
        print(msgspec.json.encode(rows).decode())
    elif not found:
        print(f"User {user} has no conversations in {data_dir}.")
    elif not sys.stdout.isatty():
        for s in found:
            title = " ".join(s.title.split())  # one line, no tab: the columns stay columns
            print(f"{s.conversation_id}\t{when(s.updated_at)}\t{when(s.created_at)}\t{title}")
    else:
        table = Table(title=f"{user}'s conversations, newest first")
        for column in ("id", "title", "updated (UTC)", "created (UTC)"):
            table.add_column(column, no_wrap=column == "id")
        for s in found:
            table.add_row(s.conversation_id, s.title, when(s.updated_at), when(s.created_at))
        console.print(table)


def said(message: MessageSnapshot) -> str:
    """What ``message`` says: its text, each tool call as ``name(arguments)``, each result's
    content (``error:`` first when the tool failed), other blocks by their kind."""
    if message.raw_content is not None:
        return message.raw_content
    return "\n".join(_block(b) for b in message.blocks)


def _block(block: object) -> str:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ToolUseBlock):
        return f"-> {block.name}({block.input_json})"
    if isinstance(block, ToolResultBlock):
        return f"<- {'error: ' if block.is_error else ''}{block.content}"
    if isinstance(block, ThinkingBlock):
        return f"(thinking) {block.text}"
    return f"[{type(block).__name__.removesuffix('Block').lower()}]"


def when(moment: dt.datetime) -> str:
    return f"{moment.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S}"
