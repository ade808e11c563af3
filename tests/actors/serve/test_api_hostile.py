"""The HTTP API against hostile input (deep nesting, lone surrogates, numbers past 64 bits,
fields it does not take): each a 4xx JSON error with nothing stored; and what a new
conversation's body and a restart do to what the API answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from parlour.actors import ConversationService, asgi_app
from parlour.runtime.blocks import TextBlock
from parlour.stores import LmdbStore, MemorySessionCache

from .serve_helpers import ALICE, TOKENS, Gate, create, make_agent, parse_sse

JSON = {**ALICE, "content-type": "application/json"}


def assert_json_error(response: object, status: int, words: str) -> None:
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    assert body["status"] == status and words in body["error"], body
    assert "Traceback" not in response.text  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("content", "status", "words"),
    [
        (b"[" * 30_000, 400, "nested too deeply"),
        (b'{"text": ' + b"[" * 30_000 + b"}", 400, "nested too deeply"),
        (b'{"text": "hi \\ud800"}', 400, "lone surrogate"),
        (b'{"text": "\\udfff"}', 400, "lone surrogate"),
    ],
    ids=["nested-array", "nested-field", "lone-high-surrogate", "lone-low-surrogate"],
)
def test_a_body_no_json_reader_or_store_takes_is_a_400_and_stores_nothing(
    client: TestClient, store: LmdbStore, content: bytes, status: int, words: str
) -> None:
    cid = create(client)
    sent = client.post(f"/api/conversations/{cid}/messages", headers=JSON, content=content)
    assert_json_error(sent, status, words)
    created = client.post("/api/conversations", headers=JSON, content=content)
    assert_json_error(created, status, words)
    assert store.load(cid, "alice") is None
    assert store.list_conversations("alice") == []


def test_fields_a_body_does_not_take_are_a_422_naming_them_and_nothing_is_stored(
    client: TestClient, store: LmdbStore
) -> None:
    cid = create(client)
    body = {"text": "hi", "role": "system", "bogus": 1}
    for path in (f"/api/conversations/{cid}/messages", "/api/conversations"):
        response = client.post(path, headers=ALICE, json=body)
        assert_json_error(response, 422, "Unknown field 'bogus', 'role'")
        assert "text" in response.json()["error"]  # and says what it does take
    assert store.list_conversations("alice") == []


@pytest.mark.parametrize("version", ["18446744073709551616", "9" * 400, "9223372036854775808"])
def test_a_version_number_past_64_bits_is_a_404_json_error(
    client: TestClient, version: str
) -> None:
    cid = create(client)
    parse_sse(
        client.post(f"/api/conversations/{cid}/messages", headers=ALICE, json={"text": "a"}).text
    )
    response = client.get(f"/api/conversations/{cid}/versions/{version}", headers=ALICE)
    assert_json_error(response, 404, "No version")


def test_a_version_past_the_last_says_which_is_missing_not_that_the_conversation_is(
    client: TestClient,
) -> None:
    cid = create(client)
    client.post(f"/api/conversations/{cid}/messages", headers=ALICE, json={"text": "a"})
    response = client.get(f"/api/conversations/{cid}/versions/999", headers=ALICE)
    assert_json_error(response, 404, f"Conversation {cid} has no version 999")


def test_a_new_conversation_with_a_text_starts_with_that_message(
    client: TestClient, store: LmdbStore
) -> None:
    created = client.post("/api/conversations", headers=ALICE, json={"text": "first words"})
    assert created.status_code == 201, created.text
    cid = created.json()["conversation_id"]
    assert created.json()["accepted"] == "started"
    # turns run one at a time in arrival order: when the next one has streamed, both are saved
    parse_sse(
        client.post(f"/api/conversations/{cid}/messages", headers=ALICE, json={"text": "next"}).text
    )
    snapshot = store.load(cid, "alice")
    assert snapshot is not None
    user_blocks = [b for m in snapshot.messages if m.role == "user" for b in m.blocks]
    said = [b.text for b in user_blocks if isinstance(b, TextBlock)]
    assert said == ["first words", "next"]
    assert snapshot.title == "first words"


def test_a_new_conversation_with_a_bad_text_is_refused_and_none_is_made(
    client: TestClient, store: LmdbStore
) -> None:
    for body in ({"text": ""}, {"text": 5}, {"text": "x" * 40_000}):
        response = client.post("/api/conversations", headers=ALICE, json=body)
        assert response.status_code in (400, 413), response.text
    listing = client.get("/api/conversations", headers=ALICE).json()
    assert listing["conversations"] == [] and store.list_conversations("alice") == []
    assert client.post("/api/conversations", headers=ALICE, json={}).status_code == 201


def test_the_usage_ledger_is_read_from_the_store_after_a_restart(
    tmp_path: Path, gate: Gate
) -> None:
    def serve() -> tuple[LmdbStore, ConversationService, TestClient]:
        store = LmdbStore(tmp_path / "db")
        service = ConversationService(store, MemorySessionCache(), shutdown_grace_s=1.0)
        return store, service, TestClient(asgi_app(make_agent(gate), service, tokens=TOKENS))

    store, service, client = serve()
    with client:
        cid = create(client)
        client.post(f"/api/conversations/{cid}/messages", headers=ALICE, json={"text": "hi"})
        before = client.get(f"/api/conversations/{cid}", headers=ALICE).json()["usage"]
    service.stop()
    store.close()
    store, service, client = serve()  # a new process's agent: its own ledger is empty
    try:
        with client:
            after = client.get(f"/api/conversations/{cid}", headers=ALICE).json()["usage"]
    finally:
        service.stop()
        store.close()
    assert [e["kind"] for e in after] == ["model_call"] and after == before
    assert after[0]["input_tokens"] > 0
