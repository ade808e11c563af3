"""``--model``, ``--base-url`` and ``--context-window`` as a person uses them: ``parlour chat``
and ``parlour demo`` against a local OpenAI-compatible server on loopback, with no key set,
and a one-line refusal for each bad choice."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.actors.test_compatible_server import Compatible
from tests.actors.test_compatible_server import local_server as _local_server

from .cli import environment, parlour, refused

server = _local_server  # the loopback server fixture, shared under a name of this module


def test_chat_runs_a_model_outside_the_catalog_on_a_local_server_with_no_key(
    server: tuple[str, Compatible], tmp_path: Path
) -> None:
    url, fake = server
    done = parlour(
        tmp_path,
        "chat",
        "--data-dir",
        "data",
        "--base-url",
        url,
        "--model",
        "llama3.1:8b",
        "--context-window",
        "8192",
        stdin="Hello?\n",
    )
    assert done.returncode == 0, done.stderr
    assert "agent> The order:" in done.stdout  # the server's answer, streamed
    (path, key, body) = fake.requests[-1]
    assert path == "/v1/chat/completions" and body["model"] == "llama3.1:8b"
    assert key == "Bearer no-key"  # no key was set: the placeholder the SDK needs
    assert body["max_completion_tokens"] <= 8192 // 4  # budgets from the window given


def test_demo_runs_on_a_local_server(server: tuple[str, Compatible], tmp_path: Path) -> None:
    url, fake = server
    done = parlour(
        tmp_path,
        "demo",
        "--data-dir",
        "data",
        "--conversations",
        "2",
        "--workers",
        "1",
        "--base-url",
        url,
        "--model",
        "llama3.1:8b",
    )
    assert done.returncode == 0, done.stderr
    assert "answered by llama3.1:8b" in done.stdout
    assert fake.requests and all(b["model"] == "llama3.1:8b" for _, _, b in fake.requests)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--base-url", "http://127.0.0.1:9/v1"], "--base-url needs --model"),
        (["--base-url", "not a url", "--model", "m"], "base_url 'not a url'"),
        (["--context-window", "8192"], "--context-window declares a model served at"),
        (["--model", "claude-sonnet-4-5", "--base-url", "http://127.0.0.1:9/v1"], "OpenAI's"),
        (["--model", "no-such-model"], "not in the catalog"),
    ],
)
def test_a_bad_model_choice_is_one_line_and_creates_no_store(
    tmp_path: Path, argv: list[str], says: str
) -> None:
    done = parlour(tmp_path, "chat", "--data-dir", "data", *argv, env=environment())
    assert says in refused(done)
    assert not (tmp_path / "data").exists()


def test_the_long_demo_refuses_a_model_it_does_not_run(tmp_path: Path) -> None:
    done = parlour(tmp_path, "demo", "--long", "--model", "gpt-5-mini", "--data-dir", "data")
    assert "demo --long runs on the offline model" in refused(done)
    assert not (tmp_path / "data").exists()
