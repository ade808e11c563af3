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
from typing import TypeVar

import lmdb
import msgspec
from rich.console import Console
from rich.progress import track
from rich.table import Table

from parlour.runtime import Transcript, dangling_calls
from parlour.runtime.errors import CorruptSnapshotError, IllegalStateError
from parlour.runtime.snapshots import (
    ConversationPersistenceSnapshot,
    MessageSnapshot,
    decode_snapshot,
    encode_snapshot,
    repaired_messages,
)
from parlour.stores import LmdbStore, MemoryStore

T = TypeVar("T")
EXPORT_FORMAT = "parlour-conversation"
EXPORT_VERSION = 1
COMMANDS = ("list", "show", "history", "export", "import", "delete", "fsck")


class AdminError(Exception):
    """Bad input to a store command: the one line the user sees."""


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


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser], data: Path) -> None:
    """Add the store commands to ``commands``; ``data`` is the default data directory."""

    def command(name: str, text: str, *ids: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=text, description=text)
        for arg in ids:
            parser.add_argument(arg, type=Path if arg == "file" else str)
        parser.add_argument("--data-dir", type=Path, default=data, help=f"default: {data}")
        return parser

    command("list", "list a user's stored conversations", "user_id").add_argument(
        "--limit", type=int, default=None
    )
    show = command("show", "show a stored conversation", "user_id", "conversation_id")
    show.add_argument("--version", type=int, default=None, help="a kept version")
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

    Bad input (a missing, unreadable or non-directory data dir, a corrupt store, an
    unknown user or id, a bad export file) is one line on stderr and status 1.
    """
    command: Callable[[argparse.Namespace, Console], int] = _RUNNERS[args.command]
    try:
        return command(args, Console(width=None if sys.stdout.isatty() else 160))
    except (AdminError, FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        return _refused(args.command, str(exc))
    except (IllegalStateError, CorruptSnapshotError, ValueError, NotImplementedError) as exc:
        return _refused(args.command, str(exc))  # msgspec.DecodeError is a ValueError
    except (lmdb.Error, OSError) as exc:
        return _refused(args.command, f"the store at {args.data_dir} cannot be used: {exc}")


def _refused(command: str, message: str) -> int:
    print(f"parlour {command}: {message.splitlines()[0] if message else 'failed'}", file=sys.stderr)
    return 1


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
    if data_dir.exists() and not data_dir.is_dir():
        raise AdminError(f"{data_dir} is a file, not a parlour data directory.")
    if data_dir.is_dir() and not os.access(data_dir, os.R_OK | os.X_OK):
        raise AdminError(f"{data_dir} cannot be read (permission denied).")
    if not create and not (data_dir / "data.mdb").is_file():
        where = "no such directory" if not data_dir.exists() else "the directory holds none"
        raise AdminError(f"There is no parlour store at {data_dir} ({where}).")
    return LmdbStore(data_dir, readonly=not write, now=now)


def _loaded(
    store: LmdbStore, user: str, cid: str, version: int | None = None
) -> ConversationPersistenceSnapshot:
    found = store.load(cid, user) if version is None else store.load_version(cid, version, user)
    if found is None:
        kept = "" if version is None else f" at version {version}"
        raise AdminError(f"User {user} has no conversation {cid}{kept} in {store.path}.")
    return found


# -- read-only commands -------------------------------------------------------------------


def _list(args: argparse.Namespace, console: Console) -> int:
    with _open(args.data_dir) as store:
        found = store.list_conversations(args.user_id, limit=args.limit)
    if not found:
        raise AdminError(f"User {args.user_id} has no conversations in {args.data_dir}.")
    table = Table(title=f"{args.user_id}'s conversations, newest first")
    for column in ("id", "title", "updated (UTC)", "created (UTC)"):
        table.add_column(column, no_wrap=column == "id")
    for s in found:
        table.add_row(s.conversation_id, s.title, _when(s.updated_at), _when(s.created_at))
    console.print(table)
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
        table.add_row(str(index), message.role, _said(message))
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
        table.add_row(str(v.version), _when(v.saved_at))
    console.print(table)
    return 0


def _export(args: argparse.Namespace, console: Console) -> int:
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
        f"started {_when(snapshot.created_at)} UTC.\n\n```text\n{transcript.rstrip()}\n```\n"
    )


def _fsck(args: argparse.Namespace, console: Console) -> int:
    with _open(args.data_dir, write=args.quarantine or args.repair) as store:
        found = store.undecodable()
        for cid, _ in found if args.quarantine else ():
            store.quarantine(cid)
        interrupted = store.interrupted()
        if args.repair:
            interrupted = [(cid, user, _repair(store, cid, user)) for cid, user, _ in interrupted]
    return max(_undecodable(found, args, console), _interrupted(interrupted, args, console))


def _undecodable(found: list[tuple[str, str]], args: argparse.Namespace, console: Console) -> int:
    if not found:
        console.print(f"{args.data_dir}: every record decodes.")
        return 0
    table = Table(title=f"{len(found)} records that do not decode")
    table.add_column("id", no_wrap=True)
    table.add_column("why")
    for cid, why in found:
        table.add_row(cid, why)
    console.print(table)
    if args.quarantine:
        console.print(f"quarantined {len(found)} (LmdbStore.quarantined(id) gives them back)")
        return 0
    print(f"parlour fsck: {len(found)} damaged; --quarantine moves them away", file=sys.stderr)
    return 1


def _interrupted(
    found: list[tuple[str, str, int]], args: argparse.Namespace, console: Console
) -> int:
    if not found:
        console.print(f"{args.data_dir}: every tool call has its result.")
        return 0
    what = "repaired" if args.repair else "interrupted"
    table = Table(title=f"{len(found)} conversations {what}: tool calls without a result")
    table.add_column("id", no_wrap=True)
    table.add_column("user", no_wrap=True)
    table.add_column("calls repaired" if args.repair else "calls unanswered", justify="right")
    for cid, user, calls in found:
        table.add_row(cid, user, str(calls))
    console.print(table)
    if args.repair:
        console.print(f"repaired {len(found)} (each call answered as interrupted)")
        return 0
    print(f"parlour fsck: {len(found)} interrupted; --repair answers their calls", file=sys.stderr)
    return 1


def _repair(store: LmdbStore, cid: str, user: str) -> int:
    """Store ``cid`` as a restore reads it, each dangling call answered as interrupted, as a
    new version fenced on the one loaded; how many calls it answered."""
    snapshot = _loaded(store, user, cid)
    calls = len(dangling_calls(snapshot.messages))
    if calls:
        snapshot.messages = repaired_messages(snapshot.messages)
        store.save_context(snapshot, user)
    return calls


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


def _when(moment: dt.datetime) -> str:
    return f"{moment.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S}"


def _said(message: MessageSnapshot) -> str:
    if message.raw_content is not None:
        return message.raw_content
    return " ".join(str(getattr(b, "text", None) or type(b).__name__) for b in message.blocks)


_RUNNERS: dict[str, Callable[[argparse.Namespace, Console], int]] = {
    "list": _list,
    "show": _show,
    "history": _history,
    "export": _export,
    "import": _import,
    "delete": _delete,
    "fsck": _fsck,
}
