"""Shared fixtures: every test leaves no actor running, reaches no host but this machine (a
name lookup of any other fails at once), and every request body any test sends through
``MockProvider`` is checked, after the test, against the SDK's own request type for its
endpoint (see ``tests/runtime/providers/_request_types.py``)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


_LOCAL = frozenset({None, "", "localhost", "127.0.0.1", "::1", "0.0.0.0", "::"})
_resolve = socket.getaddrinfo


def _local_only(host: Any, *args: Any, **kwargs: Any) -> Any:
    """``socket.getaddrinfo`` for this machine's names only: a test that would reach out
    (an SDK whose transport was not replaced, say) fails here instead of waiting on a DNS."""
    name = host.decode() if isinstance(host, bytes) else host
    if name not in _LOCAL and name != socket.gethostname() and not _numeric(name):
        raise socket.gaierror(socket.EAI_NONAME, f"tests reach no network (asked for {name!r})")
    return _resolve(host, *args, **kwargs)


def _numeric(name: str) -> bool:
    """An address, not a name: nothing to look up (loopback, or the machine's own, for Ray)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "getaddrinfo", _local_only)


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
