"""``client_for``: the client serving a model, never a silent stand-in.

A real model gets its provider's client, or a clear error saying what to set or install.
The offline ``ScriptedClient`` serves only when asked for by name (``"scripted"``).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Literal

from loguru import logger

from ..errors import UncorrectableLLMError
from ..models._catalog import ModelCatalog
from ..models._spec import ModelSpec
from ._anthropic import AnthropicClient
from ._bedrock import BedrockClient
from ._openai import OpenAIClient
from ._openai_responses import OpenAIResponsesClient
from ._scripted import ScriptedClient
from ._shared import spec_of
from ._template import LLMClient

SCRIPTED = "scripted"  # the offline model's name in the catalog

_CLIENTS: dict[str, type[LLMClient]] = {
    "anthropic": AnthropicClient,
    "openai": OpenAIClient,
    "bedrock": BedrockClient,
}
# What makes each provider usable: the environment variables naming its credentials (any
# one), the SDK's import name and the pip extra that installs it. Bedrock is judged without
# reaching the network: its variables, or a shared credentials or config file.
_NEEDS = {
    "anthropic": (("ANTHROPIC_API_KEY",), "anthropic", "anthropic"),
    "openai": (("OPENAI_API_KEY",), "openai", "openai"),
    "bedrock": (
        (
            "AWS_ACCESS_KEY_ID",
            "AWS_PROFILE",
            "AWS_BEARER_TOKEN_BEDROCK",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        ),
        "boto3",
        "bedrock",
    ),
}


def _has_credentials(provider: str) -> bool:
    env_vars = _NEEDS[provider][0]
    if any(os.environ.get(v) for v in env_vars):
        return True
    if provider != "bedrock":
        return False
    files = (
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
        os.environ.get("AWS_CONFIG_FILE", "~/.aws/config"),
    )
    return any(Path(f).expanduser().is_file() for f in files)


def _has_sdk(provider: str) -> bool:
    return importlib.util.find_spec(_NEEDS[provider][1]) is not None


def provider_available(provider: str) -> bool:
    """True when ``provider``'s credentials are configured and its SDK is installed."""
    return provider in _NEEDS and _has_credentials(provider) and _has_sdk(provider)


def client_for(
    model: str | ModelSpec,
    *,
    catalog: ModelCatalog | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    api: Literal["chat_completions", "responses"] = "chat_completions",
) -> LLMClient:
    """The client serving ``model``: its provider's, or the offline ``ScriptedClient`` when
    ``model`` is ``"scripted"`` (or a spec of the scripted provider). Never a fallback.

    Args:
        model: a catalog id or a ``ModelSpec`` (``ModelSpec.custom`` for one outside it).
        base_url: an OpenAI-compatible server (else ``OPENAI_BASE_URL``); it needs no key.
        api_key: the provider's key, else its environment variable.
        api: OpenAI's wire: Chat Completions (every compatible server speaks it) or the
            Responses API (``OpenAIResponsesClient``).

    Raises:
        ValueError: ``model`` is an id the catalog does not know, or of no known provider;
            ``base_url`` or ``api`` is given for a provider that takes none, or the base
            URL is not an http(s) URL with a host.
        ImportError: the provider's SDK is not installed; the message names the pip extra
            (and the variable to set, when that is missing too).
        UncorrectableLLMError: the provider's credentials are not configured; the message
            names the variable to set.
    """
    spec = spec_of(model, catalog)
    if spec.provider == SCRIPTED:
        logger.info("{} is served by the offline scripted model, as asked.", spec.id)
        return ScriptedClient(spec=spec, model_id=spec.id)
    if spec.provider not in _CLIENTS:
        raise ValueError(f"Model {spec.id} has provider {spec.provider!r}, which has no client.")
    if spec.provider != "openai" and (base_url is not None or api != "chat_completions"):
        raise ValueError(f"Model {spec.id} is {spec.provider}'s: base_url and api are OpenAI's.")
    if spec.provider == "anthropic":
        _require(spec, supplied=api_key is not None)
        return AnthropicClient(spec, api_key=api_key)
    if spec.provider == "bedrock":
        if api_key is not None:
            raise ValueError(f"Model {spec.id} is Bedrock's: it takes AWS credentials, no api_key.")
        _require(spec)
        return BedrockClient(spec)
    if api not in ("chat_completions", "responses"):
        raise ValueError(f"api is 'chat_completions' or 'responses', not {api!r}.")
    elsewhere = bool(base_url or os.environ.get("OPENAI_BASE_URL"))  # another server: no key
    _require(spec, supplied=api_key is not None or elsewhere)
    cls = OpenAIResponsesClient if api == "responses" else OpenAIClient
    return cls(spec, api_key=api_key, base_url=base_url)


def _require(spec: ModelSpec, *, supplied: bool = False) -> None:
    """Raise what is missing: the SDK, then the credentials (unless ``supplied``)."""
    env_vars, _, extra = _NEEDS[spec.provider]
    setting = " or ".join(env_vars[:3]) if spec.provider == "bedrock" else env_vars[0]
    offline = f'; to run offline, ask for "{SCRIPTED}" by name'
    if not _has_sdk(spec.provider):
        also = "" if _has_credentials(spec.provider) else f", and set {setting}"
        raise ImportError(
            f"Model {spec.id} needs the {spec.provider} SDK: pip install -e '.[{extra}]' in "
            "parlour's checkout"
            f"{also}{offline}."
        )
    if not supplied and not _has_credentials(spec.provider):
        raise UncorrectableLLMError(
            f"Model {spec.id} needs {spec.provider} credentials: set {setting}{offline}."
        )
