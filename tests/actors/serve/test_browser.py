"""The inspector page in a real headless Chromium (the distribution's), against the app on
uvicorn on a loopback port: sign in with the printed URL, chat, watch the answer stream in,
and follow the running turn from a second page."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from parlour.actors import ConversationService, asgi_app
from parlour.stores import LmdbStore

from .devtools import CHROMIUM, Browser, Page
from .serve_helpers import HOLD, TOKENS, Gate, LiveServer, Orders

IN_CI = os.environ.get("CI") == "true"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists() and not IN_CI,
        reason="no /usr/bin/chromium (install Debian's chromium; under CI=true this test runs)",
    ),
]
DOCS_SHOT = os.environ.get("PARLOUR_DOCS_SCREENSHOT")  # set to refresh the docs' image


# whether an element is on screen: laid out (a box), not display:none, not invisible
VISIBLE = (
    "(e => { const s = getComputedStyle(e), r = e.getBoundingClientRect();"
    " return s.display !== 'none' && s.visibility !== 'hidden' && r.width > 0 && r.height > 0;"
    " })(document.getElementById({id!r}))"
)
# every request the page makes, recorded
SPY = (
    "window.sent = []; const f = window.fetch;"
    " window.fetch = (url, o) => { window.sent.push(String(url)); return f(url, o); }; true"
)


def visible(page: Page, element_id: str) -> bool:
    return bool(page.js(VISIBLE.replace("{id!r}", repr(element_id))))


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
    assert visible(first, "app") and not visible(first, "signin")
    assert not visible(first, "chat")  # no conversation is open: nowhere to type
    assert first.text_of("who") == "alice"
    assert first.js("location.hash") == ""  # the token left the address bar
    assert "alice-token" not in first.js("document.cookie")  # the cookie is HttpOnly

    first.js("document.getElementById('new').click()")
    first.wait("!document.getElementById('chat').hidden")  # watching: no turn is missed
    assert visible(first, "chat")
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
        "for (const id of ['versions-box', 'usage-box', 'prompt-box'])"
        " document.getElementById(id).open = true;"
        " document.querySelectorAll('#messages details.tool').forEach(d => d.open = true)"
    )
    first.wait("document.querySelectorAll('#versions button').length >= 4")
    steps = first.text_of("versions")
    for step in ("user message", "model answered", "model called hold_on", "tool result"):
        assert step in steps  # each version names the step that made it
    first.js("document.querySelector('#versions button').click()")  # the oldest version
    first.wait("document.getElementById('diff').innerText.includes('+ ')")
    assert "Hello there" in first.text_of("diff")  # what every later save added
    usage = first.text_of("usage")
    assert usage.count("model call") == 3 and "total" in usage  # one row a call, and a sum
    assert "Answer briefly." in first.text_of("system")  # the system text the model saw
    assert "hold_on: Wait until the operator says go." in first.text_of("tools")
    folded = first.text_of("messages")
    assert "arguments: {}" in folded and "result: go" in folded  # the call and its result
    assert visible(first, "prompt-box") and visible(first, "usage-box")
    assert not visible(first, "interrupted")
    tokens = first.text_of("tokens")
    assert "/ 200000 tokens" in tokens
    shot = first.screenshot(tmp_path / "3-answered.png", whole=True)
    if DOCS_SHOT:
        shutil.copy(shot, DOCS_SHOT)
    snapshot = store.load(cid, "alice")
    assert snapshot is not None and snapshot.messages[-1].role == "assistant"


def test_signed_out_only_the_sign_in_form_shows(live: LiveServer, browser: Browser) -> None:
    page = browser.page(f"{live.url}/#token=forged")
    page.wait("!document.getElementById('signin').hidden")
    assert visible(page, "signin")
    for hidden in ("app", "chat", "list", "new", "messages"):
        assert not visible(page, hidden), hidden  # the app renders nothing under the form
    page.js("document.getElementById('token').value = 'alice-token'")
    page.js("document.getElementById('signin-form').requestSubmit()")
    page.wait("!document.getElementById('app').hidden")
    assert visible(page, "app") and not visible(page, "signin")


def test_with_no_conversation_open_nothing_can_be_sent_anywhere(
    live: LiveServer, browser: Browser, store: LmdbStore
) -> None:
    page = browser.page(f"{live.url}/#token=alice-token")
    page.wait("!document.getElementById('app').hidden")
    page.js(SPY)
    page.js("document.getElementById('text').value = 'lost words'")
    page.js("document.getElementById('chat').requestSubmit()")
    page.js("new Promise(r => setTimeout(r, 300))")  # room for a request that must not come
    assert not visible(page, "chat")
    assert page.js("window.sent") == []
    assert store.list_conversations("alice") == []


def test_the_list_searches_shows_dates_exports_and_deletes(
    live: LiveServer, browser: Browser, store: LmdbStore
) -> None:
    with live.client() as http:
        for text in ("Plan the garden", "Fix the bike"):
            assert http.post("/api/conversations", json={"text": text}).status_code == 201
    page = browser.page(f"{live.url}/#token=alice-token")
    page.wait("document.querySelectorAll('#list li').length === 2")
    assert page.wait(
        "[...document.querySelectorAll('#list .when')].every(e => /\\d/.test(e.innerText))"
    )
    rows = page.js("document.querySelectorAll('#list li .export:not([hidden])').length")
    assert rows == 2 and page.js("document.querySelectorAll('#list li .delete').length") == 2
    page.js("document.getElementById('search').value = 'GARDEN'")
    page.js("document.getElementById('search').dispatchEvent(new Event('input'))")
    page.wait("document.querySelectorAll('#list li').length === 1")
    assert "Plan the garden" in page.text_of("list")
    href = page.js("document.querySelector('#list .export').href")
    exported = page.js(f"fetch({href!r}).then(r => r.json())")
    assert exported["title"] == "Plan the garden"
    [garden] = [s for s in store.list_conversations("alice") if s.title == "Plan the garden"]
    page.js("document.querySelector('#list .delete').click()")  # asks once more
    assert page.text_of("list").count("sure?") == 1 and store.exists(
        garden.conversation_id, "alice"
    )
    page.js("document.querySelector('#list .delete').click()")
    page.wait("document.querySelectorAll('#list li').length === 0")
    assert not store.exists(garden.conversation_id, "alice")
    assert [s.title for s in store.list_conversations("alice")] == ["Fix the bike"]


def test_an_interrupted_turn_shows_as_interrupted(
    live: LiveServer, gate: Gate, browser: Browser, store: LmdbStore
) -> None:
    page = browser.page(f"{live.url}/#token=alice-token")
    page.wait("!document.getElementById('app').hidden")
    page.js("document.getElementById('new').click()")
    page.wait("!document.getElementById('chat').hidden")
    page.js(f"document.getElementById('text').value = {HOLD!r}")
    page.js("document.getElementById('chat').requestSubmit()")
    page.wait("!document.getElementById('cancel').hidden")
    assert gate.entered.wait(15)
    # the page's own cancel, and the server's answer to it before the tool returns (else a
    # turn that goes on quickly may end before the cancel lands)
    page.js(
        "window.cancelTaken = false; document.getElementById('cancel').onclick()"
        ".then(() => { window.cancelTaken = true; }); true"
    )
    page.wait("window.cancelTaken")
    gate.opened.set()  # the tool returns; the turn is cancelled at its next boundary
    page.wait("document.getElementById('status').innerText === 'idle'")
    page.wait("!document.getElementById('interrupted').hidden")
    assert visible(page, "interrupted") and "stopped before" in page.text_of("interrupted")


@pytest.fixture
def orders_live(service: ConversationService) -> Iterator[tuple[LiveServer, Orders]]:
    """The app on uvicorn over an agent whose deletions wait for a person's approval."""
    orders = Orders()
    server = LiveServer(asgi_app(orders.agent(), service, tokens=TOKENS))
    yield server, orders
    if server.thread.is_alive():
        server.terminate()


