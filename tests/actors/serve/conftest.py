"""Fixtures for the HTTP host: the app over a real LMDB, the app in-process, and the app on
uvicorn on a loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from parlour.actors import ConversationService, asgi_app
from parlour.stores import LmdbStore, MemorySessionCache

from .serve_helpers import TOKENS, Gate, LiveServer, make_agent


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.opened.set()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LmdbStore]:
    s = LmdbStore(tmp_path / "db")
    yield s
    s.close()


@pytest.fixture
def service(store: LmdbStore) -> Iterator[ConversationService]:
    svc = ConversationService(store, MemorySessionCache(), shutdown_grace_s=1.0)
    yield svc
    svc.stop()


@pytest.fixture
def app(gate: Gate, service: ConversationService) -> Starlette:
    return asgi_app(make_agent(gate), service, tokens=TOKENS)


@pytest.fixture
def client(app: Starlette) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


@pytest.fixture
def live(app: Starlette, gate: Gate) -> Iterator[LiveServer]:
    server = LiveServer(app)
    yield server
    gate.opened.set()
    if server.thread.is_alive():
        server.terminate()
