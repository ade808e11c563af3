"""parlour.runtime.providers: the client layer. One client per provider dialect over one
shared template, the normalized response, the truncation retry, the prefix-stability check,
the offline scripted client, the workers that make blocking calls for a loop or a waiting
thread (``model_workers``; ``ProcessWorkers`` for a set of one's own), and (in ``testing``)
fakes of the providers' servers.

Each dialect module owns its request builder, decoder and error map; the SDKs are optional
extras imported only when a client is constructed.
"""

from ._anthropic import AnthropicClient, build_anthropic_params
from ._bedrock import BedrockClient
from ._converse import (
    DEFAULT_USER_OPENER,
    build_converse_request,
    parse_tool_calls,
)
from ._factory import SCRIPTED, client_for, provider_available
from ._openai import OpenAIClient, build_openai_body
from ._openai_responses import OpenAIResponsesClient, build_responses_body
from ._prefix import PrefixMonitor
from ._response import LLMResponse, StopReason, Usage
from ._retry import respond_with_truncation_retry
from ._scripted import ScriptedClient, scripted_tool_calls
from ._template import LLMClient, ResponseStream, WireRequest
from ._workers import ProcessWorkers, Raised, called_on, caught, model_workers

__all__ = [
    "DEFAULT_USER_OPENER",
    "SCRIPTED",
    "AnthropicClient",
    "BedrockClient",
    "LLMClient",
    "LLMResponse",
    "OpenAIClient",
    "OpenAIResponsesClient",
    "PrefixMonitor",
    "ProcessWorkers",
    "Raised",
    "ResponseStream",
    "ScriptedClient",
    "StopReason",
    "Usage",
    "WireRequest",
    "build_anthropic_params",
    "build_converse_request",
    "build_openai_body",
    "build_responses_body",
    "called_on",
    "caught",
    "client_for",
    "model_workers",
    "parse_tool_calls",
    "provider_available",
    "respond_with_truncation_retry",
    "scripted_tool_calls",
]
