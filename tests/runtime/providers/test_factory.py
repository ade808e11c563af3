"""``client_for``: the provider client when its key is set, else the offline model."""

from __future__ import annotations

import pytest

from parlour.runtime import ConversationContext, client_for
from parlour.runtime.providers import AnthropicClient, BedrockClient, OpenAIClient
from parlour.runtime.testing import ScriptedClient

KEYS = (
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_BEARER_TOKEN_BEDROCK",
)


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)


@pytest.mark.parametrize(
    "model", ["claude-sonnet-4-5", "gpt-5-mini", "us.anthropic.claude-haiku-4-5-20251001-v1:0"]
)
def test_without_a_key_the_scripted_model_stands_in_offline(model: str) -> None:
    client = client_for(model)
    assert isinstance(client, ScriptedClient)
    assert client.model_id == model
    c = ConversationContext("f-1")
    c.add_user_message("hello")
    assert client.respond(c).model_id == model


@pytest.mark.parametrize(
    ("model", "env", "expected"),
    [
        ("claude-sonnet-4-5", "ANTHROPIC_API_KEY", AnthropicClient),
        ("gpt-5-mini", "OPENAI_API_KEY", OpenAIClient),
        ("us.anthropic.claude-haiku-4-5-20251001-v1:0", "AWS_ACCESS_KEY_ID", BedrockClient),
    ],
)
def test_with_a_key_the_providers_client_serves(
    monkeypatch: pytest.MonkeyPatch, model: str, env: str, expected: type
) -> None:
    monkeypatch.setenv(env, "test-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    client = client_for(model)
    assert isinstance(client, expected)
    assert client.model_id == model


def test_an_unknown_model_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not in the catalog"):
        client_for("no-such-model")


def test_importing_the_runtime_loads_no_provider_sdk() -> None:
    # The core install needs no SDK: they are extras, imported when a client is built.
    import subprocess
    import sys

    code = (
        "import sys, parlour.runtime, parlour.runtime.testing;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'anthropic', 'openai', 'boto3', 'botocore', 'httpx2'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_missing_boto3_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(ImportError, match=r"parlour\[bedrock\]"):
        BedrockClient("us.anthropic.claude-haiku-4-5-20251001-v1:0")
