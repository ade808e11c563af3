"""PostgresStore on a real server: corrupt rows, the schema, history kept as what each save
wrote, retention, and many writers (threads, stores, processes) fenced by the version."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator

import msgspec
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.runtime import ConversationContext, IncomingMessage, OutgoingMessage
from parlour.runtime.blocks import TextBlock
from parlour.runtime.errors import CorruptSnapshotError, IllegalStateError, StaleVersionError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot, encode_snapshot
from parlour.stores import PostgresStore


class Clock:
    """A wall clock tests move by hand; every reading is a microsecond later than the last."""

    def __init__(self) -> None:
        self.at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        self.at += dt.timedelta(microseconds=1)
        return self.at


@pytest.fixture
def store(postgres_conninfo: str) -> Iterator[PostgresStore]:
    made = PostgresStore(postgres_conninfo)
    yield made
    made.close()


def _sql(conninfo: str, query: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def _conversation(n: int, cid: str = "c1") -> ConversationContext:
    c = ConversationContext(cid, user_id="alice")
    for i in range(n):
        c.add_user_message(f"question {i}")
        c.add_message(IncomingMessage(f"answer {i}"))
    return c


def _message_rows(conninfo: str) -> int:
    [(count,)] = _sql(conninfo, "SELECT count(*) FROM parlour_messages")
    return int(str(count))


# -- corrupt and mismatched rows -------------------------------------------------------------


def test_a_body_that_does_not_decode_is_corrupt_and_other_conversations_still_load(
    store: PostgresStore, postgres_conninfo: str
) -> None:
    store.create_context(_conversation(1, "bad").to_snapshot(), "alice")
    store.create_context(_conversation(1, "good").to_snapshot(), "alice")
    _sql(
        postgres_conninfo,
        "UPDATE parlour_versions SET body = %s WHERE conversation_id = 'bad'",
        b"{",
    )
    with pytest.raises(CorruptSnapshotError, match="Stored conversation bad does not decode"):
        store.load("bad", "alice")
    with pytest.raises(CorruptSnapshotError, match="conversation bad"):
        store.load_version("bad", 1, "alice")
    loaded = store.load("good", "alice")
    assert loaded is not None and loaded.messages[0].raw_content == "question 0"


def test_a_message_row_that_does_not_decode_or_is_missing_is_corrupt(
    store: PostgresStore, postgres_conninfo: str
) -> None:
    store.create_context(_conversation(2).to_snapshot(), "alice")
    _sql(postgres_conninfo, "UPDATE parlour_messages SET message = %s WHERE idx = 1", b"[")
    with pytest.raises(CorruptSnapshotError, match="conversation c1 does not decode"):
        store.load("c1", "alice")
    _sql(postgres_conninfo, "DELETE FROM parlour_messages WHERE idx = 1")
    with pytest.raises(CorruptSnapshotError, match="Stored conversation c1 has 3 of its 4"):
        store.load("c1", "alice")


@pytest.mark.parametrize(
    ("cid", "user"), [("c2", "alice"), ("c1", "bob")], ids=["another id", "another owner"]
)
def test_a_body_naming_another_conversation_or_owner_than_its_row_is_corrupt(
    store: PostgresStore, postgres_conninfo: str, cid: str, user: str
) -> None:
    store.create_context(_conversation(1).to_snapshot(), "alice")
    foreign_body = ConversationContext(cid, user_id=user).to_snapshot()
    _sql(postgres_conninfo, "UPDATE parlour_versions SET body = %s", encode_snapshot(foreign_body))
    with pytest.raises(
        CorruptSnapshotError,
        match="conversation c1 is damaged: its body names another conversation or user",
    ):
        store.load("c1", "alice")


# -- the schema ------------------------------------------------------------------------------


def test_a_fresh_database_gets_the_tables_at_the_current_layout(
    store: PostgresStore, postgres_conninfo: str
) -> None:
    assert _sql(postgres_conninfo, "SELECT version FROM parlour_schema") == [(3,)]
    store.create_context(_conversation(1).to_snapshot(), "alice")
    with PostgresStore(postgres_conninfo) as reopened:
        assert reopened.version_of("c1", "alice") == 1
    assert _sql(postgres_conninfo, "SELECT version FROM parlour_schema") == [(3,)]


def test_a_database_laid_out_by_a_newer_parlour_is_refused_naming_it_without_the_password(
    store: PostgresStore, postgres_conninfo: str
) -> None:
    _sql(postgres_conninfo, "UPDATE parlour_schema SET version = 99")
    with pytest.raises(IllegalStateError, match=r"layout 99, newer than .* \(3\); upgrade") as e:
        PostgresStore(postgres_conninfo + " password=hunter2")  # trust auth ignores it
    assert "hunter2" not in str(e.value) and "search_path" in str(e.value)


def test_stores_opening_an_empty_database_at_once_lay_it_out_once(postgres_conninfo: str) -> None:
    barrier = threading.Barrier(4)
    opened: list[PostgresStore] = []
    failures: list[BaseException] = []

    def open_one() -> None:
        barrier.wait()
        try:
            opened.append(PostgresStore(postgres_conninfo, max_connections=1))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for made in opened:
        made.close()
    assert failures == [] and len(opened) == 4
    assert _sql(postgres_conninfo, "SELECT version FROM parlour_schema") == [(3,)]


def test_a_closed_store_refuses_every_call_and_closing_again_is_harmless(
    postgres_conninfo: str,
) -> None:
    store = PostgresStore(postgres_conninfo)
    store.create_context(_conversation(1).to_snapshot(), "alice")
    store.close()
    store.close()
    for attempt in (
        lambda: store.load("c1", "alice"),
        lambda: store.save_context(_conversation(1).to_snapshot(), "alice"),
        lambda: store.list_conversations("alice"),
        lambda: store.prune(),
    ):
        with pytest.raises(IllegalStateError, match=r"PostgresStore on .* is closed"):
            attempt()


def test_retention_by_age_alone_is_applied_by_saves_too(postgres_conninfo: str) -> None:
    clock = Clock()
    keep = dt.timedelta(hours=1)
    with PostgresStore(postgres_conninfo, keep_versions=None, keep_for=keep, now=clock) as store:
        c = _conversation(1)
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        clock.at += dt.timedelta(hours=2)
        while c.stored_version < 64:
            c.stored_version = store.save_context(c.to_snapshot(), "alice")
        assert 1 not in [v.version for v in store.get_version_history("c1", "alice")]
        assert store.load_version("c1", 2, "alice") is not None


def test_the_package_imports_without_psycopg_and_the_store_then_says_what_to_install() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('psycopg', 'psycopg_pool'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from parlour.stores import PostgresStore\n"
        "try:\n"
        "    PostgresStore('dbname=x')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install -e '.[postgres]'" in done.stdout


# -- history as what each save wrote ---------------------------------------------------------


def test_a_version_costs_the_messages_its_save_wrote_and_every_version_loads_exactly(
    store: PostgresStore, postgres_conninfo: str
) -> None:
    c = _conversation(5)  # ten messages
    saved = [c.to_snapshot()]
    c.stored_version = store.create_context(saved[-1], "alice")
    for i in range(5):
        c.add_user_message(f"follow-up {i}")
        saved.append(c.to_snapshot())
        c.stored_version = store.save_context(saved[-1], "alice")
    assert _message_rows(postgres_conninfo) == 15  # not 10 + 11 + ... + 15
    c.messages[3] = OutgoingMessage("edited")  # rewrites messages 3.. (12 of 15)
    saved.append(c.to_snapshot())
    c.stored_version = store.save_context(saved[-1], "alice")
    assert _message_rows(postgres_conninfo) == 27
    for version, snapshot in enumerate(saved, start=1):
        expected = msgspec.structs.replace(snapshot, stored_version=version)
        assert store.load_version("c1", version, "alice") == expected


def test_a_save_after_a_load_by_another_store_writes_only_what_changed(
    store: PostgresStore, postgres_conninfo: str
) -> None:
    store.create_context(_conversation(5).to_snapshot(), "alice")
    with PostgresStore(postgres_conninfo) as other:
        loaded = other.load("c1", "alice")
        assert loaded is not None
        c = loaded.to_conversation()
        c.add_user_message("one more")
        assert other.save_context(c.to_snapshot(), "alice") == 2
    assert _message_rows(postgres_conninfo) == 11
    reloaded = store.load("c1", "alice")
    assert reloaded is not None and reloaded.messages[-1].raw_content == "one more"


# Each step: ("add", text) appends, ("flag", i) flags message i, ("edit", i) replaces
# message i, ("drop", i) removes message i, ("swap", i) replaces message i's first block in
# place, ("reload", 0) goes on from the stored copy; the conversation is saved after each.
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.text(max_size=8)),
        st.tuples(st.sampled_from(["flag", "edit", "drop", "swap", "reload"]), st.integers(0, 30)),
    ),
    max_size=20,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=_steps)
def test_any_sequence_of_edits_and_saves_keeps_every_version_exactly(
    store: PostgresStore, postgres_conninfo: str, steps: list[tuple[str, object]]
) -> None:
    cid = uuid.uuid4().hex  # one store for every example: a fresh conversation each
    c = _conversation(2, cid)
    saved: dict[int, ConversationPersistenceSnapshot] = {}
    c.stored_version = store.create_context(c.to_snapshot(), "alice")
    saved[c.stored_version] = c.to_snapshot()
    for op, arg in steps:
        c = _step(store, c, op, arg)
        snapshot = c.to_snapshot()
        c.stored_version = store.save_context(snapshot, "alice")
        saved[c.stored_version] = snapshot
    with PostgresStore(postgres_conninfo, max_connections=1) as fresh:  # nothing remembered
        for version, snapshot in saved.items():
            expected = msgspec.structs.replace(snapshot, stored_version=version)
            assert fresh.load_version(cid, version, "alice") == expected
        last = max(saved)
        assert fresh.load(cid, "alice") == msgspec.structs.replace(saved[last], stored_version=last)


def _step(
    store: PostgresStore, c: ConversationContext, op: str, arg: object
) -> ConversationContext:
    if op == "add":
        c.add_user_message(f"said {arg}")
    elif op == "reload":
        loaded = store.load(c.conversation_id or "", "alice")
        assert loaded is not None
        return loaded.to_conversation()
    elif c.messages:
        i = int(str(arg)) % len(c.messages)
        if op == "flag":
            c.messages[i].set_cache(not c.messages[i].cache)
        elif op == "edit":
            c.messages[i] = OutgoingMessage(f"edited {i}")
        elif op == "swap" and c.messages[i].blocks:
            c.messages[i].blocks[0] = TextBlock(text=f"swapped {arg}")
        else:
            del c.messages[i]
    return c


# -- retention -------------------------------------------------------------------------------


def test_retention_keeps_the_newest_versions_and_drops_what_only_older_ones_read(
    postgres_conninfo: str,
) -> None:
    with PostgresStore(postgres_conninfo, keep_versions=3) as store:
        c = _conversation(1)
        saved = [c.to_snapshot()]
        c.stored_version = store.create_context(saved[-1], "alice")
        for i in range(5):
            c.messages[-1] = OutgoingMessage(f"rewritten {i}")  # each save replaces one row
            saved.append(c.to_snapshot())
            c.stored_version = store.save_context(saved[-1], "alice")
        assert store.prune() == 3
        assert [v.version for v in store.get_version_history("c1", "alice")] == [6, 5, 4]
        assert store.load_version("c1", 3, "alice") is None
        for version in (4, 5, 6):
            expected = msgspec.structs.replace(saved[version - 1], stored_version=version)
            assert store.load_version("c1", version, "alice") == expected
        assert _message_rows(postgres_conninfo) == 1 + 3  # the first message, then 4, 5, 6's
        assert store.prune() == 0


def test_retention_by_age_drops_old_versions_but_never_the_current_one(
    postgres_conninfo: str,
) -> None:
    clock = Clock()
    with PostgresStore(
        postgres_conninfo, keep_versions=None, keep_for=dt.timedelta(hours=1), now=clock
    ) as store:
        c = _conversation(1)
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        clock.at += dt.timedelta(hours=2)
        c.add_user_message("later")
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        assert store.prune() == 1
        assert [v.version for v in store.get_version_history("c1", "alice")] == [2]
        clock.at += dt.timedelta(days=30)
        assert store.prune() == 0
        loaded = store.load("c1", "alice")
        assert loaded is not None and loaded.messages[-1].raw_content == "later"


def test_a_retention_of_fewer_than_one_version_is_refused(postgres_conninfo: str) -> None:
    with pytest.raises(ValueError, match="keep_versions must be at least 1"):
        PostgresStore(postgres_conninfo, keep_versions=0)


def test_saves_prune_their_own_conversation_every_64_versions(postgres_conninfo: str) -> None:
    with PostgresStore(postgres_conninfo, keep_versions=10) as store:
        c = _conversation(1)
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        while c.stored_version < 64:
            c.stored_version = store.save_context(c.to_snapshot(), "alice")
        history = store.get_version_history("c1", "alice")
        assert [v.version for v in history] == list(range(64, 54, -1))


# -- many writers ----------------------------------------------------------------------------


def test_of_writers_racing_from_one_version_across_two_stores_exactly_one_wins_each_round(
    postgres_conninfo: str,
) -> None:
    stores = [PostgresStore(postgres_conninfo), PostgresStore(postgres_conninfo)]
    try:
        stores[0].create_context(_conversation(1).to_snapshot(), "alice")
        acknowledged: dict[int, ConversationPersistenceSnapshot] = {}
        for _ in range(8):
            winners = _race(stores, threads=8, acknowledged=acknowledged)
            assert len(winners) == 1
        history = stores[1].get_version_history("c1", "alice")
        assert [v.version for v in history] == list(range(9, 0, -1))
        for version, snapshot in acknowledged.items():
            expected = msgspec.structs.replace(snapshot, stored_version=version)
            assert stores[1].load_version("c1", version, "alice") == expected
    finally:
        for made in stores:
            made.close()


def _race(
    stores: list[PostgresStore],
    threads: int,
    acknowledged: dict[int, ConversationPersistenceSnapshot],
) -> list[int]:
    """Every thread saves its own change from the current version at once."""
    base = stores[0].load("c1", "alice")
    assert base is not None
    barrier, winners, lock = threading.Barrier(threads), [], threading.Lock()

    def save(n: int) -> None:
        c = base.to_conversation()
        c.add_user_message(f"writer {n} at {base.stored_version}")
        snapshot = c.to_snapshot()
        barrier.wait()
        try:
            version = stores[n % len(stores)].save_context(snapshot, "alice")
        except StaleVersionError:
            return
        with lock:
            winners.append(version)
            acknowledged[version] = snapshot

    workers = [threading.Thread(target=save, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return winners


def test_more_threads_than_pooled_connections_all_save_their_own_conversations(
    postgres_conninfo: str,
) -> None:
    with PostgresStore(postgres_conninfo, max_connections=2) as store:
        barrier = threading.Barrier(12)
        failures: list[BaseException] = []

        def converse(n: int) -> None:
            c = _conversation(1, f"t{n}")
            barrier.wait()
            try:
                c.stored_version = store.create_context(c.to_snapshot(), "alice")
                for i in range(5):
                    c.add_user_message(f"thread {n} turn {i}")
                    c.stored_version = store.save_context(c.to_snapshot(), "alice")
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=converse, args=(n,)) for n in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        for n in range(12):
            loaded = store.load(f"t{n}", "alice")
            assert loaded is not None and loaded.stored_version == 6
            assert loaded.messages[-1].raw_content == f"thread {n} turn 4"
        assert len(store.list_conversations("alice")) == 12


_SECOND_PROCESS = """
import sys
from parlour.runtime.errors import StaleVersionError
from parlour.stores import PostgresStore

