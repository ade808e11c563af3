"""Helpers of the HTTP host tests: a gated tool that holds a turn open, the app on uvicorn
on a loopback port, and SSE readers (their data, or their ids and data)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.testclient import TestClient

from parlour.actors import Agent
from parlour.actors.app._serve import _Server
from parlour.runtime import Depth, OutputSize, ScriptedClient, tool_from_function
from parlour.runtime.testing import scripted_tool_calls

TOKENS = {"alice-token": "alice", "bob-token": "bob"}
ALICE = {"authorization": "Bearer alice-token"}
BOB = {"authorization": "Bearer bob-token"}
HOLD = "please hold_on"  # the scripted model calls a declared tool its message names


class Gate:
    """The ``hold_on`` tool: it blocks its turn until the test opens the gate."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    def hold_on(self) -> str:
        """Wait until the operator says go."""
        self.entered.set()
        if not self.opened.wait(30):
            raise TimeoutError("the test never opened the gate")
        return "go"


ASK = scripted_tool_calls(("delete_order", {"order_id": "1"}), ("delete_order", {"order_id": "2"}))


class Orders:
    """``delete_order``, which needs a person's approval; it notes each order it deletes."""

    def __init__(self) -> None:
        self.deleted: list[str] = []

        def delete_order(order_id: str) -> str:
            """Delete an order.

            Args:
                order_id: the order.
            """
            self.deleted.append(order_id)
            return f"order {order_id} deleted"

        self.tool = tool_from_function(delete_order, needs_approval=True)

    def agent(self) -> Agent:
        """An agent whose first answer asks to delete orders 1 and 2 (both wait for a
        person), and whose next says "Both handled."."""
        return Agent(
            ScriptedClient([ASK, "Both handled."]),
            tools=[self.tool],
            output=OutputSize.COMPACT,
            depth=Depth.IMMEDIATE,
        )


ASK = scripted_tool_calls(("delete_order", {"order_id": "1"}), ("delete_order", {"order_id": "2"}))


def make_agent(gate: Gate) -> Agent:
    return Agent(
        ScriptedClient(depth=None, output_declaration=None),
        tools=[gate.hold_on],
        objective="Answer briefly.",
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )


class LiveServer:
    """The app on uvicorn on 127.0.0.1 in a thread, with the real server's shutdown path.

    The socket listens before uvicorn starts, so requests made at once wait in its backlog
    instead of racing the start-up.
    """

    def __init__(self, app: Starlette) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on")
        self.server = _Server(config, app.state.host)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.listener]}, daemon=True
        )
        self.thread.start()

    def client(self, headers: dict[str, str] = ALICE) -> httpx2.Client:
        return httpx2.Client(base_url=self.url, headers=headers, timeout=20)

    def terminate(self) -> None:
        """What SIGTERM does: the host is told, then uvicorn stops."""
        self.server.handle_exit(15, None)
        self.thread.join(30)
        self.listener.close()


def sse_events(response: httpx2.Response) -> Iterator[dict[str, Any]]:
    """The JSON data of each event of an SSE response, as they arrive."""
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield json.loads(line[len("data: ") :])


def sse_frames(lines: Iterable[str]) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """The id and the JSON data of each event of an SSE stream, as they arrive: the id
    None when the event has no ``id`` line, "" when it has an empty one (which clears the
    client's last event id)."""
    frame_id: str | None = None
    for line in lines:
        if line.startswith("id:"):
            frame_id = line[3:].strip()
        elif line.startswith("data: "):
            yield frame_id, json.loads(line[len("data: ") :])
            frame_id = None


def parse_sse(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]


def create(client: TestClient | httpx2.Client, headers: dict[str, str] = ALICE) -> str:
    response = client.post("/api/conversations", headers=headers)
    assert response.status_code == 201, response.text
    cid: str = response.json()["conversation_id"]
    return cid
