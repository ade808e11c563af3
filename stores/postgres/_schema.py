"""PostgresStore's tables, and the migrations that bring a database up to them.

The tables live in the first schema of the connection's ``search_path``:

- ``parlour_schema``: one row, the layout version of the tables below.
- ``parlour_conversations``: one row per stored conversation (owner, title, times, fencing
  version), indexed by owner and recency for listing.
- ``parlour_versions``: one row per kept version of a conversation: when it was saved, the
  snapshot without its messages and usage ledger, how many messages and ledger entries it
  had (the ledger's count NULL: a version saved before layout 2, whose body holds it), and
  the open-turn record the save carried (NULL: none).
- ``parlour_messages``: one row per message a save wrote, valid from the version that wrote
  it until (not including) the version that replaced or removed it; NULL while current.
- ``parlour_usage``: one row per usage ledger entry a save wrote, valid the same way.
- ``parlour_retired``: the last version of each deleted id, so versions never restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parlour.runtime.errors import IllegalStateError

if TYPE_CHECKING:
    import psycopg

SCHEMA_VERSION = 3

# an arbitrary constant: the advisory lock that serializes migrations across processes
_MIGRATION_LOCK = 0x7061726C6F7572

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS parlour_schema (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version integer NOT NULL
)"""

# MIGRATIONS[n] takes the tables from layout n to layout n + 1
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE parlour_conversations (
            conversation_id text PRIMARY KEY,
            user_id text NOT NULL,
            title text NOT NULL,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            version bigint NOT NULL
        )""",
        """CREATE INDEX parlour_conversations_by_owner
            ON parlour_conversations (user_id, updated_at DESC, conversation_id DESC)""",
        """CREATE TABLE parlour_versions (
            conversation_id text NOT NULL
                REFERENCES parlour_conversations ON DELETE CASCADE,
            version bigint NOT NULL,
            saved_at timestamptz NOT NULL,
            message_count integer NOT NULL,
            body bytea NOT NULL,
            PRIMARY KEY (conversation_id, version)
        )""",
        """CREATE TABLE parlour_messages (
            conversation_id text NOT NULL
                REFERENCES parlour_conversations ON DELETE CASCADE,
            idx integer NOT NULL,
            from_version bigint NOT NULL,
            to_version bigint,
            message bytea NOT NULL,
            PRIMARY KEY (conversation_id, from_version, idx)
        )""",
        """CREATE INDEX parlour_messages_current
            ON parlour_messages (conversation_id, idx) WHERE to_version IS NULL""",
        """CREATE TABLE parlour_retired (
            conversation_id text PRIMARY KEY,
            version bigint NOT NULL
        )""",
    ),
    (  # the usage ledger out of the body, one row per entry; old versions keep theirs
        """CREATE TABLE parlour_usage (
            conversation_id text NOT NULL
                REFERENCES parlour_conversations ON DELETE CASCADE,
            idx integer NOT NULL,
            from_version bigint NOT NULL,
            to_version bigint,
            entry bytea NOT NULL,
            PRIMARY KEY (conversation_id, from_version, idx)
        )""",
        """CREATE INDEX parlour_usage_current
            ON parlour_usage (conversation_id, idx) WHERE to_version IS NULL""",
        "ALTER TABLE parlour_versions ADD COLUMN usage_count integer",
    ),
    (  # the open-turn record beside the body (NULL: none, as every version before layout 3)
        "ALTER TABLE parlour_versions ADD COLUMN turn bytea",
    ),
)


def migrate(conn: psycopg.Connection[object], where: str) -> None:
    """Create or upgrade the tables to ``SCHEMA_VERSION``, once, whoever else is trying.

    Args:
        conn: a connection in autocommit mode.
        where: how to name the database in an error (the DSN without its password).

    Raises:
        IllegalStateError: the database was laid out by a newer parlour.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(_VERSION_TABLE)
        row = conn.execute("SELECT version FROM parlour_schema").fetchone()
        found = 0 if row is None else int(row[0])  # type: ignore[index]
        if found > SCHEMA_VERSION:
            raise IllegalStateError(
                f"The PostgreSQL database {where} holds parlour tables of layout {found}, "
                f"newer than this parlour reads ({SCHEMA_VERSION}); upgrade parlour."
            )
        for step in MIGRATIONS[found:]:
            for statement in step:
                conn.execute(statement)
        conn.execute(
            "INSERT INTO parlour_schema (version) VALUES (%s) "
            "ON CONFLICT (singleton) DO UPDATE SET version = EXCLUDED.version",
            (SCHEMA_VERSION,),
        )