with PostgresStore(sys.argv[1]) as store:
    held = store.load("c1", "alice")
    print("loaded", held.stored_version, flush=True)
    sys.stdin.readline()  # the first process saves meanwhile
    try:
        store.save_context(held, "alice")
    except StaleVersionError as exc:
        print("refused", exc.expected, exc.found, flush=True)
    fresh = store.load("c1", "alice")
    print("saved", store.save_context(fresh, "alice"), flush=True)
"""


def test_a_second_process_holding_a_stale_copy_cannot_overwrite_a_newer_save(
    store: PostgresStore, postgres_conninfo: str
) -> None:
    c = _conversation(1)
    c.stored_version = store.create_context(c.to_snapshot(), "alice")
    other = subprocess.Popen(
        [sys.executable, "-c", _SECOND_PROCESS, postgres_conninfo],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert other.stdin is not None and other.stdout is not None
    assert other.stdout.readline().split() == ["loaded", "1"]
    c.add_user_message("the first process's save")
    c.stored_version = store.save_context(c.to_snapshot(), "alice")
    other.stdin.write("go\n")
    other.stdin.flush()
    out, _ = other.communicate(timeout=60)
    assert out.split("\n")[:2] == ["refused 1 2", "saved 3"]
    loaded = store.load("c1", "alice")
    assert loaded is not None and loaded.messages[-1].raw_content == "the first process's save"
    assert loaded.stored_version == 3
