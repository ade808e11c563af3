"""The serve documentation's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pykka
import pytest

DOC = Path(__file__).resolve().parents[3] / "actors" / "app" / "serve" / "PACKAGE.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


@pytest.mark.parametrize("code", EXAMPLES)
def test_the_serve_example_builds_an_app_that_answers(
    code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from starlette.testclient import TestClient

    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {"__name__": "example"}
    exec(compile(code, "<serve example>", "exec", dont_inherit=True), scope)
    with TestClient(scope["app"]) as client:  # type: ignore[arg-type]
        headers = {"authorization": "Bearer s3cret-token"}
        assert client.get("/chat/api/me", headers=headers).json()["user_id"] == "alice"
    scope["service"].stop()  # type: ignore[attr-defined]
    pykka.ActorRegistry.stop_all()
