"""The database PostgresStore talks to: its pool of connections, opened and laid out (or
upgraded) when a store is made, and one round trip per statement.

psycopg and its pool are imported when a ``Database`` is made, so this imports without them.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from parlour.runtime.errors import IllegalStateError

from . import _sql as sql
from ._schema import migrate

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool


class Database:
    """The tables at ``conninfo`` (the first schema of its ``search_path``), laid out or
    upgraded to this code's layout, behind a pool of ``size`` autocommit connections.
    ``where`` names it in messages (without its password).

    Raises:
        ImportError: psycopg 3 and psycopg_pool are not installed (``parlour[postgres]``).
        IllegalStateError: the database holds tables of a newer parlour.
        psycopg_pool.PoolTimeout: the database cannot be reached in ``timeout`` seconds.

    Thread-safety: every method from any thread: the pool hands each call a connection of
    its own. After ``close`` every call raises ``IllegalStateError``.
    """

    __slots__ = ("_closing", "_guard", "_pool", "_threads", "where")

    def __init__(self, conninfo: str, size: int, timeout: float) -> None:
        self._pool = _open_pool(conninfo, size, timeout)
        self.where = _redacted(conninfo)
        try:
            with self._pool.connection() as conn:
                migrate(conn, self.where)
        except BaseException:
            self._pool.close()
            raise
        # as many as the pool's connections: an event loop's saves, never fewer at once
        # than the pool serves (the loop's default executor has min(32, CPUs + 4) threads)
        self._threads = cf.ThreadPoolExecutor(size, thread_name_prefix="parlour-postgres")
        self._guard = threading.Lock()
        self._closing = False

    def rows(self, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Every row ``query`` returns (one statement, one round trip)."""
        with self.connection() as conn:
            found: list[tuple[Any, ...]] = conn.execute(query, params, binary=True).fetchall()
        return found

    def version(self, query: str, params: dict[str, Any]) -> int | None:
        """The first column of ``query``'s first row, a version; None when it returns none."""
        rows = self.rows(query, params)
        return None if not rows else int(rows[0][0])

    def head(self, cid: str) -> tuple[str, int] | None:
        """The conversation's owner and current version; None when there is no record."""
        rows = self.rows(sql.HEAD, {"cid": cid})
        return None if not rows else (rows[0][0], rows[0][1])

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        """A pooled connection, for the span of a ``with`` (a transaction of several
        statements opens ``conn.transaction()`` in it).

        Raises:
            IllegalStateError: the database is closed.
        """
        if self._pool.closed:
            raise IllegalStateError(f"PostgresStore on {self.where} is closed.")
        return self._pool.connection()

    def in_thread(self, call: Callable[[], Any]) -> cf.Future[Any]:
        """``call()`` on one of the database's threads (as many as its connections).

        Raises:
            IllegalStateError: the database is closed (or closing).
        """
        with self._guard:
            if self._closing:
                raise IllegalStateError(f"PostgresStore on {self.where} is closed.")
            return self._threads.submit(call)

    def close(self) -> None:
        """Let the calls under way on its threads finish, then close the pool's
        connections. Idempotent."""
        with self._guard:
            self._closing = True
        self._threads.shutdown(wait=True)
        self._pool.close()


def _open_pool(conninfo: str, size: int, timeout: float) -> ConnectionPool[Any]:
    try:
        from psycopg_pool import ConnectionPool
    except ImportError as exc:
        raise ImportError(
            "PostgresStore needs psycopg 3 and its pool: pip install -e '.[postgres]'."
        ) from exc
    pool: ConnectionPool[Any] = ConnectionPool(
        conninfo,
        min_size=1,
        max_size=size,
        kwargs={"autocommit": True},
        timeout=timeout,
        open=False,
        name="parlour",
    )
    try:
        pool.open(wait=True, timeout=timeout)
    except BaseException:
        pool.close()
        raise
    return pool


def _redacted(conninfo: str) -> str:
    """The connection string without its password, to name the database in errors."""
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo
    except ImportError:  # pragma: no cover - the pool import above already needs psycopg
        return "(PostgreSQL)"
    parts = conninfo_to_dict(conninfo)
    parts.pop("password", None)
    return make_conninfo(**parts)  # type: ignore[arg-type]
