"""Shared fixtures: every test leaves no actor running."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pykka
import pytest

pytest.register_assert_rewrite("parlour.stores.testing")  # the shipped store suite

from parlour.stores import LmdbStore  # noqa: E402


@pytest.fixture(autouse=True)
def _stop_all_actors() -> Iterator[None]:
    yield
    pykka.ActorRegistry.stop_all()


@pytest.fixture
def lmdb_store(tmp_path: Path) -> Iterator[LmdbStore]:
    store = LmdbStore(tmp_path / "lmdb")
    yield store
    store.close()
