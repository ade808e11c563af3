"""``parlour chat``, ``demo``, ``serve --agent`` and the store commands' output, run as a
person runs them: refusals at start, Ctrl-C at a known point of a real child, what a
resumed chat, ``show`` and ``list`` print."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from parlour.stores import LmdbStore

from .cli import PARLOUR, environment, parlour, read_until, refused


@pytest.fixture(scope="module")
def chatted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A directory whose store holds one chat of ``ann``'s with a tool call, and its id."""
    where = tmp_path_factory.mktemp("chatted")
    said = "Hello there\nWhat is get_current_time?\n\n"
    done = parlour(where, "chat", "--user", "ann", "--data-dir", "data", stdin=said)
    assert done.returncode == 0, done.stderr
    return where, done.stdout.split()[1]


@pytest.mark.parametrize(
    ("user", "data", "says"),
    [
        ("ann", "data", "User ann has no conversation no-such-id in data"),
        ("bob", "data", "User bob does not own conversation {cid}"),
        ("ann", "mistyped", "There is no parlour store at mistyped"),
    ],
)
def test_chat_resume_refuses_an_unknown_a_foreign_id_or_a_mistyped_dir_at_start(
    chatted: tuple[Path, str], user: str, data: str, says: str
) -> None:
    where, cid = chatted
    resume = "no-such-id" if "no-such-id" in says else cid
    done = parlour(where, "chat", "--user", user, "--resume", resume, "--data-dir", data)
    assert says.format(cid=cid) in refused(done)
    assert done.stdout == ""  # no prompt: refused before the chat starts
    assert not (where / "mistyped").exists()


def test_chat_resume_shows_the_last_turns_and_an_empty_line_ends_it(
    chatted: tuple[Path, str],
) -> None:
    where, cid = chatted
    done = parlour(
        where, "chat", "--user", "ann", "--resume", cid, "--data-dir", "data", stdin="\n"
    )
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"conversation {cid}") and "an empty line ends the chat" in lines[0]
    assert lines[1:5] == [
        "you> Hello there",
        "agent> Answer 1: you said 'Hello there'.",
        "you> What is get_current_time?",
        "agent> Calling get_current_time.",
    ]
    assert lines[5] == "  [get_current_time({})]" and lines[6].startswith("  [-> 20")


def test_chat_help_says_an_empty_line_ends_the_chat(tmp_path: Path) -> None:
    done = parlour(tmp_path, "chat", "--help")
    assert done.returncode == 0 and "An empty line" in " ".join(done.stdout.split())


