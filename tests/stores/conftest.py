"""A real PostgreSQL server for the store tests, and a fresh schema on it for each test.

The server is the one named by ``PARLOUR_TEST_POSTGRES`` (``.ci/run`` starts one with
``.ci/postgres``); without it the session starts its own the same way, without installing
anything. When no server can be had the PostgreSQL tests are skipped, saying why, except
under ``CI=true``, where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "postgres"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"PostgreSQL is required under CI and {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL server: {reason}")


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The DSN of a running server: ``PARLOUR_TEST_POSTGRES``, or one started here."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[postgres]')")
    given = os.environ.get("PARLOUR_TEST_POSTGRES")
    if given:
        yield given
        return
    base = tempfile.mkdtemp(prefix="parlour-pg-")
    started = subprocess.run(
        ["bash", str(SCRIPT), "start", base, "--no-install"],
        capture_output=True,
        text=True,
        check=False,
    )
    if started.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        _unavailable(f"{SCRIPT} could not start one: {started.stderr.strip()[-500:]}")
    try:
        yield started.stdout.strip()
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", base], capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def postgres_conninfo(postgres_dsn: str) -> Iterator[str]:
    """A connection string whose ``search_path`` is a schema of this test's own."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    schema = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")  # a fresh hex name
    yield make_conninfo(postgres_dsn, options=f"-c search_path={schema}")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
