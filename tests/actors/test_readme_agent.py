"""The README's first example, the agent, runs as written on the Anthropic client too."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import parlour.runtime
from parlour.runtime import LLMClient
from parlour.runtime.providers import AnthropicClient
from parlour.runtime.testing import (
    MockProvider,
    anthropic_message,
    fake_spec,
    mock_anthropic_sdk,
)

README = Path(__file__).resolve().parents[2] / "README.md"


def first_example() -> str:
    code: str = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    return code


def test_the_readme_opens_with_the_agent() -> None:
    code = first_example()
    assert "Agent(" in code and "agent.chat(service" in code and "chat.asend(" in code


def test_the_readme_agent_runs_on_the_anthropic_client_over_the_mock_transport(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    weather_call = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "get_weather",
        "input": {"city": "Paris"},
    }
    provider = MockProvider(
        anthropic_message(None, content=[weather_call], stop_reason="tool_use"),
        anthropic_message("Sunny and 21 C in Paris."),
        anthropic_message("Sunny again tomorrow."),
        anthropic_message("You are welcome."),
        anthropic_message("Goodbye."),
    )

    def client_for(model: Any, **kwargs: Any) -> LLMClient:
        # a catalog-free spec: the SDK warns about (and the suite errors on) retired model ids
        spec = fake_spec(id="claude-test", provider="anthropic")
        return AnthropicClient(spec, client=mock_anthropic_sdk(provider))

    monkeypatch.setattr(parlour.runtime, "client_for", client_for)
    monkeypatch.chdir(tmp_path)
    exec(compile(first_example(), "<readme>", "exec", dont_inherit=True), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert out.startswith("Sunny and 21 C in Paris.")
    assert "Sunny again tomorrow." in out and out.rstrip().endswith("TurnDone")
    assert len(provider.bodies) == 5
    results = [
        block
        for message in provider.bodies[1]["messages"]
        for block in message["content"]
        if block["type"] == "tool_result"
    ]
    assert results == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": "Sunny and 21 C in Paris.",
            "is_error": False,
        }
    ]
    assert provider.bodies[0]["tools"][0]["name"] == "get_weather"
