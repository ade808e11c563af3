"""One writer process per directory, any number of readers beside it: a second writer is
refused with the holder's pid; a read-only store in another process sees every commit,
survives the writer growing the map, and writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from parlour.runtime import ConversationContext
from parlour.runtime.errors import IllegalStateError
from parlour.stores import LmdbStore

SECOND_WRITER = """
import sys
from parlour.stores import LmdbStore
try:
    LmdbStore(sys.argv[1])
except Exception as exc:
    print(type(exc).__name__, exc)
else:
    print("opened")
"""

READER = """
import sys
from parlour.runtime import ConversationContext
from parlour.stores import LmdbStore

store = LmdbStore(sys.argv[1], readonly=True, map_size=1 << 20)  # grows as the writer does
for line in sys.stdin:  # one command a line, one answer a line
    command, _, arg = line.strip().partition(" ")
    try:
        if command == "load":
            snapshot = store.load(arg, "alice")
            print(None if snapshot is None else snapshot.messages[-1].raw_content, flush=True)
        elif command == "list":
            print(",".join(s.conversation_id for s in store.list_conversations(arg)), flush=True)
        elif command == "write":
            c = ConversationContext(arg, user_id="alice")
            store.create_context(c.to_snapshot(), "alice")
            print("written", flush=True)
    except Exception as exc:
        print(type(exc).__name__, exc, flush=True)
"""


def _context(cid: str, text: str) -> ConversationContext:
    c = ConversationContext(cid, user_id="alice")
    c.add_user_message(text)
    return c


def test_a_second_writing_process_is_refused_naming_the_directory_and_holder(
    tmp_path: Path,
) -> None:
    with LmdbStore(tmp_path) as store:
        c = _context("c1", "kept")
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        answer = subprocess.run(
            [sys.executable, "-c", SECOND_WRITER, str(tmp_path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert answer.startswith("StoreInUseError")  # an IllegalStateError
        assert str(tmp_path) in answer and f"by process {os.getpid()}" in answer
        c.add_user_message("still mine")
        assert store.save_context(c.to_snapshot(), "alice") == 2
    with LmdbStore(tmp_path) as reopened:  # closing released the directory
        loaded = reopened.load("c1", "alice")
        assert loaded is not None and [m.raw_content for m in loaded.messages] == [
            "kept",
            "still mine",
        ]


def test_a_second_writing_store_in_the_same_process_is_refused(tmp_path: Path) -> None:
    with LmdbStore(tmp_path), pytest.raises(IllegalStateError, match="already open for writing"):
        LmdbStore(tmp_path)


class _Reader:
    def __init__(self, path: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", READER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, line: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()  # blocks on the pipe: no sleeping


@pytest.fixture
def reader_beside_writer(tmp_path: Path) -> Iterator[tuple[LmdbStore, _Reader]]:
    store = LmdbStore(tmp_path, map_size=1 << 20)
    c = _context("c1", "first")
    store.create_context(c.to_snapshot(), "alice")
    reader = _Reader(tmp_path)
    yield store, reader
    assert reader.process.stdin is not None and reader.process.stdout is not None
    reader.process.stdin.close()
    reader.process.wait(timeout=30)
    reader.process.stdout.close()
    store.close()


def test_a_read_only_process_sees_what_the_writer_committed(
    reader_beside_writer: tuple[LmdbStore, _Reader],
) -> None:
    store, reader = reader_beside_writer
    assert reader.ask("load c1") == "first"
    c = _context("c1", "first")
    c.add_user_message("second")
    c.stored_version = 1
    store.save_context(c.to_snapshot(), "alice")
    store.create_context(_context("c2", "other").to_snapshot(), "alice")
    assert reader.ask("load c1") == "second"
    assert reader.ask("list alice") == "c2,c1"
    assert reader.ask("load nope") == "None"


def test_a_read_only_process_survives_the_writer_growing_the_map(
    reader_beside_writer: tuple[LmdbStore, _Reader],
) -> None:
    store, reader = reader_beside_writer
    assert reader.ask("load c1") == "first"
    before = store.statistics().map_size
    for i in range(40):  # ~8 MB against a 1 MB map
        store.create_context(_context(f"big{i}", "x" * 200_000).to_snapshot(), "alice")
    assert store.statistics().map_size > before
    assert reader.ask("load big39") == "x" * 200_000
    assert reader.ask("load c1") == "first"


def test_a_read_only_store_refuses_writes_and_writes_nothing(
    reader_beside_writer: tuple[LmdbStore, _Reader],
) -> None:
    store, reader = reader_beside_writer
    answer = reader.ask("write c9")
    assert answer.startswith("IllegalStateError") and "read-only" in answer
    assert not store.exists("c9", "alice")


def test_a_read_only_open_of_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "mistyped"
    with pytest.raises(FileNotFoundError, match="no parlour store at"):
        LmdbStore(missing, readonly=True)
    assert not missing.exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no parlour store at"):
        LmdbStore(tmp_path / "empty", readonly=True)
    assert list((tmp_path / "empty").iterdir()) == []


def test_a_second_store_on_a_directory_open_in_this_process_is_refused_clearly(
    tmp_path: Path,
) -> None:
    with LmdbStore(tmp_path) as writer:
        writer.create_context(_context("c1", "first").to_snapshot(), "alice")
        with pytest.raises(IllegalStateError, match="already open in this process"):
            LmdbStore(tmp_path, readonly=True)
        assert writer.exists("c1", "alice")
