"""``parlour serve --cluster``: the HTTP app on uvicorn on 127.0.0.1 over a real local Ray
cluster and the real PostgreSQL. A turn runs on its conversation's shard, a joiner follows
it, a turn other code runs on the cluster is followed too, a cancel reaches the shard, a
foreign token learns nothing, and the command's flags are checked at the boundary."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn

from parlour.actors.app._cli import main
from parlour.actors.app._serve import ClusterConfig, _Server, run_serve_cluster
from parlour.actors.app.serve import cluster_asgi_app
from parlour.actors.cluster import AgentCluster, ShardStatus
from parlour.stores import PostgresStore

from ..agent_helpers import user_texts as texts_of

pytestmark = pytest.mark.cluster

AGENT = "cluster_agents:scripted"
HOLD = "please hold"  # the scripted model calls the declared tool its message names
TOKENS = {"alice-token": "alice", "bob-token": "bob"}
ALICE = {"authorization": "Bearer alice-token"}
BOB = {"authorization": "Bearer bob-token"}
JSON = {"accept": "application/json"}


class Served:
    """The cluster's app on uvicorn on a loopback port in a thread (the socket listens
    before uvicorn starts, so requests made at once wait in its backlog)."""

    def __init__(self, cluster: AgentCluster, store: PostgresStore) -> None:
        self.cluster = cluster
        self.app = cluster_asgi_app(cluster, store, tokens=TOKENS)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        config = uvicorn.Config(self.app, log_config=None, access_log=False, lifespan="on")
        self.server = _Server(config, self.app.state.host)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.listener]}, daemon=True
        )
        self.thread.start()

    def client(self, headers: dict[str, str] = ALICE) -> httpx2.Client:
        return httpx2.Client(base_url=self.url, headers=headers, timeout=60)

    def stop(self) -> None:
        self.server.handle_exit(15, None)
        self.thread.join(60)
        self.listener.close()


@pytest.fixture
def served(ray_cluster: Any, postgres_conninfo: str, request: Any, gate: Any) -> Iterator[Served]:
    """Two shards named after the test over this test's schema, served over HTTP."""
    import ray

    name = "serve-" + request.node.name.replace("_", "-")[:34]
    cluster = AgentCluster(name, shards=2, agent=AGENT, store=postgres_conninfo)
    store = PostgresStore(postgres_conninfo)
    served = Served(cluster, store)
    try:
        yield served
    finally:
        ray.get(gate.open.remote())
        served.stop()
        store.close()
        cluster.shutdown()


