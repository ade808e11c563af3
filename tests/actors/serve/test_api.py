"""The HTTP API in-process (starlette's TestClient over a real LMDB): every endpoint, the
token rules, bad input answered as JSON errors."""

from __future__ import annotations

import re
from typing import Any

import pytest
from loguru import logger
from starlette.testclient import TestClient

from parlour.runtime.blocks import TextBlock
from parlour.runtime.snapshots import decode_snapshot
from parlour.stores import LmdbStore

from .serve_helpers import ALICE, BOB, HOLD, Gate, create, parse_sse

CONVERSATION_ROUTES = [
    ("GET", ""),
    ("DELETE", ""),
    ("GET", "/export"),
    ("GET", "/versions"),
    ("GET", "/versions/2026-01-01T00:00:00"),
    ("POST", "/messages"),
    ("GET", "/events?once=1"),
    ("POST", "/cancel"),
]


def say(client: TestClient, cid: str, text: str, headers: dict[str, str] = ALICE) -> list[Any]:
    """One whole turn (the in-process client returns when the stream ends)."""
    response = client.post(
        f"/api/conversations/{cid}/messages", headers=headers, json={"text": text}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)


def call(client: TestClient, method: str, path: str, headers: dict[str, str]) -> Any:
    body = {"json": {"text": "hi"}} if method == "POST" else {}
    return client.request(method, path, headers=headers, **body)  # type: ignore[arg-type]


def test_without_a_valid_token_every_api_route_is_401_and_names_nothing(client: TestClient) -> None:
    cid = create(client)
    routes = [("GET", "/api/me"), ("GET", "/api/conversations"), ("POST", "/api/conversations")]
    routes += [(m, f"/api/conversations/{cid}{tail}") for m, tail in CONVERSATION_ROUTES]
    for headers in ({}, {"authorization": "Bearer forged"}, {"authorization": "Basic x"}):
        for method, path in routes:
            response = call(client, method, path, headers)
            assert response.status_code == 401, (method, path)
            assert cid not in response.text
            assert response.json()["status"] == 401


def test_another_users_conversation_is_answered_exactly_like_a_missing_one(
    client: TestClient, store: LmdbStore
) -> None:
    cid = create(client)
    say(client, cid, "a secret")
    missing = "AgentThinker-conv-0000-000000000000"
    for method, tail in CONVERSATION_ROUTES:
        foreign = call(client, method, f"/api/conversations/{cid}{tail}", BOB)
        absent = call(client, method, f"/api/conversations/{missing}{tail}", BOB)
        assert foreign.status_code == absent.status_code == 404, (method, tail)
        assert foreign.text.replace(cid, missing) == absent.text
        assert "secret" not in foreign.text
    listing = client.get("/api/conversations", headers=BOB).json()
    assert listing == {"conversations": [], "next": None}
    snapshot = store.load(cid, "alice")  # bob's delete and send changed nothing
    assert snapshot is not None and len(snapshot.messages) == 2


def test_a_turn_streams_its_events_in_order_and_is_stored(
    client: TestClient, store: LmdbStore
) -> None:
    cid = create(client)
    events = say(client, cid, "What is the plan?")
    kinds = " ".join(e["type"] for e in events)
    assert re.fullmatch(r"accepted turn_start (text_delta )+done", kinds), kinds
    assert events[0] == {"type": "accepted", "status": "started", "conversation_id": cid}
    streamed = "".join(e["text"] for e in events if e["type"] == "text_delta")
    assert streamed == events[-1]["text"] == "Answer 1: you said 'What is the plan?'."
    snapshot = store.load(cid, "alice")
    assert snapshot is not None
    assert [m.role for m in snapshot.messages] == ["user", "assistant"]


def test_a_tool_using_turn_streams_the_call_and_its_result_between_the_texts(
    client: TestClient, gate: Gate
) -> None:
    gate.opened.set()
    cid = create(client)
    events = say(client, cid, HOLD)
    kinds = [e["type"] for e in events]
    call_at, result_at = kinds.index("tool_call"), kinds.index("tool_result")
    assert "text_delta" in kinds[:call_at] and "text_delta" in kinds[result_at:]
    assert call_at < result_at and kinds[-1] == "done"
    assert events[call_at]["name"] == events[result_at]["name"] == "hold_on"
    assert events[result_at]["content"] == "go" and not events[result_at]["is_error"]


