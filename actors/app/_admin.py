"""The store commands of ``parlour``: ``list``, ``show``, ``history``, ``export``, ``import``,
``delete`` and ``fsck`` (``--repair`` answers the calls a kill left unanswered), on an LmdbStore
data directory.

Read-only commands open the store ``readonly=True`` (they never create one and work beside
a running server); bad input is one line on stderr and exit status 1, never a traceback.
``import`` checks every version as a load would read it before it writes anything, writes
each at the time it was saved, and only into a directory that exists.

Why this module is long: every store command shares one way of opening the store and one
refusal path (one line, no traceback); splitting the commands apart would split those.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from rich.console import Console
from rich.progress import track
from rich.table import Table

from parlour.runtime import Transcript
from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import (
    ConversationPersistenceSnapshot,
    decode_snapshot,
    encode_snapshot,
)
from parlour.stores import LmdbStore, MemoryStore

from ._fsck import fsck
from ._guard import AdminError, existing_store, positive, store_dir
from ._listing import print_conversations, said, when

T = TypeVar("T")
EXPORT_FORMAT = "parlour-conversation"
EXPORT_VERSION = 1
COMMANDS = ("list", "show", "history", "export", "import", "delete", "fsck")


class ExportedVersion(msgspec.Struct, frozen=True, kw_only=True):
    version: int
    saved_at: dt.datetime
    snapshot: msgspec.Raw


class Exported(msgspec.Struct, frozen=True, kw_only=True):
    """An exported conversation: its stored snapshot exactly as stored (never revived),
    when that version was saved (None in exports that predate the field: the export's
    time stands in), and optionally its kept versions, oldest first."""

    format: str
    format_version: int
    conversation_id: str
    user_id: str
    exported_at: dt.datetime
    snapshot: msgspec.Raw
    versions: list[ExportedVersion] = msgspec.field(default_factory=list)
    saved_at: dt.datetime | None = None


def register(commands: argparse._SubParsersAction[Any], data: Path) -> None:
    """Add the store commands to ``commands``; ``data`` is the default data directory."""

    def command(name: str, text: str, *ids: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = commands.add_parser(name, help=text, description=text)
        for arg in ids:
            parser.add_argument(arg, type=Path if arg == "file" else str)
        parser.add_argument("--data-dir", type=Path, default=data, help=f"default: {data}")
        return parser

    listed = command("list", "list a user's stored conversations", "user_id")
    listed.add_argument("--limit", type=positive, default=None, help="at most this many")
    listed.add_argument("--json", action="store_true", help="a JSON array, one object each")
    show = command("show", "show a stored conversation", "user_id", "conversation_id")
    show.add_argument("--version", type=positive, default=None, help="a kept version")
    show.add_argument("--json", action="store_true", help="the stored snapshot as JSON")
    command("history", "list a conversation's kept versions", "user_id", "conversation_id")
    export = command("export", "write a conversation out", "user_id", "conversation_id")
    export.add_argument("--format", choices=("json", "markdown"), default="json")
    export.add_argument("--versions", action="store_true", help="json: every kept version")
    export.add_argument("--output", type=Path, default=None, help="a file (default: stdout)")
    imported = command("import", "read an exported conversation in", "user_id", "file")
    imported.add_argument("--as-new", action="store_true", help="under a freshly minted id")
    command("delete", "delete a stored conversation", "user_id", "conversation_id")
    fsck = command("fsck", "find records that do not decode and turns a kill interrupted")
    fsck.add_argument("--quarantine", action="store_true", help="move undecodable records away")
    fsck.add_argument(
        "--repair", action="store_true", help="answer interrupted tool calls, as a restore does"
    )


def run(args: argparse.Namespace) -> int:
    """Run the store command ``args.command``; returns the exit status.

    Raises:
        AdminError: bad input (a missing, unreadable or non-directory data dir, an unknown
            user, id or version, a bad export file); the store's own refusals pass through
            to ``parlour``'s one line (``_guard.refusal``).
    """
    command: Callable[[argparse.Namespace, Console], int] = _RUNNERS[args.command]
    try:
        return command(args, Console(width=None if sys.stdout.isatty() else 160))
    except (CorruptSnapshotError, ValueError, NotImplementedError, msgspec.DecodeError) as exc:
        raise AdminError(str(exc)) from None


def _open(
    data_dir: Path,
    *,
    write: bool = False,
    create: bool = False,
    now: Callable[[], dt.datetime] | None = None,
) -> LmdbStore:
    """The store at ``data_dir``: read-only unless ``write``; created only when ``create``;
    ``now`` stamps its saves (the wall clock by default).

    Raises:
        AdminError: the path is a file, cannot be read, or (unless ``create``) holds no store.
    """
    if data_dir.is_dir() and not os.access(data_dir, os.R_OK | os.X_OK):
        raise AdminError(f"{data_dir} cannot be read (permission denied).")
    checked = store_dir(data_dir) if create else existing_store(data_dir)
    return LmdbStore(checked, readonly=not write, now=now)


def _loaded(
    store: LmdbStore, user: str, cid: str, version: int | None = None
) -> ConversationPersistenceSnapshot:
    found = store.load(cid, user) if version is None else store.load_version(cid, version, user)
    if found is None and version is not None and store.load(cid, user) is not None:
        raise AdminError(
            f"Conversation {cid} keeps no version {version}: parlour history {user} {cid} "
            "lists the kept ones."
        )
    if found is None:
        raise AdminError(
            f"User {user} has no conversation {cid} in {store.path}: parlour list {user} "
            "lists theirs."
        )
    return found


# -- read-only commands -------------------------------------------------------------------


def _list(args: argparse.Namespace, console: Console) -> int:
    with _open(args.data_dir) as store:
        found = store.list_conversations(args.user_id, limit=args.limit)
    print_conversations(found, args.user_id, args.data_dir, args.json, console)
    return 0


def _show(args: argparse.Namespace, console: Console) -> int:
    with _open(args.data_dir) as store:
        snapshot = _loaded(store, args.user_id, args.conversation_id, args.version)
    if args.json:
        print(encode_snapshot(snapshot).decode())
        return 0
    table = Table(
        title=f"{snapshot.title or snapshot.conversation_id} (version {snapshot.stored_version})"
    )
    for column in ("#", "role", "said"):
        table.add_column(column)
    for index, message in enumerate(snapshot.messages):
        table.add_row(str(index), message.role, said(message))
    console.print(table)
    return 0


def _history(args: argparse.Namespace, console: Console) -> int:
    with _open(args.data_dir) as store:
        _loaded(store, args.user_id, args.conversation_id)
        versions = store.get_version_history(args.conversation_id, args.user_id)
    console.print(f"kept versions of {args.conversation_id}, newest first:")
    table = Table()
    table.add_column("version", justify="right")
    table.add_column("saved (UTC)")
    for v in versions:
        table.add_row(str(v.version), when(v.saved_at))
    console.print(table)
    return 0


def _export(args: argparse.Namespace, console: Console) -> int:
    if args.output is not None and args.output.is_dir():
        raise AdminError(f"--output {args.output} is a directory: name a file to write.")
    with _open(args.data_dir) as store:
        snapshot = _loaded(store, args.user_id, args.conversation_id)
        versions = _versions(store, args.user_id, args.conversation_id) if args.versions else []
        kept = store.get_version_history(args.conversation_id, args.user_id)  # newest first
    saved_at = kept[0].saved_at if kept and kept[0].version == snapshot.stored_version else None
    if args.format == "markdown":
        data = _markdown(snapshot).encode()
    else:
        data = msgspec.json.encode(
            Exported(
                format=EXPORT_FORMAT,
                format_version=EXPORT_VERSION,
                conversation_id=args.conversation_id,
                user_id=args.user_id,
                exported_at=dt.datetime.now(dt.UTC),
                snapshot=msgspec.Raw(encode_snapshot(snapshot)),
                versions=versions,
                saved_at=saved_at,
            )
        )
    if args.output is None:
        sys.stdout.write(data.decode() + "\n")
    else:
        args.output.write_bytes(data)
        print(f"exported {args.conversation_id} to {args.output}", file=sys.stderr)
    return 0


def _versions(store: LmdbStore, user: str, cid: str) -> list[ExportedVersion]:
    kept = []
    for v in _progress(reversed(store.get_version_history(cid, user)), "reading versions"):
        snapshot = store.load_version(cid, v.version, user)
        if snapshot is not None:  # pruned between the listing and the read
            raw = msgspec.Raw(encode_snapshot(snapshot))
            kept.append(ExportedVersion(version=v.version, saved_at=v.saved_at, snapshot=raw))
    return kept


def _markdown(snapshot: ConversationPersistenceSnapshot) -> str:
    transcript = Transcript.render(snapshot.to_conversation())
    return (
        f"# {snapshot.title or snapshot.conversation_id}\n\n"
        f"Conversation `{snapshot.conversation_id}`, version {snapshot.stored_version}, "
        f"started {when(snapshot.created_at)} UTC.\n\n```text\n{transcript.rstrip()}\n```\n"
    )


def _fsck(args: argparse.Namespace, console: Console) -> int:
    with _open(args.data_dir, write=args.quarantine or args.repair) as store:
        return fsck(store, args, console)


# -- writing commands ---------------------------------------------------------------------


def _delete(args: argparse.Namespace, console: Console) -> int:
    with _open(args.data_dir, write=True) as store:
        if not store.delete(args.conversation_id, args.user_id):
            raise AdminError(
                f"User {args.user_id} has no conversation {args.conversation_id} in "
                f"{args.data_dir}."
            )
    console.print(f"deleted {args.conversation_id} and its history")
    return 0


def _import(args: argparse.Namespace, console: Console) -> int:
    """Read an export in: every version checked as a load would read it before anything is
    written, each written at the time it was saved (so the history and the listing keep
    their dates), into an existing directory only (a mistyped path creates nothing)."""
    document = _read_export(args.file)
    cid = f"{document.conversation_id}-{uuid.uuid4().hex[:8]}" if args.as_new else None
    cid = cid or document.conversation_id
    try:
        saved = [(v.saved_at, _restamped(v.snapshot, cid, args.user_id)) for v in document.versions]
        current = _restamped(document.snapshot, cid, args.user_id)
        if not saved or encode_snapshot(saved[-1][1]) != encode_snapshot(current):
            saved.append((document.saved_at or document.exported_at, current))
        _check_loadable(saved, args.user_id)
    except (CorruptSnapshotError, ValueError) as exc:
        raise AdminError(
            f"{args.file} holds a conversation parlour cannot load; nothing was imported: {exc}"
        ) from None
    if not args.data_dir.is_dir():
        raise AdminError(
            f"There is no directory {args.data_dir}; nothing was imported (give the data "
            "directory of a store, or create the directory to start one there)."
        )
    clock = _Clock()
    with _open(args.data_dir, write=True, create=True, now=clock) as store:
        _check_free(store, cid, args.user_id)
        clock.at = saved[0][0]
        version = store.create_context(saved[0][1], args.user_id)
        for at, snapshot in _progress(saved[1:], "writing versions"):
            clock.at, snapshot.stored_version = at, version
            version = store.save_context(snapshot, args.user_id)
    console.print(
        f"imported {document.conversation_id} as {cid} for {args.user_id} ({len(saved)} versions)"
    )
    return 0


class _Clock:
    """The import's wall clock: the time the version being written was saved."""

    def __init__(self) -> None:
        self.at = dt.datetime.now(dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.at


def _check_loadable(
    saved: list[tuple[dt.datetime, ConversationPersistenceSnapshot]], user: str
) -> None:
    """Save every version into a store in memory first, which refuses (as every store does)
    what a load would not read back: nesting, lone surrogates, ledger entries included.

    Raises:
        ValueError: a version would not load back; nothing was written anywhere.
    """
    trial = MemoryStore()
    version = trial.create_context(saved[0][1], user)
    for _, snapshot in saved[1:]:
        stamped = msgspec.structs.replace(snapshot, stored_version=version)
        version = trial.save_context(stamped, user)


def _read_export(file: Path) -> Exported:
    try:
        document = msgspec.json.decode(file.read_bytes(), type=Exported)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise AdminError(f"{file} is not a parlour export: {exc}") from None
    except RecursionError:
        raise AdminError(
            f"{file} is not a parlour export: it nests deeper than any parlour writes; "
            "nothing was imported."
        ) from None
    if document.format != EXPORT_FORMAT or document.format_version > EXPORT_VERSION:
        raise AdminError(
            f"{file} is {document.format} version {document.format_version}; this parlour "
            f"reads {EXPORT_FORMAT} up to version {EXPORT_VERSION}."
        )
    return document


def _restamped(raw: msgspec.Raw, cid: str, user: str) -> ConversationPersistenceSnapshot:
    """The stored form decoded structurally (no class is revived), under ``cid`` for
    ``user``, never stored."""
    snapshot = decode_snapshot(bytes(raw), cid)
    snapshot.conversation_id, snapshot.user_id, snapshot.stored_version = cid, user, 0
    return snapshot


def _check_free(store: LmdbStore, cid: str, user: str) -> None:
    try:
        taken = store.exists(cid, user) or store.version_of(cid, user) is not None
    except PermissionError:
        raise AdminError(
            f"Conversation {cid} exists in {store.path} for another user; nothing was "
            "imported (--as-new imports it under a fresh id)."
        ) from None
    if taken:
        raise AdminError(
            f"User {user} already has a conversation {cid}; nothing was imported (--as-new "
            "imports it under a fresh id)."
        )


def _progress(items: Iterable[T], what: str) -> Iterable[T]:
    """``items``, with a progress bar on stderr when it is a terminal."""
    listed = list(items)
    return track(
        listed,
        description=what,
        console=Console(stderr=True),
        transient=True,
        disable=not sys.stderr.isatty() or len(listed) < 50,
    )


_RUNNERS: dict[str, Callable[[argparse.Namespace, Console], int]] = {
    "list": _list,
    "show": _show,
    "history": _history,
    "export": _export,
    "import": _import,
    "delete": _delete,
    "fsck": _fsck,
}