def sse_events(response: httpx2.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield json.loads(line[len("data: ") :])


def until(events: Iterator[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    seen = []
    for event in events:
        seen.append(event)
        if event["type"] == kind:
            return seen
    raise AssertionError(f"the stream ended before a {kind} event: {seen}")


def create(client: httpx2.Client) -> str:
    response = client.post("/api/conversations")
    assert response.status_code == 201, response.text
    cid: str = response.json()["conversation_id"]
    return cid


def say(client: httpx2.Client, cid: str, text: str) -> list[dict[str, Any]]:
    response = client.post(f"/api/conversations/{cid}/messages", json={"text": text})
    assert response.status_code == 200, response.text
    return [
        json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")
    ]


def stored_user_texts(conninfo: str, cid: str, user: str = "alice") -> list[str]:
    with PostgresStore(conninfo) as store:
        snapshot = store.load(cid, user)
    assert snapshot is not None
    return texts_of(snapshot)


def shard_turns(cluster: AgentCluster) -> dict[str, int]:
    return {s.shard: s.turns for s in cluster.status() if isinstance(s, ShardStatus)}


def test_a_turn_over_http_runs_on_the_conversations_shard_and_the_inspector_reads_the_store(
    served: Served, postgres_conninfo: str
) -> None:
    with served.client() as client:
        me = client.get("/api/me").json()
        assert me["user_id"] == "alice" and me["model"] == "scripted"
        cid = create(client)
        events = say(client, cid, "hello cluster")
        kinds = [e["type"] for e in events]
        assert kinds[:2] == ["accepted", "turn_start"] and kinds[-1] == "done"
        assert "text_delta" in kinds and "hello cluster" in events[-1]["text"]
        view = client.get(f"/api/conversations/{cid}").json()
        listed = client.get("/api/conversations").json()["conversations"]
        versions = client.get(f"/api/conversations/{cid}/versions").json()["versions"]
    assert view["version"] >= 1 and view["running"] is False
    assert view["usage"] and view["usage"][0]["kind"] == "model_call"  # saved by the shard
    assert [row["conversation_id"] for row in listed] == [cid]
    assert versions and versions[-1]["version"] == view["version"]
    assert stored_user_texts(postgres_conninfo, cid) == ["hello cluster"]
    turns = shard_turns(served.cluster)
    home = served.cluster.shard_of(cid)
    assert turns[home] == 1 and sum(turns.values()) == 1  # the turn ran where it is routed
    with served.client() as client:
        assert client.delete(f"/api/conversations/{cid}").status_code == 204  # on its shard
        assert client.get(f"/api/conversations/{cid}").status_code == 404
    with PostgresStore(postgres_conninfo) as store:
        assert not store.exists(cid, "alice")


def test_a_joiner_follows_the_turn_on_its_shard_from_its_start_and_an_offer_is_answered(
    served: Served, postgres_conninfo: str, gate: Any
) -> None:
    import ray

    with served.client() as sender, served.client() as joiner:
        cid = create(sender)
        with sender.stream("POST", f"/api/conversations/{cid}/messages", json={"text": HOLD}) as r:
            events = sse_events(r)
            head = until(events, "tool_call")
            assert ray.get(gate.arrived.remote(), timeout=60) == 1
            with joiner.stream("GET", f"/api/conversations/{cid}/events?once=1") as j:
                joined = sse_events(j)
                assert next(joined) == {"type": "watching", "running": True}
                assert until(joined, "tool_call") == head[1:]  # all but "accepted"
                offered = joiner.post(
                    f"/api/conversations/{cid}/messages", headers=JSON, json={"text": "and more"}
                )
                assert offered.status_code == 202 and offered.json()["status"] == "offered"
                ray.get(gate.open.remote())
                rest = list(events)
                assert list(joined) == rest
    kinds = [e["type"] for e in rest]
    assert "offer_accepted" in kinds and kinds[-1] == "done"
    assert stored_user_texts(postgres_conninfo, cid) == [HOLD, "and more"]


def test_the_event_stream_follows_a_turn_that_other_code_runs_on_the_cluster(
    served: Served, postgres_conninfo: str, gate: Any
) -> None:
    import ray
    from cluster_agents import send_from_here  # type: ignore[import-not-found]

    with served.client() as client:
        cid = create(client)
        say(client, cid, "hello")
        config = {"name": served.cluster.name, "shards": 2, "agent": AGENT}
        config["store"] = postgres_conninfo
        turn = ray.remote(send_from_here).options(num_cpus=0)
        reply_ref = turn.remote(config, "alice", cid, HOLD)  # another process's turn
        ray.get(gate.arrived.remote(), timeout=60)
        with client.stream("GET", f"/api/conversations/{cid}/events?once=1") as j:
            joined = sse_events(j)
            assert next(joined) == {"type": "watching", "running": False}
            first = next(joined)  # the turn's text so far, from its shard
            ray.get(gate.open.remote())
            followed = [first, *joined]
    reply = ray.get(reply_ref, timeout=60)
    assert followed[-1]["type"] == "done" and followed[-1]["text"] == reply.text
    assert stored_user_texts(postgres_conninfo, cid) == ["hello", HOLD]


def test_cancel_over_http_ends_the_turn_on_its_shard_and_the_conversation_goes_on(
    served: Served, postgres_conninfo: str, gate: Any
) -> None:
    import ray

    with served.client() as sender, served.client() as other:
        cid = create(sender)
        with sender.stream("POST", f"/api/conversations/{cid}/messages", json={"text": HOLD}) as r:
            events = sse_events(r)
            until(events, "tool_call")
            ray.get(gate.arrived.remote(), timeout=60)
            assert other.post(f"/api/conversations/{cid}/cancel").json() == {"cancelled": True}
            rest = list(events)
        assert rest[-1]["type"] == "cancelled"
        assert say(sender, cid, "after")[-1]["type"] == "done"
    assert stored_user_texts(postgres_conninfo, cid) == [HOLD, "after"]


def test_a_shard_killed_mid_turn_ends_its_stream_with_a_retryable_error_and_a_resend_works(
    served: Served, postgres_conninfo: str, gate: Any
) -> None:
    import ray

    with served.client() as client:
        cid = create(client)
        say(client, cid, "first")
        with client.stream("POST", f"/api/conversations/{cid}/messages", json={"text": HOLD}) as r:
            events = sse_events(r)
            until(events, "tool_call")
            ray.get(gate.arrived.remote(), timeout=60)
            ray.kill(served.cluster.handle(served.cluster.shard_of(cid)), no_restart=False)
            rest = list(events)
        assert rest[-1]["type"] == "error" and "retry" in rest[-1]["message"]
        assert client.get("/healthz").json() == {"status": "ok", "running_turns": 0}
        assert say(client, cid, "again")[-1]["type"] == "done"  # on the restarted shard
    assert stored_user_texts(postgres_conninfo, cid) == ["first", HOLD, "again"]


def test_a_foreign_token_is_refused_on_every_conversation_route_and_learns_nothing(
    served: Served, postgres_conninfo: str
) -> None:
    with served.client() as alice, served.client(BOB) as bob, served.client({}) as nobody:
        cid = create(alice)
        say(alice, cid, "secret plans")
        version = alice.get(f"/api/conversations/{cid}").json()["version"]
        missing = "ClusterChat-conv-0000-000000000000"
        for method, tail in [
            ("GET", ""),
            ("GET", "/export"),
            ("GET", "/versions"),
            ("GET", "/events?once=1"),
            ("POST", "/cancel"),
            ("DELETE", ""),
        ]:
            foreign = bob.request(method, f"/api/conversations/{cid}{tail}")
            absent = bob.request(method, f"/api/conversations/{missing}{tail}")
            assert foreign.status_code == absent.status_code == 404, (method, tail)
            assert foreign.json()["error"] == absent.json()["error"].replace(missing, cid)
        sent = bob.post(f"/api/conversations/{cid}/messages", json={"text": "mine now"})
        assert sent.status_code == 404
        assert nobody.get(f"/api/conversations/{cid}").status_code == 401
        assert bob.get("/api/conversations").json()["conversations"] == []
        assert alice.get(f"/api/conversations/{cid}").json()["version"] == version
    assert stored_user_texts(postgres_conninfo, cid) == ["secret plans"]


@pytest.mark.parametrize(
    "flags",
    [["--shards", "2"], ["--shards", "2", "--agent", AGENT], ["--agent", AGENT, "--store", "x"]],
)
def test_serve_cluster_without_its_shards_agent_or_store_is_a_usage_error(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--cluster", "chat", *flags])
    assert exited.value.code == 2
    assert "needs --shards N, --agent MODULE:FUNCTION and --store DSN" in capsys.readouterr().err


def test_serve_cluster_whose_agent_factory_fails_in_the_shards_says_why_and_exits_1(
    ray_cluster: Any, postgres_conninfo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = "cluster_agents:not_an_agent"
    config = ClusterConfig("serve-bad-agent", 1, bad, postgres_conninfo)
    try:
        assert run_serve_cluster(config, tmp_path, "127.0.0.1", 0) == 1
    finally:
        AgentCluster(config.name, shards=1, agent=bad, store=postgres_conninfo).shutdown()
    err = capsys.readouterr().err
    assert "did not start" in err and f"Agent factory '{bad}' returned object." in err


def test_parlour_serve_cluster_as_a_process_serves_a_turn_and_exits_cleanly_on_sigterm(
    ray_cluster: Any, postgres_conninfo: str, tmp_path: Path
) -> None:
    name = "serve-process"
    command = [sys.executable, "-m", "parlour.actors.app._cli", "serve", "--port", "0"]
    flags = ["--cluster", name, "--shards", "2", "--agent", AGENT, "--store", postgres_conninfo]
    flags += ["--address", ray_cluster.address, "--data-dir", str(tmp_path)]
    log = tmp_path / "stderr.txt"
    with (
        log.open("w") as stderr,
        subprocess.Popen(
            [*command, *flags], stdout=subprocess.PIPE, stderr=stderr, text=True
        ) as process,
    ):
        try:
            assert process.stdout is not None
            banner = process.stdout.readline() + process.stdout.readline()
            found = re.search(r"open (http://127\.0\.0\.1:\d+/)#token=(\S+)", banner)
            assert found, banner + log.read_text()
            assert f"cluster {name} (2 shards)" in banner
            url, token = found.groups()
            with httpx2.Client(base_url=url, timeout=60) as client:
                client.headers["authorization"] = f"Bearer {token}"
                cid = client.post("api/conversations").json()["conversation_id"]
                said = client.post(f"api/conversations/{cid}/messages", json={"text": "hi"})
                assert said.text.rstrip().splitlines()[-1].startswith('data: {"type":"done"')
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0
        finally:
            if process.poll() is None:
                process.kill()
            AgentCluster(name, shards=2, agent=AGENT, store=postgres_conninfo).shutdown()
    assert stored_user_texts(postgres_conninfo, cid, "me") == ["hi"]
