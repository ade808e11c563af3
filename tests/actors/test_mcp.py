"""MCP servers as an agent's tools, against real servers written with the SDK's own server
API (``mcp_server.py``): a stdio server run as a subprocess and a streamable-HTTP server on
loopback, in uvicorn in a thread. Nothing of the protocol is mocked: the scripted model
calls tools only the conversation announced, so a call that works proves the listing
reached the conversation's declarations."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from loguru import logger

from parlour.actors import Agent, ConversationService, ToolCallFinished
from parlour.actors.agent.mcp import MCPServerError, MCPServerHTTP, MCPServerStdio
from parlour.runtime import ScriptedClient
from parlour.runtime.blocks import ToolResultBlock
from parlour.runtime.testing import scripted_tool_calls
from parlour.stores import LmdbStore

from . import mcp_server
from .agent_helpers import stored, stored_results

SERVER = str(Path(mcp_server.__file__).resolve())
TOKEN = "sesame"


def results(reply: Any) -> list[ToolResultBlock]:
    return [b for m in reply.messages for b in m.blocks if isinstance(b, ToolResultBlock)]


def eventually(condition: Callable[[], bool], what: str, within: float = 20.0) -> None:
    """Wait for ``condition`` (a state another process or thread brings about)."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {within:g}s"
        time.sleep(0.02)


@pytest.fixture
def stdio(tmp_path: Path) -> Iterator[MCPServerStdio]:
    server = MCPServerStdio(sys.executable, [SERVER], env={"MCP_TEST_DIR": str(tmp_path)})
    yield server
    server.close()


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The test server as a streamable-HTTP endpoint on loopback, wanting the bearer TOKEN."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(mcp_server.http_app(TOKEN), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    eventually(lambda: server.started, "the HTTP server's start")
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    server.should_exit = True
    thread.join()
    sock.close()


def agent_with(server: Any, *replies: Any, **options: Any) -> Agent:
    return Agent(ScriptedClient(list(replies)), toolsets=[server], **options)


def test_a_stdio_servers_tools_are_listed_at_the_first_turn_declared_and_called(
    stdio: MCPServerStdio, service: ConversationService
) -> None:
    assert stdio.changed  # nothing listed before the first turn
    with agent_with(stdio, scripted_tool_calls(("add", {"a": 2, "b": 40})), "Done.") as agent:
        chat = agent.chat(service, user_id="alice")
        reply = chat.send("Add them.")
        assert [(r.content, r.is_error) for r in results(reply)] == [("42", False)]
        assert not stdio.changed
        saved = stored_results(stored(service, chat.conversation_id, "alice"))
        assert [r.content for r in saved] == ["42"]
        declared = [t.name for t in agent.tools.declarations()]
        assert {"add", "echo", "fail", "slow", "grow"} <= set(declared)


def test_results_map_text_images_resources_structured_content_and_error_results(
    stdio: MCPServerStdio, service: ConversationService
) -> None:
    calls = [
        ("echo", {"text": "hi ✓"}),
        ("fail", {"why": "no"}),
        ("picture", {}),
        ("document", {}),
        ("weather", {"city": "Oslo"}),
        ("add", {"a": "not a number"}),
    ]
    with agent_with(stdio, scripted_tool_calls(*calls), "Done.") as agent:
        reply = agent.chat(service, user_id="alice").send("Try them all.")
    echo, fail, picture, document, weather, bad = results(reply)
    assert (echo.content, echo.is_error) == ("hi ✓", False)
    assert fail.is_error and "refused: no" in fail.content
    assert picture.content == "a pixel\n[image image/png, 72 bytes: not shown]"
    assert not picture.is_error
    assert document.content == "[resource file:///notes.txt]\nthe notes"
    assert weather.content == '{"city":"Oslo","sky":"clear"}'
    assert bad.is_error and "validation error" in bad.content


