"""``client_for``: the provider's client, or a clear error; the offline model only by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from parlour.runtime import ConversationContext, client_for
from parlour.runtime.errors import UncorrectableLLMError
from parlour.runtime.providers import AnthropicClient, BedrockClient, OpenAIClient
from parlour.runtime.testing import ScriptedClient

KEYS = (
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
)
MODELS = [
    ("claude-sonnet-4-5", "ANTHROPIC_API_KEY", AnthropicClient, "anthropic"),
    ("gpt-5-mini", "OPENAI_API_KEY", OpenAIClient, "openai"),
    ("us.anthropic.claude-haiku-4-5-20251001-v1:0", "AWS_ACCESS_KEY_ID", BedrockClient, "boto3"),
]


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))


@pytest.mark.parametrize(("model", "env"), [(m, e) for m, e, _, _ in MODELS])
def test_a_real_model_without_its_key_is_an_error_naming_what_to_set(model: str, env: str) -> None:
    with pytest.raises(UncorrectableLLMError, match=env) as caught:
        client_for(model)
    assert model in str(caught.value) and '"scripted"' in str(caught.value)


@pytest.mark.parametrize(("model", "env", "sdk"), [(m, e, s) for m, e, _, s in MODELS])
def test_a_real_model_without_its_sdk_is_an_error_naming_what_to_install(
    monkeypatch: pytest.MonkeyPatch, model: str, env: str, sdk: str
) -> None:
    monkeypatch.setitem(sys.modules, sdk, None)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    with pytest.raises(ImportError, match=r"pip install 'parlour\[") as caught:
        client_for(model)
    assert env in str(caught.value)  # the key is missing too, and said at once


def test_the_scripted_model_serves_only_when_asked_for_by_name() -> None:
    client = client_for("scripted")
    assert isinstance(client, ScriptedClient)
    c = ConversationContext("f-1")
    c.add_user_message("hello")
    assert client.respond(c).model_id == "scripted"


@pytest.mark.parametrize(("model", "env", "expected"), [(m, e, x) for m, e, x, _ in MODELS])
def test_with_a_key_the_providers_client_serves(
    monkeypatch: pytest.MonkeyPatch, model: str, env: str, expected: type
) -> None:
    monkeypatch.setenv(env, "test-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    client = client_for(model)
    assert isinstance(client, expected)
    assert client.model_id == model


def test_a_shared_aws_credentials_file_is_enough_for_bedrock(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text("[default]\naws_access_key_id = a\naws_secret_access_key = b\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert isinstance(client_for("us.anthropic.claude-haiku-4-5-20251001-v1:0"), BedrockClient)


def test_an_unknown_model_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not in the catalog"):
        client_for("no-such-model")


def test_importing_the_runtime_loads_no_provider_sdk() -> None:
    # The core install needs no SDK: they are extras, imported when a client is built.
    code = (
        "import sys, parlour.runtime, parlour.runtime.testing, parlour.runtime.providers.testing;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'anthropic', 'openai', 'boto3', 'botocore', 'httpx2'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_missing_boto3_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(ImportError, match=r"parlour\[bedrock\]"):
        BedrockClient("us.anthropic.claude-haiku-4-5-20251001-v1:0")


@pytest.mark.parametrize(
    ("make", "old"),
    [
        (lambda **kw: AnthropicClient("claude-sonnet-4-5", **kw), "sdk_client"),
        (lambda **kw: OpenAIClient("gpt-5-mini", **kw), "sdk_client"),
        (lambda **kw: BedrockClient(**kw), "boto_client"),
    ],
)
def test_the_old_injection_keywords_still_work_with_a_deprecation_warning(
    make: object, old: str
) -> None:
    injected = object()
    with pytest.warns(DeprecationWarning, match=f"{old}= is deprecated"):
        client = make(**{old: injected})  # type: ignore[operator]
    assert client.sdk_client is injected
    with pytest.raises(TypeError, match="once"):
        make(client=injected, **{old: injected})  # type: ignore[operator]