def test_ctrl_c_at_the_chat_prompt_exits_130_in_one_line_and_keeps_the_turns(
    tmp_path: Path,
) -> None:
    child = subprocess.Popen(
        [*PARLOUR, "chat", "--user", "ann", "--data-dir", "data"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )
    assert child.stdin is not None and child.stdout is not None
    read_until(child.stdout, "you> ")
    child.stdin.write("Remember this\n")
    child.stdin.flush()
    read_until(child.stdout, "you> ")  # the turn is done and saved
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    done = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    assert refused(done, status=130) == "parlour chat: interrupted"
    with LmdbStore(tmp_path / "data", readonly=True) as store:
        [summary] = store.list_conversations("ann")
        stored = store.load(summary.conversation_id, "ann")
    assert stored is not None and len(stored.messages) == 2


def test_ctrl_c_in_the_demos_second_phase_stops_it_in_one_line_on_an_intact_store(
    tmp_path: Path,
) -> None:
    child = subprocess.Popen(
        [*PARLOUR, "demo", "--conversations", "400", "--data-dir", "data"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )
    assert child.stdout is not None
    read_until(child.stdout, "runtime stopped\n")  # phase 1 done; phase 2 starting
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    done = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    line = refused(done, status=130)
    assert line == "parlour demo: interrupted; every finished turn is saved"
    assert "phase 2" not in out  # it stopped inside the phase
    fsck = parlour(tmp_path, "fsck", "--data-dir", "data")
    assert fsck.returncode == 0 and fsck.stderr == ""  # every record decodes, none cut short
    with LmdbStore(tmp_path / "data") as store:  # the writer lock was released
        assert sum(len(store.list_conversations(f"user-{i}")) for i in range(4)) == 400


def test_show_prints_each_tool_call_with_its_arguments_and_each_result(
    chatted: tuple[Path, str],
) -> None:
    where, cid = chatted
    done = parlour(where, "show", "ann", cid, "--data-dir", "data")
    assert done.returncode == 0
    assert "-> get_current_time({})" in done.stdout and "<- 20" in done.stdout
    assert "ToolUseBlock" not in done.stdout and "ToolResultBlock" not in done.stdout


def test_list_is_tab_separated_when_piped_and_json_on_request(
    chatted: tuple[Path, str],
) -> None:
    where, cid = chatted
    piped = parlour(where, "list", "ann", "--data-dir", "data")
    [row] = piped.stdout.splitlines()
    found, updated, created, title = row.split("\t")
    assert (found, title) == (cid, "Hello there") and updated >= created
    as_json = parlour(where, "list", "ann", "--json", "--data-dir", "data")
    [entry] = json.loads(as_json.stdout)
    assert entry["conversation_id"] == cid and entry["title"] == "Hello there"
    assert set(entry) == {"conversation_id", "title", "updated_at", "created_at"}


def test_list_of_a_user_with_none_exits_0_saying_so(chatted: tuple[Path, str]) -> None:
    where, _ = chatted
    done = parlour(where, "list", "nobody", "--data-dir", "data")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == "User nobody has no conversations in data.\n"
    as_json = parlour(where, "list", "nobody", "--json", "--data-dir", "data")
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == []


def test_show_of_a_version_not_kept_says_how_to_list_the_kept_ones(
    chatted: tuple[Path, str],
) -> None:
    where, cid = chatted
    line = refused(parlour(where, "show", "ann", cid, "--version", "99", "--data-dir", "data"))
    assert line == (
        f"parlour show: Conversation {cid} keeps no version 99: parlour history ann {cid} "
        "lists the kept ones."
    )


AGENT_MODULE = """
from parlour.actors import Agent
from parlour.runtime import Depth, OutputSize, ScriptedClient


def make() -> Agent:
    client = ScriptedClient(model_id="my-own-agent")
    return Agent(client, output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)


def broken() -> Agent:
    raise RuntimeError("no config file")
"""


def test_serve_agent_serves_the_applications_agent_without_a_cluster(tmp_path: Path) -> None:
    (tmp_path / "my_agents.py").write_text(AGENT_MODULE)
    child = subprocess.Popen(
        [*PARLOUR, "serve", "--agent", "my_agents:make", "--port", "0", "--data-dir", "data"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(PYTHONPATH=str(tmp_path)),
    )
    assert child.stdout is not None
    try:
        banner = read_until(child.stdout, "(the token is shown once; keep the URL)\n")
        url, token = banner.split("open ")[1].split()[0].split("#token=")
        asked = urllib.request.Request(f"{url}api/me", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(asked, timeout=30) as answer:  # serving: signals handled
            me = json.loads(answer.read())
    finally:
        child.send_signal(signal.SIGTERM)
        child.communicate(timeout=60)
    assert banner.startswith("parlour serve: my-own-agent, conversations in data")
    assert "my-own-agent" in json.dumps(me)  # the model the page shows is the agent's
    assert child.returncode == 0


@pytest.mark.parametrize(
    ("factory", "says"),
    [
        ("no_such_module:make", "--agent no_such_module:make: cannot import it"),
        ("my_agents:missing", "names nothing callable"),
        ("my_agents", "is named 'package.module:function'"),
        ("my_agents:broken", "--agent my_agents:broken failed: RuntimeError: no config file"),
    ],
)
def test_serve_agent_that_cannot_be_loaded_is_refused_in_one_line(
    tmp_path: Path, factory: str, says: str
) -> None:
    (tmp_path / "my_agents.py").write_text(AGENT_MODULE)
    env = environment(PYTHONPATH=str(tmp_path))
    done = parlour(tmp_path, "serve", "--agent", factory, "--data-dir", "data", env=env)
    assert says in refused(done)
    assert not (tmp_path / "data").exists()


def _read_pty(fd: int, marker: bytes, seen: bytearray) -> None:
    """Read the terminal's output into ``seen`` until it holds ``marker`` once more."""
    wanted = seen.count(marker) + 1
    while seen.count(marker) < wanted:
        ready, _, _ = select.select([fd], [], [], 60)  # a bound on a wait, not a sync
        assert ready, f"no {marker!r} in a minute: {bytes(seen[-500:])!r}"
        chunk = os.read(fd, 1024)
        assert chunk, f"the chat ended before {marker!r}: {bytes(seen[-500:])!r}"
        seen += chunk


def test_chat_on_a_terminal_recalls_the_last_line_with_the_up_arrow(tmp_path: Path) -> None:
    main, terminal = pty.openpty()
    child = subprocess.Popen(
        [*PARLOUR, "chat", "--user", "ann", "--data-dir", "data"],
        cwd=tmp_path,
        stdin=terminal,
        stdout=terminal,
        stderr=subprocess.PIPE,
        env=environment(TERM="xterm"),
    )
    os.close(terminal)
    seen = bytearray()
    try:
        _read_pty(main, b"you> ", seen)
        os.write(main, b"Remember the tea\r")
        _read_pty(main, b"you> ", seen)
        os.write(main, b"\x1b[A\r")  # the up arrow: readline brings the last line back
        _read_pty(main, b"you> ", seen)
        os.write(main, b"\r")  # an empty line ends the chat
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0 and err == b""
    finally:
        os.close(main)
        if child.poll() is None:
            child.kill()
    with LmdbStore(tmp_path / "data", readonly=True) as store:
        [summary] = store.list_conversations("ann")
        stored = store.load(summary.conversation_id, "ann")
    assert stored is not None
    said = [m.blocks[0] for m in stored.messages if m.role == "user"]
    assert [getattr(b, "text", None) for b in said] == ["Remember the tea", "Remember the tea"]
    assert b"\x1b[A" not in seen and b"^[[A" not in seen  # no escape codes echoed
