"""A turn's events go out with their numbers as SSE ids, and a follower that reconnects with
the last one (what an ``EventSource`` sends as ``Last-Event-ID``) gets the rest of the running
turn: each event once, in order, ending with the done event; a turn begun since it left
comes from its start."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

from starlette.applications import Starlette
from starlette.testclient import TestClient

from parlour.actors import ConversationService

from .serve_helpers import ALICE, HOLD, Gate, LiveServer, create, sse_events, sse_frames

JSON = {**ALICE, "accept": "application/json"}
Frame = tuple[str | None, dict[str, Any]]


def until(frames: Iterator[Frame], kind: str) -> list[Frame]:
    """Read frames up to and including the first event of ``kind``."""
    seen = []
    for frame in frames:
        seen.append(frame)
        if frame[1]["type"] == kind:
            return seen
    raise AssertionError(f"the stream ended before a {kind} event: {seen}")


def test_each_event_of_a_turn_goes_with_its_seq_as_its_id_and_a_turn_start_clears_it(
    client: TestClient, gate: Gate
) -> None:
    gate.opened.set()
    cid = create(client)
    said = client.post(f"/api/conversations/{cid}/messages", headers=ALICE, json={"text": HOLD})
    frames = list(sse_frames(said.text.splitlines()))
    kinds = [event["type"] for _, event in frames]
    assert kinds[:2] == ["accepted", "turn_start"] and kinds[-1] == "done"
    assert "tool_call" in kinds and "tool_result" in kinds
    assert [frame_id for frame_id, _ in frames[:2]] == [None, ""]  # none; the turn's: cleared
    numbered = frames[2:]
    assert [frame_id for frame_id, _ in numbered] == [str(n) for n in range(1, len(frames) - 1)]
    assert all(event["seq"] == int(frame_id or 0) for frame_id, event in numbered)


def test_a_follower_reconnecting_with_its_last_event_id_gets_each_event_of_the_turn_once(
    live: LiveServer, gate: Gate
) -> None:
    """The follower connects, takes one more event, goes away, and comes back with the id it
    saw last, as an ``EventSource`` does, at every event of the turn held in its tool; then
    once more, and the turn goes on to its end."""
    with live.client() as sender, live.client() as follower:
        cid = create(sender)
        url = f"/api/conversations/{cid}/events?once=1"
        with sender.stream("POST", f"/api/conversations/{cid}/messages", json={"text": HOLD}) as r:
            events = sse_events(r)
            assert next(events)["type"] == "accepted"
            held = []
            for event in events:  # the turn so far: it waits in its tool after the call
                held.append(event)
                if event["type"] == "tool_call":
                    break
            got: list[dict[str, Any]] = []
            last: str | None = None
            while len(got) < len(held):
                headers = {} if not last else {"last-event-id": last}
                with follower.stream("GET", url, headers=headers) as f:
                    frames = sse_frames(f.iter_lines())
                    assert next(frames)[1] == {"type": "watching", "running": True}
                    for frame_id, event in frames:
                        got.append(event)
                        last = frame_id if frame_id is not None else last
                        if frame_id:  # away after the first numbered event it takes
                            break
            assert last is not None
            with follower.stream("GET", url, headers={"last-event-id": last}) as f:
                frames = sse_frames(f.iter_lines())
                # the server follows the running turn from here on: it may go on
                assert next(frames)[1] == {"type": "watching", "running": True}
                gate.opened.set()
                got += [event for _, event in frames]
            rest = list(events)
    assert got == held + rest  # the turn's events once each, in order
    assert got[0]["type"] == "turn_start" and got[-1]["type"] == "done"
    assert [event["seq"] for event in got[1:]] == list(range(1, len(got)))


def test_a_last_event_id_resumes_a_turn_run_outside_the_host_through_the_service(
    live: LiveServer, app: Starlette, gate: Gate, service: ConversationService
) -> None:
    chat = app.state.host.agent.chat(service, user_id="alice")
    turn = threading.Thread(target=chat.send, args=(HOLD,))
    turn.start()
    assert gate.entered.wait(10)
    with live.client() as c:
        url = f"/api/conversations/{chat.conversation_id}/events?once=1"
        with c.stream("GET", url, headers={"last-event-id": "0"}) as j:  # the whole turn
            frames = sse_frames(j.iter_lines())
            assert next(frames)[1] == {"type": "watching", "running": False}
            first_id, first = next(frames)
        assert first_id == "1" and first["type"] == "text_delta"
        with c.stream("GET", url, headers={"last-event-id": first_id}) as j:
            frames = sse_frames(j.iter_lines())
            assert next(frames)[1] == {"type": "watching", "running": False}
            resumed = [next(frames)]  # published while it was away: it follows the turn again
            gate.opened.set()
            resumed += list(frames)
    turn.join(10)
    events = [first] + [event for _, event in resumed]
    assert [frame_id for frame_id, _ in resumed] == [str(e["seq"]) for e in events[1:]]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    kinds = [e["type"] for e in events]
    assert kinds[1:3] == ["tool_call", "tool_result"] and kinds[-1] == "done"


def test_a_reconnect_between_turns_follows_the_next_turn_from_its_start(
    live: LiveServer, gate: Gate
) -> None:
    gate.opened.set()
    with live.client() as sender, live.client() as watcher:
        cid = create(sender)
        say = sender.post(f"/api/conversations/{cid}/messages", json={"text": "first"})
        assert [e["type"] for e in sse_events(say)][-1] == "done"
        url = f"/api/conversations/{cid}/events"
        with watcher.stream("GET", url, headers={"last-event-id": "3"}) as w:  # stale: turn 1's
            frames = sse_frames(w.iter_lines())
            assert next(frames)[1] == {"type": "watching", "running": False}
            sent = sender.post(
                f"/api/conversations/{cid}/messages", headers=JSON, json={"text": "second"}
            )
            assert sent.status_code == 202
            turn = until(frames, "done")
    assert turn[0][1]["type"] == "turn_start"
    assert [frame_id for frame_id, _ in turn[1:]] == [str(n) for n in range(1, len(turn))]
    assert "second" in turn[-1][1]["text"]


def test_a_reconnect_resumes_only_the_turn_it_left_not_one_begun_since(
    app: Starlette, gate: Gate
) -> None:
    """The watcher came back with an id while no turn ran; a turn begun (and ended) before it
    looked again is not the one it left: it gets that turn from its start."""
    gate.opened.set()
    host = app.state.host

    async def main() -> list[dict[str, Any]]:
        cid = host.create("alice")
        watch = host.watch("alice", cid, once=True, after=3)
        assert await anext(watch) == [{"type": "watching", "running": False}]
        _, feed, _ = await host.send("alice", cid, "hello")
        async for _ in feed.follow():  # the turn runs to its end while the watcher waits
            pass
        got = [event async for batch in watch for event in batch]
        await host.aclose()
        return got

    got = asyncio.run(main())
    assert got[0]["type"] == "turn_start" and got[-1]["type"] == "done"
    assert [event["seq"] for event in got[1:]] == list(range(1, len(got)))
