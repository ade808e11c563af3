"""Each request is a ``parlour.http`` span, and the turn it starts continues it: the turn
task is created inside the request's context, as OpenTelemetry's context propagates."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from starlette.testclient import TestClient

from parlour.actors.agent import _otel

from .serve_helpers import ALICE, create

_current: contextvars.ContextVar[Recorded | None] = contextvars.ContextVar("span", default=None)


class Recorded:
    def __init__(self, name: str, attributes: dict[str, Any], parent: Recorded | None) -> None:
        self.name, self.attributes, self.parent = name, dict(attributes), parent

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value


class ContextProvider:
    """A tracer provider whose current span lives in a context variable, as OTel's does."""

    def __init__(self) -> None:
        self.spans: list[Recorded] = []

    def get_tracer(self, name: str) -> ContextProvider:
        return self

    @contextmanager
    def start_as_current_span(self, name: str, attributes: dict[str, Any]) -> Iterator[Recorded]:
        span = Recorded(name, attributes, _current.get())
        self.spans.append(span)
        token = _current.set(span)
        try:
            yield span
        finally:
            _current.reset(token)


def test_a_request_is_a_span_and_its_turn_continues_it(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = ContextProvider()
    monkeypatch.setattr(_otel.trace, "get_tracer_provider", lambda: provider)  # type: ignore[attr-defined]
    cid = create(client)
    client.post(f"/api/conversations/{cid}/messages", headers=ALICE, json={"text": "hello"})
    http = [s for s in provider.spans if s.name == "parlour.http"]
    assert [s.attributes["url.path"] for s in http] == [
        "/api/conversations",
        f"/api/conversations/{cid}/messages",
    ]
    assert all(s.attributes["http.request.method"] == "POST" for s in http)
    turn = next(s for s in provider.spans if s.name == "parlour.turn")
    assert turn.parent is http[1]
