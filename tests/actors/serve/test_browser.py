"""The inspector page in a real headless Chromium (the distribution's), against the app on
uvicorn on a loopback port: sign in with the printed URL, chat, watch the answer stream in,
and follow the running turn from a second page."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from parlour.stores import LmdbStore

from .devtools import CHROMIUM, Browser
from .serve_helpers import HOLD, Gate, LiveServer

IN_CI = os.environ.get("CI") == "true"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists() and not IN_CI,
        reason="no /usr/bin/chromium (install Debian's chromium; under CI=true this test runs)",
    ),
]
DOCS_SHOT = os.environ.get("PARLOUR_DOCS_SCREENSHOT")  # set to refresh the docs' image


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    b = Browser(tmp_path / "profile")
    yield b
    b.close()


def test_the_inspector_chats_streams_and_a_second_page_follows_the_running_turn(
    live: LiveServer, gate: Gate, browser: Browser, store: LmdbStore, tmp_path: Path
) -> None:
    first = browser.page(f"{live.url}/#token=alice-token")
    first.wait("!document.getElementById('app').hidden")
    assert first.text_of("who") == "alice"
    assert first.js("location.hash") == ""  # the token left the address bar
    assert "alice-token" not in first.js("document.cookie")  # the cookie is HttpOnly

    first.js("document.getElementById('new').click()")
    first.wait("!document.getElementById('chat').hidden")  # watching: no turn is missed
    cid = first.js("new URLSearchParams(location.search).get('c')")
    first.js("document.getElementById('text').value = 'Hello there'")
    first.js("document.getElementById('chat').requestSubmit()")
    first.wait("document.getElementById('messages').innerText.includes(\"you said 'Hello there'\")")
    assert first.wait("document.getElementById('list').innerText.includes('Hello there')")

    first.js(f"document.getElementById('text').value = {HOLD!r}")
    first.js("document.getElementById('chat').requestSubmit()")
    first.wait("document.getElementById('live').innerText.includes('Calling hold_on.')")
    assert not gate.opened.is_set()  # streamed while the turn is held at its tool
    assert first.text_of("status") == "turn running"
    first.screenshot(tmp_path / "1-streaming.png")

    second = browser.page(f"{live.url}/?c={cid}")  # same browser: the cookie signs it in
    second.wait("document.getElementById('live').innerText.includes('hold_on({})')")
    assert second.text_of("status") == "turn running"
    assert "Hello there" in second.text_of("messages")
    second.screenshot(tmp_path / "2-second-page-joined.png")

    gate.opened.set()
    for page in (first, second):
        page.wait("document.getElementById('messages').innerText.includes('returned go')")
        page.wait("document.getElementById('live').hidden")
        assert page.text_of("status") == "idle"
    first.js(
        "for (const id of ['versions-box', 'usage-box']) document.getElementById(id).open = true"
    )
    first.wait("document.querySelectorAll('#versions button').length >= 2")
    first.js("document.querySelector('#versions button').click()")  # the oldest version
    first.wait("document.getElementById('diff').innerText.includes('+ ')")
    assert "Hello there" in first.text_of("diff")  # what every later save added
    assert "model_call" in first.text_of("usage")
    tokens = first.text_of("tokens")
    assert "/ 200000 tokens" in tokens
    shot = first.screenshot(tmp_path / "3-answered.png")
    if DOCS_SHOT:
        shutil.copy(shot, DOCS_SHOT)
    snapshot = store.load(cid, "alice")
    assert snapshot is not None and snapshot.messages[-1].role == "assistant"
