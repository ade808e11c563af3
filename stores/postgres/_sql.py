"""The statements PostgresStore runs, each one round trip and (autocommit) one transaction.

A write is a single statement of data-modifying common table expressions hanging off the
conversation row it creates or conditionally updates: when that row is not written (another
owner, a stale version, no record) none of the rest is either. The row's lock serializes
concurrent writers of one conversation; the version check is re-evaluated after the lock
is granted, so of two writers from the same version exactly one succeeds.
"""

from __future__ import annotations

# the parts of a write after its conversation row (named ``head``, returning its version)
_WRITE_TAIL = """
, kept AS (
    INSERT INTO parlour_versions
        (conversation_id, version, saved_at, message_count, body, usage_count, turn)
    SELECT %(cid)s, head.version, %(now)s, %(count)s, %(body)b, %(ucount)s, %(turn)b
    FROM head
), closed AS (
    UPDATE parlour_messages m SET to_version = head.version FROM head
    WHERE m.conversation_id = %(cid)s AND m.to_version IS NULL AND m.idx >= %(start)s
), added AS (
    INSERT INTO parlour_messages (conversation_id, idx, from_version, message)
    SELECT %(cid)s, %(start)s + n.ord - 1, head.version, n.message
    FROM head, unnest(%(messages)b::bytea[]) WITH ORDINALITY AS n(message, ord)
), closed_usage AS (
    UPDATE parlour_usage u SET to_version = head.version FROM head
    WHERE u.conversation_id = %(cid)s AND u.to_version IS NULL AND u.idx >= %(ustart)s
), added_usage AS (
    INSERT INTO parlour_usage (conversation_id, idx, from_version, entry)
    SELECT %(cid)s, %(ustart)s + n.ord - 1, head.version, n.entry
    FROM head, unnest(%(usage)b::bytea[]) WITH ORDINALITY AS n(entry, ord)
)
SELECT version FROM head"""

CREATE = (
    """
WITH head AS (
    INSERT INTO parlour_conversations AS c
        (conversation_id, user_id, title, created_at, updated_at, version)
    VALUES (%(cid)s, %(user)s, %(title)s, %(now)s, %(now)s, 1 + COALESCE(
        (SELECT r.version FROM parlour_retired r WHERE r.conversation_id = %(cid)s), 0))
    ON CONFLICT (conversation_id) DO UPDATE
        SET version = c.version + 1, updated_at = EXCLUDED.updated_at
        WHERE c.user_id = EXCLUDED.user_id
    RETURNING c.version
)"""
    + _WRITE_TAIL
)

SAVE = (
    """
WITH head AS (
    UPDATE parlour_conversations SET version = version + 1, updated_at = %(now)s
    WHERE conversation_id = %(cid)s AND user_id = %(user)s AND version = %(expected)s
    RETURNING version
)"""
    + _WRITE_TAIL
)

DELETE = """
WITH gone AS (
    DELETE FROM parlour_conversations WHERE conversation_id = %(cid)s AND user_id = %(user)s
    RETURNING version
), retired AS (
    INSERT INTO parlour_retired (conversation_id, version) SELECT %(cid)s, version FROM gone
    ON CONFLICT (conversation_id) DO UPDATE SET version = EXCLUDED.version
)
SELECT version FROM gone"""

HEAD = "SELECT user_id, version FROM parlour_conversations WHERE conversation_id = %(cid)s"

EXISTS = """
SELECT 1 FROM parlour_conversations WHERE conversation_id = %(cid)s AND user_id = %(user)s"""

# owner, version, message count, body, messages, ledger count, ledger entries, open-turn
# record: all but the first only for the owner (the entries only when the version counts
# its ledger)
_READ = """
SELECT c.user_id, v.version, v.message_count, v.body,
    CASE WHEN c.user_id = %(user)s THEN ARRAY(
        SELECT m.message FROM parlour_messages m
        WHERE m.conversation_id = c.conversation_id AND {visible} ORDER BY m.idx) END,
    v.usage_count,
    CASE WHEN v.usage_count > 0 THEN ARRAY(
        SELECT u.entry FROM parlour_usage u
        WHERE u.conversation_id = c.conversation_id AND {visible_usage} ORDER BY u.idx) END,
    v.turn
FROM parlour_conversations c
LEFT JOIN parlour_versions v ON v.conversation_id = c.conversation_id
    AND c.user_id = %(user)s AND v.version = {version}
WHERE c.conversation_id = %(cid)s"""


def _as_of(row: str) -> str:
    return (
        f"{row}.from_version <= v.version"
        f" AND ({row}.to_version IS NULL OR {row}.to_version > v.version)"
    )


LOAD = _READ.format(
    visible="m.to_version IS NULL", visible_usage="u.to_version IS NULL", version="c.version"
)

LOAD_VERSION = _READ.format(visible=_as_of("m"), visible_usage=_as_of("u"), version="%(version)s")

LOAD_AS_OF = _READ.format(
    visible=_as_of("m"),
    visible_usage=_as_of("u"),
    version="""(SELECT max(o.version) FROM parlour_versions o
        WHERE o.conversation_id = c.conversation_id AND o.saved_at <= %(at)s)""",
)

HISTORY = """
SELECT c.user_id, v.version, v.saved_at
FROM parlour_conversations c
LEFT JOIN parlour_versions v ON v.conversation_id = c.conversation_id AND c.user_id = %(user)s
WHERE c.conversation_id = %(cid)s
ORDER BY v.version DESC"""

LIST = """
SELECT conversation_id, title, created_at, updated_at FROM parlour_conversations
WHERE user_id = %(user)s
    AND (%(at)s::timestamptz IS NULL OR (updated_at, conversation_id) < (%(at)s, %(after)s))
ORDER BY updated_at DESC, conversation_id DESC
LIMIT %(limit)s"""

POSITION = """
SELECT updated_at FROM parlour_conversations
WHERE conversation_id = %(cid)s AND user_id = %(user)s"""

# Retention: a version goes when it is past the newest ``keep`` or saved before ``cutoff``
# (either may be NULL: no such limit); the current version always stays. Then the message
# and ledger rows no kept version can see go: those replaced at or before the oldest kept
# version.
PRUNE_VERSIONS = """
DELETE FROM parlour_versions v USING parlour_conversations c
WHERE v.conversation_id = c.conversation_id AND v.version < c.version
    AND (%(cid)s::text IS NULL OR c.conversation_id = %(cid)s)
    AND (v.version <= c.version - %(keep)s::bigint OR v.saved_at < %(cutoff)s::timestamptz)"""

_PRUNE_ROWS = """
DELETE FROM {table} m USING (
    SELECT conversation_id, min(version) AS oldest FROM parlour_versions
    WHERE %(cid)s::text IS NULL OR conversation_id = %(cid)s
    GROUP BY conversation_id
) k
WHERE m.conversation_id = k.conversation_id AND m.to_version <= k.oldest"""

PRUNE_MESSAGES = _PRUNE_ROWS.format(table="parlour_messages")

PRUNE_USAGE = _PRUNE_ROWS.format(table="parlour_usage")