def test_conversations_are_listed_newest_first_in_pages(client: TestClient) -> None:
    made = []
    for n in range(5):
        cid = create(client)
        say(client, cid, f"conversation {n}")
        made.append(cid)
    fresh = create(client)  # not stored yet: listed first
    seen: list[str] = []
    cursor: int | None = 0
    while cursor is not None:
        page = client.get(f"/api/conversations?limit=2&cursor={cursor}", headers=ALICE).json()
        assert len(page["conversations"]) <= 2
        seen += [c["conversation_id"] for c in page["conversations"]]
        cursor = page["next"]
    assert seen == [fresh, *reversed(made)]


def test_reading_a_conversation_gives_messages_transcript_tokens_and_usage(
    client: TestClient,
) -> None:
    cid = create(client)
    empty = client.get(f"/api/conversations/{cid}", headers=ALICE).json()
    assert empty["messages"] == [] and empty["version"] == 0 and not empty["running"]
    say(client, cid, "Tell me something")
    view = client.get(f"/api/conversations/{cid}", headers=ALICE).json()
    assert [m["role"] for m in view["messages"]] == ["user", "assistant"]
    assert view["messages"][0]["blocks"] == [{"type": "text", "text": "Tell me something"}]
    assert view["transcript"].startswith("[user]\nTell me something\n[assistant]\n")
    assert view["title"] == "Tell me something" and view["version"] >= 1
    assert 0 < view["tokens"]["used"] < view["tokens"]["window"] == 200_000
    assert [e["kind"] for e in view["usage"]] == ["model_call"]
    assert view["usage"][0]["input_tokens"] > 0 and "cache_read_tokens" in view["usage"][0]
    assert view["versions_supported"] is True


def test_export_is_the_stored_record_and_delete_removes_it(
    client: TestClient, store: LmdbStore
) -> None:
    cid = create(client)
    say(client, cid, "keep this")
    exported = client.get(f"/api/conversations/{cid}/export", headers=ALICE)
    assert exported.status_code == 200
    assert f'filename="{cid}.json"' in exported.headers["content-disposition"]
    restored = decode_snapshot(exported.content, cid)
    stored = store.load(cid, "alice")
    assert stored is not None and restored.messages == stored.messages
    assert client.delete(f"/api/conversations/{cid}", headers=ALICE).status_code == 204
    assert store.load(cid, "alice") is None
    assert client.get(f"/api/conversations/{cid}", headers=ALICE).status_code == 404


def test_every_save_is_a_version_listed_oldest_first_and_an_older_one_loads(
    client: TestClient,
) -> None:
    cid = create(client)
    say(client, cid, "hello")
    say(client, cid, "again")
    listed = client.get(f"/api/conversations/{cid}/versions", headers=ALICE).json()["versions"]
    numbers = [v["version"] for v in listed]
    assert numbers == sorted(numbers) and len(numbers) >= 4  # two saves per turn
    first_turn = client.get(f"/api/conversations/{cid}/versions/{numbers[1]}", headers=ALICE)
    assert first_turn.status_code == 200
    assert "hello" in first_turn.json()["transcript"]
    assert "again" not in first_turn.json()["transcript"]
    by_time = client.get(
        f"/api/conversations/{cid}/versions/{listed[-1]['saved_at']}", headers=ALICE
    )
    assert by_time.status_code == 200 and "again" in by_time.json()["transcript"]
    foreign = client.get(f"/api/conversations/{cid}/versions/{numbers[1]}", headers=BOB)
    assert foreign.status_code == 404
    bad = client.get(f"/api/conversations/{cid}/versions/yesterday", headers=ALICE)
    assert bad.status_code == 400


