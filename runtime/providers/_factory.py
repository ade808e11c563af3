"""``client_for``: the provider client when its key is set, else the offline model."""

from __future__ import annotations

import importlib.util
import os

from loguru import logger

from parlour.runtime._catalog import ModelCatalog, ModelSpec
from parlour.runtime._llm import LLMClient
from parlour.runtime._scripted import ScriptedClient
from parlour.runtime.providers._anthropic import AnthropicClient
from parlour.runtime.providers._bedrock import BedrockClient
from parlour.runtime.providers._openai import OpenAIClient
from parlour.runtime.providers._shared import spec_of

# The environment that makes each provider usable, and the SDK it needs. Bedrock is judged
# by environment variables only: probing boto3's credential chain could reach the network.
_KEYS = {
    "anthropic": (("ANTHROPIC_API_KEY",), "anthropic"),
    "openai": (("OPENAI_API_KEY",), "openai"),
    "bedrock": (("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_BEARER_TOKEN_BEDROCK"), "boto3"),
}


def provider_available(provider: str) -> bool:
    """True when ``provider``'s key is set and its SDK is installed."""
    if provider not in _KEYS:
        return False
    env_vars, sdk = _KEYS[provider]
    has_key = any(os.environ.get(v) for v in env_vars)
    return has_key and importlib.util.find_spec(sdk) is not None


def client_for(model: str | ModelSpec, *, catalog: ModelCatalog | None = None) -> LLMClient:
    """The client serving ``model``: its provider's when the key is set and the SDK is
    installed, otherwise a ``ScriptedClient`` standing in for the same spec (no network,
    no key needed).

    Raises:
        ValueError: ``model`` is an id the catalog does not know.
    """
    spec = spec_of(model, catalog)
    if provider_available(spec.provider):
        if spec.provider == "anthropic":
            return AnthropicClient(spec)
        if spec.provider == "openai":
            return OpenAIClient(spec)
        return BedrockClient(spec)
    logger.info(
        "No {} key set; {} is served by the offline scripted model.", spec.provider, spec.id
    )
    return ScriptedClient(spec=spec, model_id=spec.id)