def test_tools_are_listed_and_called_on_the_async_path(
    stdio: MCPServerStdio, service: ConversationService
) -> None:
    async def main() -> list[ToolResultBlock]:
        agent = agent_with(stdio, scripted_tool_calls(("add", {"a": 1, "b": 2})), "Done.")
        async with agent:
            reply = await agent.chat(service, user_id="alice").asend("Add.")
        return results(reply)

    assert [(r.content, r.is_error) for r in asyncio.run(main())] == [("3", False)]


def test_a_streamed_turn_lists_and_calls_too_and_reports_the_call_as_events(
    stdio: MCPServerStdio, service: ConversationService
) -> None:
    with agent_with(stdio, scripted_tool_calls(("echo", {"text": "out"})), "Done.") as agent:
        events = list(agent.chat(service, user_id="alice").stream("Echo."))
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert [(e.name, e.content, e.is_error) for e in finished] == [("echo", "out", False)]


@pytest.mark.slow
@pytest.mark.parametrize("path", ["send", "asend"])
def test_a_slow_call_gets_its_timeout_result_and_the_session_goes_on(
    stdio: MCPServerStdio, service: ConversationService, path: str
) -> None:
    agent = agent_with(
        stdio,
        scripted_tool_calls(("slow", {"seconds": 60})),
        "Too slow.",
        scripted_tool_calls(("echo", {"text": "still here"})),
        "Done.",
        tool_timeout_s=1.0,
    )
    chat = agent.chat(service, user_id="alice")
    send = chat.send if path == "send" else lambda text: asyncio.run(chat.asend(text))
    started = time.monotonic()
    (timed_out,) = results(send("Be slow."))
    assert time.monotonic() - started < 30
    assert timed_out.is_error and "timeout of 1s" in timed_out.content
    (echo,) = results(send("Echo."))
    assert (echo.content, echo.is_error) == ("still here", False)
    agent.close()


@pytest.mark.slow
def test_a_server_killed_mid_call_gives_an_error_result_one_log_line_and_restarts(
    stdio: MCPServerStdio, service: ConversationService, tmp_path: Path
) -> None:
    lines: list[str] = []
    logger.enable("parlour")
    sink = logger.add(lambda m: lines.append(str(m)), level="ERROR", format="{message}")
    agent = agent_with(
        stdio,
        scripted_tool_calls(("slow", {"seconds": 60})),
        "It died.",
        scripted_tool_calls(("echo", {"text": "back"})),
        "Done.",
    )
    chat = agent.chat(service, user_id="alice")
    replies: list[Any] = []
    turn = threading.Thread(target=lambda: replies.append(chat.send("Be slow.")))
    turn.start()
    marker = tmp_path / "slow-started"
    eventually(marker.exists, "the slow call's start")
    first_pid = int(marker.read_text())
    os.kill(first_pid, signal.SIGKILL)
    turn.join(timeout=60)
    logger.remove(sink)
    (died,) = results(replies[0])
    assert died.is_error and "stopped during this call to slow" in died.content
    assert [line for line in lines if "ended during a call to slow" in line] == lines
    assert len(lines) == 1
    assert stdio.changed  # listed again, from a new process, at the next turn
    (echo,) = results(chat.send("Echo."))
    assert (echo.content, echo.is_error) == ("back", False)
    assert int((tmp_path / "pid").read_text()) != first_pid
    agent.close()


def test_a_tool_the_server_adds_is_declared_after_its_list_changed_notice(
    stdio: MCPServerStdio, service: ConversationService
) -> None:
    agent = agent_with(
        stdio,
        scripted_tool_calls(("grow", {"name": "double"})),
        "Grown.",
        scripted_tool_calls(("double", {"x": 21})),
        "Done.",
    )
    chat = agent.chat(service, user_id="alice")
    (grown,) = results(chat.send("Grow."))
    assert grown.content == "grown"
    eventually(lambda: stdio.changed, "the server's list-changed notice")
    (doubled,) = results(chat.send("Double."))
    assert (doubled.content, doubled.is_error) == ("42", False)
    assert "double" in agent.tools.tools
    agent.close()


