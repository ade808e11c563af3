"""Shared fixtures: every test leaves no actor running, and every request body any test sends
through ``MockProvider`` is checked, after the test, against the SDK's own request type for
its endpoint (see ``tests/runtime/providers/_request_types.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pykka
import pytest
from hypothesis import settings
from loguru import logger

pytest.register_assert_rewrite("parlour.stores.testing")  # the shipped store suite

# how long an example takes on a shared machine is no property of the code: no deadline
# (hypothesis's 200 ms failed property tests whenever the machine was loaded)
settings.register_profile("parlour", deadline=None)
settings.load_profile("parlour")

from parlour.runtime.providers.testing import MockProvider  # noqa: E402
from parlour.stores import LmdbStore  # noqa: E402
from tests.runtime.providers._sent_bodies import SentBodies  # noqa: E402


@pytest.fixture(autouse=True)
def _stop_all_actors() -> Iterator[None]:
    yield
    pykka.ActorRegistry.stop_all()


@pytest.fixture(autouse=True)
def _library_logging_after_each_test() -> Iterator[None]:
    """A test that runs the CLI leaves its stderr sink behind; drop it, so a thread of a later
    test never logs into a captured stream that is closed."""
    yield
    logger.remove()
    logger.disable("parlour")


@pytest.fixture
def lmdb_store(tmp_path: Path) -> Iterator[LmdbStore]:
    store = LmdbStore(tmp_path / "lmdb")
    yield store
    store.close()


@pytest.fixture(autouse=True)
def sent_bodies(monkeypatch: pytest.MonkeyPatch) -> Iterator[SentBodies]:
    """The bodies this test sent; each must fit its endpoint's SDK request type.

    The check runs at teardown, not in the transport: an error raised there would reach the
    client as a failed request and could be mapped into a retry instead of failing the test.
    """
    sent = SentBodies()
    serve = MockProvider.__call__

    def recording(self: MockProvider, request: object) -> object:
        response = serve(self, request)
        sent.record(request, self.bodies[-1])
        return response

    monkeypatch.setattr(MockProvider, "__call__", recording)
    yield sent
    sent.check_all()