@pytest.mark.parametrize(
    ("kwargs", "status", "words"),
    [
        ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 400, "JSON"),
        ({"content": b"[1]", "headers": {"content-type": "application/json"}}, 400, "object"),
        ({"content": b"text=hi", "headers": {"content-type": "text/plain"}}, 415, "JSON"),
        ({"json": {"text": ""}}, 400, "non-empty"),
        ({"json": {"text": 5}}, 400, "non-empty"),
        ({"json": {"text": "x" * 40_000}}, 413, "characters"),
        ({"json": {"text": "x" * 70_000}}, 413, "byte limit"),
    ],
)
def test_bad_input_is_a_4xx_json_error_and_stores_nothing(
    client: TestClient, store: LmdbStore, kwargs: dict[str, Any], status: int, words: str
) -> None:
    cid = create(client)
    headers = {**ALICE, **kwargs.pop("headers", {})}
    response = client.post(f"/api/conversations/{cid}/messages", headers=headers, **kwargs)
    assert response.status_code == status
    body = response.json()
    assert body["status"] == status and words in body["error"]
    assert "Traceback" not in response.text
    assert store.load(cid, "alice") is None


def test_unknown_routes_methods_and_parameters_are_json_errors(client: TestClient) -> None:
    assert client.get("/nowhere").json() == {"error": "Not Found", "status": 404}
    assert client.put("/api/conversations", headers=ALICE).status_code == 405
    assert client.get("/api/conversations?limit=0", headers=ALICE).status_code == 400
    assert client.get("/api/conversations?cursor=-1", headers=ALICE).status_code == 400
    assert client.get("/static/../_app.py").status_code == 404
    assert client.get("/static/index.html").status_code == 404  # only the listed assets


def test_the_token_is_exchanged_for_an_http_only_same_site_cookie(client: TestClient) -> None:
    refused = client.post("/api/session", headers={"authorization": "Bearer forged"})
    assert refused.status_code == 401 and "set-cookie" not in refused.headers
    response = client.post("/api/session", headers=ALICE)
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert client.get("/api/me").json()["user_id"] == "alice"  # the cookie alone
    assert client.post("/api/session").status_code == 200  # renewed by the cookie alone
    assert client.delete("/api/session").status_code == 204
    client.cookies.clear()
    assert client.get("/api/me").status_code == 401


def test_the_page_and_its_assets_come_from_the_app_alone(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(s.startswith("static/") or s == "data:," for s in sources)
    for asset in ("/static/app.js", "/static/app.css"):
        response = client.get(asset)
        assert response.status_code == 200 and "http" not in response.text


def test_healthz_answers_without_a_token(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "running_turns": 0}


def test_every_request_is_one_access_log_record(client: TestClient) -> None:
    records: list[dict[str, Any]] = []
    logger.enable("parlour")
    sink = logger.add(lambda m: records.append(m.record["extra"]), level="INFO")
    try:
        client.get("/api/me", headers=ALICE)
        client.get("/api/conversations/nope", headers=ALICE)
    finally:
        logger.remove(sink)
    access = [r for r in records if "status" in r]
    assert [(r["method"], r["path"], r["status"]) for r in access] == [
        ("GET", "/api/me", 200),
        ("GET", "/api/conversations/nope", 404),
    ]
    assert all(r["ms"] >= 0 for r in access)


def test_a_second_send_before_the_first_turn_starts_is_reported_queued(
    client: TestClient, store: LmdbStore
) -> None:
    cid = create(client)

    async def both() -> list[str]:
        host = client.app.state.host  # type: ignore[attr-defined]
        first = await host.send("alice", cid, "one")
        second = await host.send("alice", cid, "two")
        for _, feed, start in (first, second):
            async for _ in feed.follow(start):
                pass
        return [first[0], second[0]]

    assert client.portal.call(both) == ["started", "queued"]  # type: ignore[union-attr]
    snapshot = store.load(cid, "alice")
    assert snapshot is not None
    assert [m.role for m in snapshot.messages] == ["user", "assistant"] * 2  # in send order
    answer = snapshot.messages[1].blocks[0]
    assert isinstance(answer, TextBlock) and "'one'" in answer.text
