"""The app on uvicorn on 127.0.0.1: streaming as it happens, joiners, offers, cancel, sends
never interleaved, turns outliving their requests, and a graceful shutdown."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx2
from starlette.applications import Starlette

from parlour.actors import ConversationService
from parlour.runtime.blocks import ToolResultBlock, ToolUseBlock
from parlour.stores import LmdbStore

from ..agent_helpers import user_texts
from .serve_helpers import ALICE, BOB, HOLD, Gate, LiveServer, create, sse_events

JSON = {**ALICE, "accept": "application/json"}


def until(events: Iterator[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """Read events up to and including the first of ``kind``."""
    seen = []
    for event in events:
        seen.append(event)
        if event["type"] == kind:
            return seen
    raise AssertionError(f"the stream ended before a {kind} event: {seen}")


def stored_roles_and_results(store: LmdbStore, cid: str) -> tuple[list[str], bool]:
    snapshot = store.load(cid, "alice")
    assert snapshot is not None
    blocks = [b for m in snapshot.messages for b in m.blocks]
    calls = {b.id for b in blocks if isinstance(b, ToolUseBlock)}
    results = {b.tool_use_id for b in blocks if isinstance(b, ToolResultBlock)}
    return [m.role for m in snapshot.messages], calls <= results


def test_events_arrive_while_the_turn_runs_and_a_joiner_gets_the_turn_from_its_start(
    live: LiveServer, gate: Gate
) -> None:
    with live.client() as sender, live.client() as joiner:
        cid = create(sender)
        with sender.stream("POST", f"/api/conversations/{cid}/messages", json={"text": HOLD}) as r:
            events = sse_events(r)
            head = until(events, "tool_call")  # streamed before the turn could finish
            assert not gate.opened.is_set() and gate.entered.is_set()
            foreign = joiner.get(f"/api/conversations/{cid}/events?once=1", headers=BOB)
            assert foreign.status_code == 404
            with joiner.stream("GET", f"/api/conversations/{cid}/events?once=1") as j:
                joined = sse_events(j)
                assert next(joined) == {"type": "watching", "running": True}
                assert until(joined, "tool_call") == head[1:]  # all but the sender's "accepted"
                gate.opened.set()
                rest = list(events)
                assert list(joined) == rest
    kinds = [e["type"] for e in head + rest]
    assert kinds[:2] == ["accepted", "turn_start"] and kinds[-1] == "done"
    assert kinds.index("tool_result") > kinds.index("tool_call")


def test_a_message_sent_during_a_turn_is_offered_to_it_and_answered_within_it(
    live: LiveServer, gate: Gate, store: LmdbStore
) -> None:
    with live.client() as sender, live.client() as other:
        cid = create(sender)
        with sender.stream("POST", f"/api/conversations/{cid}/messages", json={"text": HOLD}) as r:
            events = sse_events(r)
            until(events, "tool_call")
            offered = other.post(
                f"/api/conversations/{cid}/messages", headers=JSON, json={"text": "and then?"}
            )
            assert offered.status_code == 202 and offered.json()["status"] == "offered"
            gate.opened.set()
            rest = list(events)
    kinds = [e["type"] for e in rest]
    accepted_at = kinds.index("offer_accepted")
    assert rest[accepted_at]["text"] == "and then?"
    assert "text_delta" in kinds[accepted_at:] and kinds[-1] == "done"
    roles, answerable = stored_roles_and_results(store, cid)
    assert answerable and roles[-1] == "assistant"
    snapshot = store.load(cid, "alice")
    assert snapshot is not None
    assert "and then?" in user_texts(snapshot)


def test_cancel_ends_the_running_turn_through_force_release_and_keeps_it_answerable(
    live: LiveServer, gate: Gate, store: LmdbStore
) -> None:
    with live.client() as sender, live.client() as other:
        cid = create(sender)
        assert other.post(f"/api/conversations/{cid}/cancel").json() == {"cancelled": False}
        with sender.stream("POST", f"/api/conversations/{cid}/messages", json={"text": HOLD}) as r:
            events = sse_events(r)
            until(events, "tool_call")
            assert other.post(f"/api/conversations/{cid}/cancel", headers=BOB).status_code == 404
            assert other.get(f"/api/conversations/{cid}").json()["running"] is True
            assert other.post(f"/api/conversations/{cid}/cancel").json() == {"cancelled": True}
            rest = list(events)
        assert rest[-1]["type"] == "cancelled"
        assert other.get(f"/api/conversations/{cid}").json()["running"] is False
        gate.opened.set()
        roles, answerable = stored_roles_and_results(store, cid)
        assert answerable and roles[0] == "user"  # the cancelled call got an error result
        after = other.post(f"/api/conversations/{cid}/messages", json={"text": "still there?"})
        assert [e["type"] for e in sse_events(after)][-1] == "done"


def test_a_client_that_goes_away_mid_turn_does_not_cancel_the_turn(
    live: LiveServer, gate: Gate, store: LmdbStore
) -> None:
    with live.client() as sender, live.client() as joiner:
        cid = create(sender)
        with sender.stream("POST", f"/api/conversations/{cid}/messages", json={"text": HOLD}) as r:
            until(sse_events(r), "tool_call")
        # the sender has hung up; the turn goes on and a joiner sees it finish
        with joiner.stream("GET", f"/api/conversations/{cid}/events?once=1") as j:
            joined = sse_events(j)
            until(joined, "tool_call")
            gate.opened.set()
            assert [e["type"] for e in joined][-1] == "done"
    roles, answerable = stored_roles_and_results(store, cid)
    assert answerable and roles[-1] == "assistant" and "tool" not in roles[-1]


def test_simultaneous_sends_are_never_interleaved_and_none_is_lost(
    live: LiveServer, store: LmdbStore
) -> None:
    with live.client() as c:
        cid = create(c)
    texts = [f"message {n}" for n in range(12)]
    outcomes: dict[str, list[dict[str, Any]]] = {}
    barrier = threading.Barrier(len(texts))

    def send(text: str) -> None:
        with live.client() as c:
            barrier.wait()
            response = c.post(f"/api/conversations/{cid}/messages", json={"text": text})
            outcomes[text] = list(sse_events(response))

    threads = [threading.Thread(target=send, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(outcomes[t][-1]["type"] == "done" for t in texts)
    statuses = [outcomes[t][0]["status"] for t in texts]
    assert statuses.count("started") + statuses.count("queued") >= 1
    snapshot = store.load(cid, "alice")
    assert snapshot is not None
    assert sorted(user_texts(snapshot)) == sorted(texts)  # every send stored exactly once
    roles = [m.role for m in snapshot.messages]
    assert roles[-1] == "assistant"
    turns = sum(1 for t in texts if outcomes[t][0]["status"] != "offered")
    assert sum(1 for m in snapshot.messages if m.role == "assistant") >= turns


def test_the_event_stream_follows_each_next_turn_until_shutdown(
    live: LiveServer, gate: Gate, store: LmdbStore
) -> None:
    gate.opened.set()
    with live.client() as sender, live.client() as watcher:
        cid = create(sender)
        with watcher.stream("GET", f"/api/conversations/{cid}/events") as w:
            watched = sse_events(w)
            assert next(watched) == {"type": "watching", "running": False}
            for n in range(2):
                sender.post(
                    f"/api/conversations/{cid}/messages", headers=JSON, json={"text": f"turn {n}"}
                )
                turn = until(watched, "done")
                assert turn[0]["type"] == "turn_start" and f"turn {n}" in turn[-1]["text"]
            live.terminate()
            assert list(watched) == []  # the stream ended with the server


def test_sigterm_cancels_running_turns_at_their_boundary_saves_them_and_exits(
    live: LiveServer, gate: Gate, store: LmdbStore
) -> None:
    with live.client() as sender:
        cid = create(sender)
        with sender.stream("POST", f"/api/conversations/{cid}/messages", json={"text": HOLD}) as r:
            events = sse_events(r)
            until(events, "tool_call")
            stopper = threading.Thread(target=live.terminate)
            stopper.start()
            rest = list(events)
            stopper.join(30)
    assert not live.thread.is_alive()
    assert rest[-1]["type"] == "cancelled"
    roles, answerable = stored_roles_and_results(store, cid)
    assert answerable and roles[0] == "user"
    try:
        httpx2.get(live.url + "/healthz", timeout=2)
        refused = False
    except httpx2.TransportError:
        refused = True
    assert refused


def test_idle_conversations_leave_the_host_past_its_slot_cap_and_come_back_on_use(
    live: LiveServer, app: Starlette, store: LmdbStore
) -> None:
    host = app.state.host
    host.max_slots = 3
    with live.client() as c:
        made = [create(c) for _ in range(5)]
        for cid in made:
            said = c.post(f"/api/conversations/{cid}/messages", json={"text": f"hi {cid}"})
            assert [e["type"] for e in sse_events(said)][-1] == "done"
        assert len(host._slots) <= 3
        again = c.post(f"/api/conversations/{made[0]}/messages", json={"text": "back"})
        assert [e["type"] for e in sse_events(again)][-1] == "done"
    snapshot = store.load(made[0], "alice")
    assert snapshot is not None and user_texts(snapshot) == [f"hi {made[0]}", "back"]


def test_a_turn_run_outside_the_host_is_followed_through_the_service(
    live: LiveServer, app: Starlette, gate: Gate, service: ConversationService
) -> None:
    chat = app.state.host.agent.chat(service, user_id="alice")
    turn = threading.Thread(target=chat.send, args=(HOLD,))
    turn.start()
    assert gate.entered.wait(10)
    with live.client() as c:
        url = f"/api/conversations/{chat.conversation_id}/events?once=1"
        assert c.get(url, headers=BOB).status_code == 404
        with c.stream("GET", url) as j:
            joined = sse_events(j)
            assert next(joined) == {"type": "watching", "running": False}
            # the text so far, numbered as the turn's latest event (the tool call after it)
            head = next(joined)
            assert head == {
                "type": "text_delta",
                "seq": 2,
                "turn": head["turn"],
                "text": "Calling hold_on.",
            }
            gate.opened.set()
            rest = list(joined)
            assert head["turn"] and {e["turn"] for e in rest[:-1]} == {head["turn"]}
    turn.join(10)
    kinds = [e["type"] for e in rest]
    assert "tool_result" in kinds and kinds[-1] == "done"
