"""Tokens: the file keeps digests only, the environment variable parses, lookups never
confuse users, and an app mounted inside another application keeps the token rules."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from parlour.actors import ConversationService, TokenBook, asgi_app
from parlour.actors.app._serve import tokens_for

from .serve_helpers import ALICE, Gate, make_agent

names = st.text(st.characters(blacklist_characters=",:", blacklist_categories=["Cs"]), min_size=1)
tokens = st.text(
    st.characters(blacklist_characters=",: ", blacklist_categories=["Cs", "Zs", "Cc"]), min_size=1
)


@given(st.dictionaries(tokens, names.map(str.strip).filter(bool), max_size=8))
def test_the_environment_variable_maps_each_token_to_its_user_and_nothing_else(
    pairs: dict[str, str],
) -> None:
    book = TokenBook.from_env(",".join(f"{t}:{u}" for t, u in pairs.items()))
    for token, user in pairs.items():
        assert book.user_for(token) == user.strip()
        assert book.user_for(token + "x") != user.strip() or token + "x" in pairs
    assert book.user_for("") is None and book.user_for(None) is None


def test_a_malformed_environment_entry_is_refused_without_echoing_the_token() -> None:
    with pytest.raises(ValueError, match="token:user") as refused:
        TokenBook.from_env("secret-token-without-user")
    assert "secret-token-without-user" not in str(refused.value)


def test_the_file_keeps_digests_readable_by_its_owner_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    book, made = tokens_for(path, "me", new_token=False)
    assert made is not None and book.user_for(made) == "me"
    assert made not in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again, none = tokens_for(path, "me", new_token=False)
    assert none is None and again.user_for(made) == "me"
    more, second = tokens_for(path, "bob", new_token=True)
    assert second is not None and more.user_for(second) == "bob" and more.user_for(made) == "me"


def test_a_damaged_token_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a parlour token file"):
        TokenBook.load(path)


def test_empty_tokens_and_users_are_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        TokenBook({"": "alice"})
    with pytest.raises(ValueError, match="non-empty"):
        TokenBook({"t": ""})


def test_the_app_mounts_inside_another_application(
    gate: Gate, service: ConversationService
) -> None:
    inner = asgi_app(make_agent(gate), service, tokens={"alice-token": "alice"})
    outer = Starlette(routes=[Mount("/chat", app=inner)])
    with TestClient(outer) as client:
        assert client.get("/chat/api/me").status_code == 401
        assert client.get("/chat/api/me", headers=ALICE).json()["user_id"] == "alice"
        assert client.get("/chat/healthz").json()["status"] == "ok"
        page = client.get("/chat/")
        assert 'src="static/app.js"' in page.text  # relative: it loads under the prefix
        assert client.get("/chat/static/app.js").status_code == 200


def test_a_service_without_a_persistent_store_is_refused(gate: Gate) -> None:
    memory_only = ConversationService()
    try:
        with pytest.raises(ValueError, match="persistent store"):
            asgi_app(make_agent(gate), memory_only, tokens={"t": "u"})
    finally:
        memory_only.stop()