@pytest.mark.slow
def test_a_durable_conversation_with_mcp_tools_survives_a_restart_and_reconnects(
    tmp_path: Path,
) -> None:
    def run(text: str, conversation_id: str | None, a: int) -> str:
        server = MCPServerStdio(sys.executable, [SERVER], env={"MCP_TEST_DIR": str(tmp_path)})
        store = LmdbStore(tmp_path / "db")
        with (
            agent_with(server, scripted_tool_calls(("add", {"a": a, "b": 1})), "Done.") as agent,
            ConversationService(store, cleanup_interval_s=0) as service,
        ):
            chat = agent.chat(service, user_id="alice", conversation_id=conversation_id)
            chat.send(text)
            cid = chat.conversation_id
        store.close()
        return cid

    cid = run("First.", None, 1)
    first_pid = (tmp_path / "pid").read_text()
    assert run("Again, after the restart.", cid, 2) == cid
    assert (tmp_path / "pid").read_text() != first_pid  # a new server process
    store = LmdbStore(tmp_path / "db")
    snapshot = store.load(cid, "alice")
    store.close()
    assert snapshot is not None
    assert [r.content for r in stored_results(snapshot)] == ["2", "3"]


def test_a_streamable_http_server_is_listed_and_called_with_its_headers(
    http_url: str, service: ConversationService
) -> None:
    server = MCPServerHTTP(http_url, headers={"Authorization": f"Bearer {TOKEN}"}, prefix="web_")
    with agent_with(server, scripted_tool_calls(("web_add", {"a": 5, "b": 5})), "Ok.") as agent:
        reply = agent.chat(service, user_id="alice").send("Add.")

        async def again() -> Any:
            chat = agent.chat(service, user_id="bob")
            agent.client = ScriptedClient([scripted_tool_calls(("web_echo", {"text": "a"})), "Ok"])
            return await chat.asend("Echo.")

        areply = asyncio.run(again())
    assert [(r.content, r.is_error) for r in results(reply)] == [("10", False)]
    assert [(r.content, r.is_error) for r in results(areply)] == [("a", False)]


def test_an_http_server_refusing_the_headers_fails_the_turn_with_one_clear_error(
    http_url: str, service: ConversationService
) -> None:
    server = MCPServerHTTP(http_url, headers={"Authorization": "Bearer wrong"})
    with agent_with(server, "Never asked.") as agent:
        chat = agent.chat(service, user_id="alice")
        with pytest.raises(MCPServerError, match=f"MCP server {http_url} could not be started"):
            chat.send("Hello.")
    assert service.store is not None and service.store.load(chat.conversation_id, "alice") is None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--garbage"], r"did not answer within 3s of its start \(it wrote what is no MCP"),
        (["--hang"], "did not answer within 3s of its start"),
        (["--exit"], "ended before it answered"),
    ],
)
def test_a_server_that_writes_garbage_hangs_or_exits_at_start_gives_one_clear_error(
    service: ConversationService, args: list[str], expected: str
) -> None:
    server = MCPServerStdio(sys.executable, [SERVER, *args], start_timeout_s=3)
    with agent_with(server, "Never asked.") as agent:
        chat = agent.chat(service, user_id="alice")
        with pytest.raises(MCPServerError, match=expected):
            chat.send("Hello.")
        assert server.changed  # the next turn tries again
    assert service.store is not None and service.store.load(chat.conversation_id, "alice") is None


