"""``parlour serve`` as a process: the first run makes a token and prints the URL, the API
answers on it, SIGTERM exits cleanly, and a restart finds the conversation."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2

from .serve_helpers import parse_sse


@contextmanager
def serving(data_dir: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``parlour serve`` on a free loopback port; yields the process and its banner."""
    command = [sys.executable, "-m", "parlour.actors.app._cli", "serve", "--port", "0"]
    with subprocess.Popen(
        [*command, "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            banner = process.stdout.readline() + process.stdout.readline()
            yield process, banner
        finally:
            if process.poll() is None:
                process.kill()


def test_first_run_prints_a_token_url_and_a_restart_keeps_the_token_and_the_chat(
    tmp_path: Path,
) -> None:
    with serving(tmp_path) as (process, banner):
        found = re.search(r"open (http://127\.0\.0\.1:\d+/)#token=(\S+)", banner)
        assert found, banner
        url, token = found.groups()
        headers = {"authorization": f"Bearer {token}"}
        with httpx2.Client(base_url=url, headers=headers, timeout=20) as client:
            assert client.get("healthz").json()["status"] == "ok"
            assert client.get("api/me").json()["user_id"] == "me"
            cid = client.post("api/conversations").json()["conversation_id"]
            said = client.post(
                f"api/conversations/{cid}/messages", json={"text": "What is get_current_time?"}
            )
            kinds = [e["type"] for e in parse_sse(said.text)]
            assert "tool_result" in kinds and kinds[-1] == "done"
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        assert process.stderr is not None
        log = process.stderr.read()
        assert "Traceback" not in log and f"POST /api/conversations/{cid}/messages 200" in log
        assert "The garbage collector's thresholds: (50000, 10, 10)" in log  # a host's
    assert (tmp_path / "tokens.json").stat().st_mode & 0o077 == 0  # readable by its owner only
    assert token not in (tmp_path / "tokens.json").read_text()

    with serving(tmp_path) as (process, banner):
        assert "#token=" not in banner  # the token of the first run still holds
        url = re.search(r"open (http://127\.0\.0\.1:\d+/)", banner).group(1)  # type: ignore[union-attr]
        with httpx2.Client(base_url=url, headers=headers, timeout=20) as client:
            listed = client.get("api/conversations").json()["conversations"]
            assert [c["conversation_id"] for c in listed] == [cid]
            view = client.get(f"api/conversations/{cid}").json()
            assert view["messages"][0]["role"] == "user"
            assert view["messages"][-1]["role"] == "assistant"
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0


def test_an_unknown_model_is_refused_before_serving(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "parlour.actors.app._cli", "serve", "--model", "no-such-model"]
    done = subprocess.run(
        [*command, "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "no-such-model" in done.stderr
    assert not (tmp_path / "tokens.json").exists()
