"""parlour.runtime: the conversation itself, single-threaded and free of I/O.

Blocks, messages, the objective map and its freeze, rendering to the channel contract,
snapshots, and the model clients. It imports nothing else of parlour's.
"""

from loguru import logger

from parlour.runtime._budget import ModelBinding
from parlour.runtime._catalog import ModelCatalog, ModelSpec, ThinkingMode, resolve_grade
from parlour.runtime._clock import Clock, SystemClock
from parlour.runtime._context import (
    SCHEMA_NOTATION_GUIDANCE,
    TOOL_ANNOUNCEMENT,
    TOOL_WEIGHT_GUIDANCE,
    ConversationContext,
    DeclaredTool,
    render_tool_text,
)
from parlour.runtime._counting import LocalTokenCounter, TokenCounter
from parlour.runtime._handlers import (
    ContentFormatter,
    GenericContentFormatter,
    NativeToolsFormatter,
    ResponseHandler,
    StringResponseHandler,
)
from parlour.runtime._llm import LLMClient, ResponseStream, WireRequest
from parlour.runtime._messages import IncomingMessage, Message, OutgoingMessage
from parlour.runtime._prepared import PreparedConversation, Turn
from parlour.runtime._response import LLMResponse, StopReason, Usage
from parlour.runtime._retry import respond_with_truncation_retry
from parlour.runtime._roles import Depth, Grade, Input, OutputSize, TurnRole
from parlour.runtime._scripted import ScriptedClient
from parlour.runtime.providers import client_for

logger.disable("parlour")

__all__ = [
    "SCHEMA_NOTATION_GUIDANCE",
    "TOOL_ANNOUNCEMENT",
    "TOOL_WEIGHT_GUIDANCE",
    "Clock",
    "ContentFormatter",
    "ConversationContext",
    "DeclaredTool",
    "Depth",
    "GenericContentFormatter",
    "Grade",
    "IncomingMessage",
    "Input",
    "LLMClient",
    "LLMResponse",
    "LocalTokenCounter",
    "Message",
    "ModelBinding",
    "ModelCatalog",
    "ModelSpec",
    "NativeToolsFormatter",
    "OutgoingMessage",
    "OutputSize",
    "PreparedConversation",
    "ResponseHandler",
    "ResponseStream",
    "ScriptedClient",
    "StopReason",
    "StringResponseHandler",
    "SystemClock",
    "ThinkingMode",
    "TokenCounter",
    "Turn",
    "TurnRole",
    "Usage",
    "WireRequest",
    "client_for",
    "render_tool_text",
    "resolve_grade",
    "respond_with_truncation_retry",
]
