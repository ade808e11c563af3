"""``client_for``: the provider's client, or a clear error; the offline model only by name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from parlour.runtime import ConversationContext, ModelSpec, client_for
from parlour.runtime.errors import UncorrectableLLMError
from parlour.runtime.providers import (
    AnthropicClient,
    BedrockClient,
    OpenAIClient,
    OpenAIResponsesClient,
)
from parlour.runtime.testing import ScriptedClient, converse_response

KEYS = (
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
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
    with pytest.raises(ImportError, match=r"pip install -e '\.\[") as caught:
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
    with pytest.raises(ImportError, match=r"pip install -e '\.\[bedrock\]'"):
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


# -- other servers, other wires ------------------------------------------------------------------

LOCAL = ModelSpec.custom("qwen2.5:7b", context_window=32_768)


def test_an_openai_model_on_another_server_needs_no_key() -> None:
    client = client_for(LOCAL, base_url="http://localhost:11434/v1")
    assert type(client) is OpenAIClient and client.base_url == "http://localhost:11434/v1"
    assert client.spec is LOCAL


def test_the_responses_api_is_served_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert type(client_for("gpt-5-mini", api="responses")) is OpenAIResponsesClient
    assert type(client_for("gpt-5-mini")) is OpenAIClient
    keyed = client_for(LOCAL, base_url="http://127.0.0.1:8000/v1", api="responses")
    assert type(keyed) is OpenAIResponsesClient


@pytest.mark.parametrize(
    "url",
    ["localhost:11434/v1", "ftp://models.local/v1", "http://", "http://host:port/v1", "no url"],
)
def test_a_base_url_that_does_not_parse_is_one_clear_error(url: str) -> None:
    with pytest.raises(ValueError, match=r"not an http\(s\) URL with a host") as caught:
        client_for(LOCAL, base_url=url)
    assert repr(url) in str(caught.value)
    with pytest.raises(ValueError, match=re.escape(repr(url))):
        OpenAIClient(LOCAL, base_url=url)


def test_a_base_url_or_api_for_another_provider_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    with pytest.raises(ValueError, match="base_url and api are OpenAI's"):
        client_for("claude-sonnet-4-5", base_url="http://localhost:1/v1")
    with pytest.raises(ValueError, match="base_url and api are OpenAI's"):
        client_for("claude-sonnet-4-5", api="responses")


def test_bedrock_without_a_region_says_to_pass_region_name_or_set_aws_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    with pytest.raises(UncorrectableLLMError, match=r"region_name=.*AWS_REGION") as caught:
        client_for("us.anthropic.claude-haiku-4-5-20251001-v1:0")
    assert type(caught.value.__cause__).__name__ == "NoRegionError"
    assert BedrockClient(region_name="us-east-1").sdk_client.meta.region_name == "us-east-1"


def test_a_bedrock_client_parlour_makes_retries_with_backoff_and_leaves_checking_to_the_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """botocore's client-side check of every parameter costs milliseconds a call on a long
    conversation; the body is built to the Converse shapes and the service refuses the rest."""
    from botocore.stub import Stubber

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    boto = BedrockClient(region_name="us-east-1", max_attempts=5).sdk_client
    assert boto.meta.config.retries == {"mode": "standard", "total_max_attempts": 6}
    with Stubber(boto) as stub:
        stub.add_response("converse", converse_response("fine"))
        odd = [{"role": "user", "content": [{"text": 5}]}]  # a number where text belongs
        assert boto.converse(modelId="m", messages=odd)["output"]["message"]["role"] == "assistant"