def test_a_command_that_is_not_executable_gives_one_clear_error(
    service: ConversationService, tmp_path: Path
) -> None:
    script = tmp_path / "server.txt"
    script.write_text("not a program\n")
    script.chmod(0o644)
    with agent_with(MCPServerStdio(str(script)), "Never asked.") as agent:
        with pytest.raises(MCPServerError, match=r"could not be started: .*Permission denied"):
            agent.chat(service, user_id="alice").send("Hello.")

        async def asend() -> None:
            await agent.chat(service, user_id="alice").asend("Hello.")

        with pytest.raises(MCPServerError, match="could not be started"):
            asyncio.run(asend())


def test_a_server_that_cannot_start_keeps_no_other_servers_tools_from_the_agent(
    service: ConversationService, tmp_path: Path
) -> None:
    good = MCPServerStdio(sys.executable, [SERVER])
    missing = MCPServerStdio(str(tmp_path / "no-such-server"))
    with Agent(ScriptedClient(["Never asked."]), toolsets=[good, missing]) as agent:
        chat = agent.chat(service, user_id="alice")
        with pytest.raises(MCPServerError, match="No such file"):
            asyncio.run(chat.asend("Hello."))
        assert "add" in agent.tools.tools
        assert (good.changed, missing.changed) == (False, True)  # only the failed one again


def test_a_listed_tool_named_as_a_function_tool_fails_each_turn_until_given_a_prefix(
    service: ConversationService,
) -> None:
    def add(a: int, b: int) -> int:
        """Add, locally."""
        return a + b

    clashing = MCPServerStdio(sys.executable, [SERVER])
    with Agent(ScriptedClient(["Never asked."]), tools=[add], toolsets=[clashing]) as agent:
        chat = agent.chat(service, user_id="alice")
        for _ in range(2):  # refused again, not forgotten
            with pytest.raises(ValueError, match="Two tools of the agent are named add"):
                chat.send("Add.")
    prefixed = MCPServerStdio(sys.executable, [SERVER], prefix="remote_")
    script = [scripted_tool_calls(("add", {"a": 1, "b": 1}), ("remote_add", {"a": 2, "b": 2}))]
    with Agent(ScriptedClient([*script, "Ok."]), tools=[add], toolsets=[prefixed]) as agent:
        reply = agent.chat(service, user_id="alice").send("Add both ways.")
    assert [r.content for r in results(reply)] == ["2", "4"]


def test_bad_arguments_are_refused_when_the_server_is_made() -> None:
    with pytest.raises(ValueError, match="needs a command"):
        MCPServerStdio("")
    with pytest.raises(ValueError, match="no http"):
        MCPServerHTTP("ftp://example.com/mcp")
    with pytest.raises(ValueError, match=r"no URL|no http"):
        MCPServerHTTP("http://[::1")
    with pytest.raises(ValueError, match="start_timeout_s"):
        MCPServerStdio("x", start_timeout_s=0)


def test_closing_the_agent_ends_the_servers_process(
    stdio: MCPServerStdio, service: ConversationService, tmp_path: Path
) -> None:
    agent = agent_with(stdio, scripted_tool_calls(("echo", {"text": "x"})), "Ok.")
    agent.chat(service, user_id="alice").send("Echo.")
    pid = int((tmp_path / "pid").read_text())
    os.kill(pid, 0)  # alive
    agent.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert stdio.changed  # a later turn starts it again


def test_stopping_a_service_ends_the_servers_of_the_agents_that_chatted_on_it(
    stdio: MCPServerStdio, tmp_path: Path
) -> None:
    service = ConversationService(cleanup_interval_s=0)
    agent = agent_with(stdio, scripted_tool_calls(("echo", {"text": "x"})), "Ok.")
    agent.chat(service, user_id="alice").send("Echo.")
    agent.chat(service, user_id="bob")  # one registration per service, however many chats
    pid = int((tmp_path / "pid").read_text())
    os.kill(pid, 0)  # alive
    service.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_importing_parlour_actors_imports_no_mcp() -> None:
    code = "import sys, parlour.actors; print(sorted(m for m in sys.modules if 'mcp' in m))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
