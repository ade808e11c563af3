"""What the inspector reads through the API to debug an agent: what the model is sent,
the step each version was made by, a search of the list, and an interrupted turn."""

from __future__ import annotations

from starlette.testclient import TestClient

from parlour.actors import BasicThinker, ConversationService
from parlour.runtime import Depth, OutputSize

from .serve_helpers import ALICE, BOB, HOLD, Gate, create, parse_sse


def say(client: TestClient, cid: str, text: str) -> None:
    sent = client.post(f"/api/conversations/{cid}/messages", headers=ALICE, json={"text": text})
    assert sent.status_code == 200
    last = parse_sse(sent.text)[-1]
    assert last["type"] == "done", last


def test_a_view_shows_the_system_text_and_the_tools_the_model_is_sent(
    client: TestClient,
) -> None:
    cid = create(client)
    say(client, cid, "hi")
    prompt = client.get(f"/api/conversations/{cid}", headers=ALICE).json()["prompt"]
    assert prompt["system"].startswith("Answer briefly.")
    assert "Available tools:" in prompt["system"]  # the tool-weight guidance parlour adds
    [tool] = prompt["tools"]
    assert tool["name"] == "hold_on" and tool["description"] == "Wait until the operator says go."
    assert tool["schema"]["type"] == "object" and tool["announced_at"] == 0


def test_each_version_names_the_step_that_made_it(client: TestClient, gate: Gate) -> None:
    cid = create(client)
    gate.opened.set()
    say(client, cid, HOLD)
    listed = client.get(f"/api/conversations/{cid}/versions", headers=ALICE).json()["versions"]
    assert [v["step"] for v in listed] == [
        "user message",
        "model called hold_on",
        "1 tool result(s)",
        "model answered",
    ]


def test_the_list_is_searched_by_title_in_any_case(client: TestClient) -> None:
    for text in ("Plan the garden", "Fix the bike", "Garden tools"):
        say(client, create(client), text)
    found = client.get("/api/conversations?q=GARDEN", headers=ALICE).json()["conversations"]
    assert sorted(c["title"] for c in found) == ["Garden tools", "Plan the garden"]
    assert all(c["updated_at"] and c["created_at"] for c in found)  # dated
    assert client.get("/api/conversations?q=garden", headers=BOB).json()["conversations"] == []


def test_a_turn_that_died_after_the_users_message_reads_as_interrupted(
    client: TestClient, service: ConversationService
) -> None:
    thinker = BasicThinker("alice")  # another program on the store, which then died
    cid = thinker.mint_conversation_id()
    context = service.obtain_conversation(None, thinker).get(timeout=5)
    context.depth, context.output_declaration = Depth.IMMEDIATE, OutputSize.STANDARD
    context.add_user_message("are you there?")
    service.save_conversation(context, thinker)
    service.release(thinker)
    view = client.get(f"/api/conversations/{cid}", headers=ALICE).json()
    assert view["interrupted"] is True and not view["running"]
    say(client, cid, "go on")
    assert client.get(f"/api/conversations/{cid}", headers=ALICE).json()["interrupted"] is False
