"""parlour.runtime.providers: one client per provider dialect over the shared template.

Each module owns its dialect (request builder, decoder, error mapping at the seam); the
SDKs are optional extras imported only when a client is constructed.
"""

from parlour.runtime.providers._anthropic import AnthropicClient, build_anthropic_params
from parlour.runtime.providers._bedrock import (
    BedrockClient,
    build_converse_request,
    parse_tool_calls,
)
from parlour.runtime.providers._factory import client_for, provider_available
from parlour.runtime.providers._openai import OpenAIClient, build_openai_body

__all__ = [
    "AnthropicClient",
    "BedrockClient",
    "OpenAIClient",
    "build_anthropic_params",
    "build_converse_request",
    "build_openai_body",
    "client_for",
    "parse_tool_calls",
    "provider_available",
]
