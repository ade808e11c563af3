"""PostgresStore's usage ledger as rows of its own (one per entry, valid from the version
that wrote it): a save inserts only the entries past what the stored version held, every
kept version reads back its ledger, a database laid out before the ledger rows migrates
with its old versions intact, and damaged ledger rows are named."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import PostgresStore

from .ledger_helpers import call, snapshot_bytes, with_ledger


def _sql(conninfo: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def _read(store: PostgresStore, cid: str, version: int) -> bytes:
    snapshot = store.load_version(cid, version, "alice")
    assert snapshot is not None
    snapshot.stored_version = 0
    return encode_snapshot(snapshot)


def test_a_save_inserts_only_the_ledger_entries_its_version_added(postgres_conninfo: str) -> None:
    with PostgresStore(postgres_conninfo) as store:
        c = with_ledger("c1", 5)
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        c.usage_ledger.append(call(5))
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        del c.usage_ledger[2:]
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        rows = _sql(
            postgres_conninfo,
            "SELECT from_version, count(*) FROM parlour_usage GROUP BY 1 ORDER BY 1",
        )
        assert rows == [(1, 5), (2, 1)]  # version 3 only closed rows
        bodies = _sql(postgres_conninfo, "SELECT body, usage_count FROM parlour_versions")
        assert all(b'"usage":[]' in bytes(body) for body, _ in bodies)
        assert sorted(count for _, count in bodies) == [2, 5, 6]
        for version, ledger in ((1, 5), (2, 6), (3, 2)):
            kept = store.load_version("c1", version, "alice")
            assert kept is not None and kept.usage == [call(i) for i in range(ledger)]


# ("append", n), ("rewrite", i), ("truncate", n), ("replace", 0): equal copies of every
# entry; each step saves through one of two stores (each remembers what it last wrote).
_steps = st.lists(
    st.tuples(
        st.sampled_from(["append", "rewrite", "truncate", "replace"]),
        st.integers(0, 5),
        st.booleans(),
    ),
    max_size=16,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(_steps)
def test_any_sequence_of_ledger_edits_through_two_stores_keeps_every_version_exactly(
    postgres_conninfo: str, steps: list[tuple[str, int, bool]]
) -> None:
    cid = f"c-{uuid.uuid4().hex[:8]}"
    c = with_ledger(cid, 1)
    saved: dict[int, bytes] = {}
    with (
        PostgresStore(postgres_conninfo, keep_versions=None) as one,
        PostgresStore(postgres_conninfo, keep_versions=None) as two,
    ):
        c.stored_version = one.create_context(c.to_snapshot(), "alice")
        saved[c.stored_version] = snapshot_bytes(c)
        for op, n, other in steps:
            ledger = c.usage_ledger
            if op == "append":
                ledger += [call(len(ledger) + i) for i in range(n)]
            elif op == "truncate":
                del ledger[n:]
            elif op == "replace":
                c.usage_ledger = [dict(e) for e in ledger]
            elif ledger:
                ledger[n % len(ledger)] = call(100 + n)
            store = two if other else one
            c.stored_version = store.save_context(c.to_snapshot(), "alice")
            saved[c.stored_version] = snapshot_bytes(c)
        for version, expected in saved.items():
            assert _read(two, cid, version) == expected, version
        current = one.load(cid, "alice")
        assert current is not None and current.usage == c.usage_ledger


def _as_layout_1(conninfo: str, ledgers: dict[int, list[dict[str, Any]]]) -> None:
    """Lay the tables out as layout 1 did: no ledger rows, each version's body holding its
    ledger, the schema at 1."""
    for version, ledger in ledgers.items():
        [(body,)] = _sql(conninfo, "SELECT body FROM parlour_versions WHERE version = %s", version)
        plain = msgspec.json.decode(bytes(body))
        plain["usage"] = ledger
        _sql(
            conninfo,
            "UPDATE parlour_versions SET body = %s WHERE version = %s",
            msgspec.json.encode(plain),
            version,
        )
    _sql(conninfo, "DROP TABLE parlour_usage")
    _sql(conninfo, "ALTER TABLE parlour_versions DROP COLUMN usage_count")
    _sql(conninfo, "ALTER TABLE parlour_versions DROP COLUMN turn")
    _sql(conninfo, "UPDATE parlour_schema SET version = 1")


def test_a_database_laid_out_before_ledger_rows_migrates_and_every_version_still_reads(
    postgres_conninfo: str,
) -> None:
    ledgers = {1: [call(0)], 2: [call(0), call(1)]}
    with PostgresStore(postgres_conninfo) as store:
        c = with_ledger("c1", 1)
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        c.add_user_message("again")
        store.save_context(c.to_snapshot(), "alice")
    _as_layout_1(postgres_conninfo, ledgers)
    with PostgresStore(postgres_conninfo) as store:
        assert _sql(postgres_conninfo, "SELECT version FROM parlour_schema") == [(3,)]
        loaded = store.load("c1", "alice")
        assert loaded is not None and loaded.usage == ledgers[2]
        c = loaded.to_conversation()
        c.usage_ledger.append(call(2))
        assert store.save_context(c.to_snapshot(), "alice") == 3
        ledgers[3] = [call(0), call(1), call(2)]
        for version, ledger in ledgers.items():
            kept = store.load_version("c1", version, "alice")
            assert kept is not None and kept.usage == ledger, version
    with PostgresStore(postgres_conninfo) as fresh:
        again = fresh.load("c1", "alice")
        assert again is not None and again.usage == ledgers[3]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("UPDATE parlour_usage SET entry = '\\x00ff'::bytea WHERE idx = 1", "does not decode"),
        ("DELETE FROM parlour_usage WHERE idx = 1", "has 1 of its 2 usage ledger entries"),
    ],
)
def test_a_damaged_or_missing_ledger_row_is_a_corrupt_snapshot_naming_the_conversation(
    postgres_conninfo: str, change: str, why: str
) -> None:
    with PostgresStore(postgres_conninfo) as store:
        store.create_context(with_ledger("c1", 2).to_snapshot(), "alice")
        other = with_ledger("c2", 2)
        store.create_context(other.to_snapshot(), "alice")
        _sql(postgres_conninfo, change + " AND conversation_id = 'c1'")
        with pytest.raises(CorruptSnapshotError, match=f"c1.*{why}|c1 {why}"):
            store.load("c1", "alice")
        kept = store.load("c2", "alice")
        assert kept is not None and kept.usage == [call(0), call(1)]
