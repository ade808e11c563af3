"""Approvals over HTTP: the pending calls of a parked turn, read from the store; a decision
per call, validated like every body (nothing stored by a refused one); the last decision's
turn going on detached, its events (each decision first) reaching every watcher; another
user's conversation answered as a missing one."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from parlour.actors import Agent, ConversationService, asgi_app
from parlour.runtime import Depth, OutputSize, ScriptedClient, TurnStep
from parlour.stores import LmdbStore

from .serve_helpers import (
    ALICE,
    BOB,
    TOKENS,
    LiveServer,
    Orders,
    create,
    parse_sse,
    sse_events,
)

JSON = {**ALICE, "content-type": "application/json"}
BOB_JSON = {**BOB, "content-type": "application/json"}


@pytest.fixture
def orders() -> Orders:
    return Orders()


@pytest.fixture
def app(orders: Orders, service: ConversationService) -> Starlette:
    return asgi_app(orders.agent(), service, tokens=TOKENS)


def _parked(client: TestClient | httpx2.Client) -> tuple[str, list[dict[str, Any]]]:
    """A conversation whose turn asked for two deletions, and its pending calls."""
    cid = create(client)
    sent = client.post(f"/api/conversations/{cid}/messages", json={"text": "Delete 1 and 2."})
    events = parse_sse(sent.text)
    requested = [e for e in events if e["type"] == "approval_requested"]
    assert len(requested) == 1 and events[-1]["type"] == "done", events
    listed = client.get(f"/api/conversations/{cid}/approvals")
    assert listed.status_code == 200, listed.text
    pending: list[dict[str, Any]] = listed.json()["pending"]
    return cid, pending


def _stored(store: LmdbStore, cid: str) -> tuple[int, Any]:
    snapshot = store.load(cid, "alice")
    assert snapshot is not None
    return snapshot.stored_version, snapshot.turn


def test_pending_calls_are_listed_with_their_tool_arguments_and_time(
    client: TestClient, orders: Orders
) -> None:
    client.headers.update(ALICE)
    _, pending = _parked(client)
    assert [(p["tool"], json.loads(p["arguments"])) for p in pending] == [
        ("delete_order", {"order_id": "1"}),
        ("delete_order", {"order_id": "2"}),
    ]
    assert all(p["call_id"] and p["requested_at"].endswith("+00:00") for p in pending)
    assert orders.deleted == []  # parked: nothing ran
    fresh = create(client)
    assert client.get(f"/api/conversations/{fresh}/approvals").json() == {"pending": []}


def test_an_approval_and_a_denial_through_the_api_finish_the_turn_and_watchers_see_each(
    live: LiveServer, store: LmdbStore, orders: Orders
) -> None:
    with live.client() as http:
        cid, pending = _parked(http)
        first, second = (p["call_id"] for p in pending)
        seen: list[dict[str, Any]] = []
        watching = threading.Event()

        def watch() -> None:
            with (
                live.client() as watcher,
                watcher.stream("GET", f"/api/conversations/{cid}/events") as response,
            ):
                dones = 0
                for event in sse_events(response):
                    seen.append(event)
                    watching.set()
                    dones += event["type"] == "done"
                    if dones == 2:  # the decision's turn, then the denial's going on
                        return

        thread = threading.Thread(target=watch)
        thread.start()
        assert watching.wait(20)
        one = http.post(f"/api/conversations/{cid}/approvals/{first}", json={"approve": True})
        assert one.status_code == 200, one.text
        assert one.json() == {
            "call_id": first,
            "approved": True,
            "pending": [pending[1]],
            "continued": False,
        }
        assert orders.deleted == []  # another call is undecided: nothing runs yet
        two = http.post(
            f"/api/conversations/{cid}/approvals/{second}",
            json={"approve": False, "reason": "keep order 2"},
        )
        assert two.status_code == 200 and two.json()["continued"] is True, two.text
        thread.join(30)
        assert not thread.is_alive()
        assert http.get(f"/api/conversations/{cid}/approvals").json() == {"pending": []}
    decided = [e for e in seen if e["type"] == "approval_decided"]
    assert [(d["call_id"], d["approved"], d["reason"]) for d in decided] == [
        (first, True, ""),
        (second, False, "keep order 2"),
    ]
    results = [e for e in seen if e["type"] == "tool_result"]
    assert [r["call_id"] for r in results] == [first] and "order 1 deleted" in results[0]["content"]
    assert seen[-1]["type"] == "done" and seen[-1]["text"] == "Both handled."
    assert orders.deleted == ["1"]  # approved once, run once; the denied one never ran
    _, record = _stored(store, cid)
    assert record.step == TurnStep.DONE


def test_a_decision_twice_is_a_409_and_an_unknown_call_a_404(client: TestClient) -> None:
    client.headers.update(ALICE)
    cid, pending = _parked(client)
    url = f"/api/conversations/{cid}/approvals"
    assert client.post(f"{url}/{pending[0]['call_id']}", json={"approve": True}).status_code == 200
    again = client.post(f"{url}/{pending[0]['call_id']}", json={"approve": False})
    assert again.status_code == 409 and "already decided" in again.json()["error"], again.text
    unknown = client.post(f"{url}/no-such-call", json={"approve": True})
    assert unknown.status_code == 404 and unknown.json()["status"] == 404
    assert client.post(f"{url}/{'x' * 300}", json={"approve": True}).status_code == 404
    assert len(client.get(url).json()["pending"]) == 1


@pytest.mark.parametrize(
    ("content", "status", "words"),
    [
        (b'{"approve": true, "why": 1}', 422, "Unknown field 'why'"),
        (b'{"approve": "yes"}', 400, '{"approve": true}'),
        (b"{}", 400, '{"approve": true}'),
        (b'{"approve": false, "reason": 7}', 400, "reason must be a string"),
        (b'{"approve": true, "reason": "but"}', 400, "denial only"),
        (b'{"approve": false, "reason": "no \\ud800"}', 400, "lone surrogate"),
        (b'{"approve": false, "reason": "' + b"r" * 5000 + b'"}', 413, "at most 4096"),
        (b'{"approve": false, "reason": "' + b"r" * 10_000_000 + b'"}', 413, "byte limit"),
        (b"[" * 30_000, 400, "nested too deeply"),
    ],
    ids=[
        "unknown-field",
        "approve-not-bool",
        "no-approve",
        "reason-not-string",
        "reason-with-approval",
        "lone-surrogate",
        "long-reason",
        "ten-megabyte-reason",
        "deep-nesting",
    ],
)
def test_a_bad_decision_body_is_a_4xx_json_error_and_stores_nothing(
    client: TestClient, store: LmdbStore, content: bytes, status: int, words: str
) -> None:
    client.headers.update(ALICE)
    cid, pending = _parked(client)
    before = _stored(store, cid)
    url = f"/api/conversations/{cid}/approvals/{pending[0]['call_id']}"
    response = client.post(url, content=content, headers=JSON)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == status and words in body["error"], body
    assert _stored(store, cid) == before
    assert client.get(f"/api/conversations/{cid}/approvals").json()["pending"] == pending


def test_another_users_approvals_are_the_same_404_as_a_missing_conversation(
    client: TestClient, store: LmdbStore, orders: Orders
) -> None:
    client.headers.update(ALICE)
    cid, pending = _parked(client)
    before = _stored(store, cid)
    call = pending[0]["call_id"]
    for method, path, body in [
        ("GET", "approvals", None),
        ("POST", f"approvals/{call}", {"approve": True}),
        ("POST", "approvals/no-such-call", {"approve": True}),
    ]:
        foreign = client.request(
            method, f"/api/conversations/{cid}/{path}", json=body, headers=BOB_JSON
        )
        missing = client.request(
            method, f"/api/conversations/{cid}x/{path}", json=body, headers=BOB_JSON
        )
        assert foreign.status_code == missing.status_code == 404
        assert foreign.json()["error"].replace(cid, "ID") == missing.json()["error"].replace(
            f"{cid}x", "ID"
        )
    assert _stored(store, cid) == before and orders.deleted == []


@pytest.fixture
def two_hosts(
    app: Starlette, store: LmdbStore, orders: Orders
) -> Iterator[tuple[TestClient, TestClient]]:
    """A second app on its own service over the same store: another process's view."""
    other_service = ConversationService(store)
    agent = Agent(
        ScriptedClient(["Both handled."]),
        tools=[orders.tool],
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
    )
    other = asgi_app(agent, other_service, tokens=TOKENS)
    with TestClient(app, headers=ALICE) as one, TestClient(other, headers=ALICE) as two:
        yield one, two
    other_service.stop()


def test_calls_parked_by_one_host_are_listed_and_decided_by_another(
    two_hosts: tuple[TestClient, TestClient], orders: Orders
) -> None:
    one, two = two_hosts
    cid, pending = _parked(one)
    assert two.get(f"/api/conversations/{cid}/approvals").json()["pending"] == pending
    for p in pending:
        decided = two.post(
            f"/api/conversations/{cid}/approvals/{p['call_id']}", json={"approve": True}
        )
        assert decided.status_code == 200, decided.text
    two.get(f"/api/conversations/{cid}/events?once=1")  # the turn going on, to its end
    again = one.post(
        f"/api/conversations/{cid}/approvals/{pending[0]['call_id']}", json={"approve": True}
    )
    assert again.status_code == 409
    assert sorted(orders.deleted) == ["1", "2"]