def test_the_page_approves_one_call_and_denies_another_and_the_turn_goes_on(
    orders_live: tuple[LiveServer, Orders], browser: Browser, tmp_path: Path
) -> None:
    live, orders = orders_live
    page = browser.page(f"{live.url}/#token=alice-token")
    page.wait("!document.getElementById('app').hidden")
    assert not visible(page, "approvals")  # nothing waits: the panel is not shown
    page.js("document.getElementById('new').click()")
    page.wait("!document.getElementById('chat').hidden")
    page.js("document.getElementById('text').value = 'Delete orders 1 and 2.'")
    page.js("document.getElementById('chat').requestSubmit()")
    page.wait("document.querySelectorAll('#approvals .approval').length === 2")
    assert visible(page, "approvals")
    asked = page.text_of("approvals")
    assert 'delete_order({"order_id": "1"})' in asked and '{"order_id": "2"}' in asked
    assert orders.deleted == []  # parked: nothing ran
    page.screenshot(tmp_path / "4-approvals.png")

    page.js("document.querySelector('#approvals .approval .approve').click()")
    page.wait("document.querySelectorAll('#approvals .approval').length === 1")
    left = page.text_of("approvals")
    assert '{"order_id": "2"}' in left and '{"order_id": "1"}' not in left
    assert visible(page, "approvals") and orders.deleted == []  # one still waits: no run

    page.js("document.querySelector('#approvals .reason').value = 'keep order 2'")
    page.js("document.querySelector('#approvals .approval .deny').click()")
    page.wait("document.getElementById('messages').innerText.includes('Both handled.')")
    page.wait("document.getElementById('live').hidden")
    # nothing waits any more: the panel hides once the newest answer is drawn (a turn's end
    # and a decision's redraw ask at once; an older answer arriving last is never drawn)
    page.wait("document.getElementById('approvals').hidden")
    page.wait("document.getElementById('status').innerText === 'idle'")
    page.js("document.querySelectorAll('#messages details.tool').forEach(d => d.open = true)")
    shown = page.text_of("messages")
    assert "result: order 1 deleted" in shown
    assert "A person denied this call to delete_order: keep order 2" in shown
    assert page.text_of("status") == "idle" and orders.deleted == ["1"]
    page.screenshot(tmp_path / "5-decided.png")
