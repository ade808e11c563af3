"""parlour.runtime: the conversation itself, single-threaded and free of I/O.

Blocks, messages, the objective map and its freeze, rendering to the channel contract,
snapshots, and the model clients. It imports nothing else of parlour's.
"""

from loguru import logger

from . import snapshots as snapshots  # the public module, loaded with the package as before
from ._clock import Clock, SystemClock
from ._context import ConversationContext
from ._guidance import (
    SCHEMA_NOTATION_GUIDANCE,
    TOOL_ANNOUNCEMENT,
    TOOL_WEIGHT_GUIDANCE,
)
from ._handlers import (
    ContentFormatter,
    GenericContentFormatter,
    NativeToolsFormatter,
    PojoResponseHandler,
    ResponseHandler,
    StringResponseHandler,
    ThinkingResponse,
    ThinkingResponseHandler,
    ToolCall,
)
from ._messages import IncomingMessage, Message, OutgoingMessage
from ._open_turn import ApprovalDecision, OpenTurn, PendingCall, TurnStep
from ._pairing import DanglingCall, dangling_calls, is_interrupted_result
from ._palette import DeclaredTool
from ._prepared import PreparedConversation, Turn
from ._roles import Depth, Grade, Input, OutputSize, TurnRole
from ._transcript import Transcript
from ._validation import MAX_NESTING
from .artifacts._registry import (
    Artifact,
    ArtifactRegistry,
    ListArtifact,
    canonicalize_artifact_refs,
    class_for_alias,
    extract_alias_from_ref,
    normalize_ref,
    refs_mentioned_in,
    type_alias,
)
from .artifacts._serializer import (
    REGISTRY_GUIDANCE,
    REGISTRY_HEADER,
    build_registry_section,
    read_artifact,
    write_plain,
    write_summarized,
    write_summarized_with_refs,
)
from .artifacts._summarizers import LLMSummarizer, Summarizer, TruncatingSummarizer
from .blocks import render_tool_text
from .compaction import (
    DEFAULT_COMFORT_CONTEXT_TOKENS,
    DEFAULT_COMPACTION_TRIGGER,
    CompactionLevel,
    CompactionResult,
    ContextCompactor,
    ContextWindowManager,
    FitReport,
    LLMContextCompactor,
    OfflineCompactor,
    summary_model,
)
from .compaction._counters import LocalTokenCounter, TokenCounter
from .models._budget import ModelBinding
from .models._catalog import ModelCatalog, resolve_grade
from .models._spec import ModelSpec, RateLimits, ThinkingMode
from .models._tokens import EncodingCounter, counter_for
from .providers import (
    LLMClient,
    LLMResponse,
    ResponseStream,
    ScriptedClient,
    StopReason,
    Usage,
    WireRequest,
    client_for,
    respond_with_truncation_retry,
    scripted_tool_calls,
)
from .schema._aliases import alias_of
from .schema._function_tools import FunctionTool, tool_from_function
from .schema._generation import Schema, generate_schema, validate_required_fields
from .schema._markers import (
    JsonIgnore,
    LLMContextIgnore,
    LLMDescription,
    LLMExample,
    LLMRequired,
    LLMSummarizable,
    SummarySize,
)
from .schema._tool_context import Cancellation, ToolContext

logger.disable("parlour")

__all__ = [
    "DEFAULT_COMFORT_CONTEXT_TOKENS",
    "DEFAULT_COMPACTION_TRIGGER",
    "MAX_NESTING",
    "REGISTRY_GUIDANCE",
    "REGISTRY_HEADER",
    "SCHEMA_NOTATION_GUIDANCE",
    "TOOL_ANNOUNCEMENT",
    "TOOL_WEIGHT_GUIDANCE",
    "ApprovalDecision",
    "Artifact",
    "ArtifactRegistry",
    "Cancellation",
    "Clock",
    "CompactionLevel",
    "CompactionResult",
    "ContentFormatter",
    "ContextCompactor",
    "ContextWindowManager",
    "ConversationContext",
    "DanglingCall",
    "DeclaredTool",
    "Depth",
    "EncodingCounter",
    "FitReport",
    "FunctionTool",
    "GenericContentFormatter",
    "Grade",
    "IncomingMessage",
    "Input",
    "JsonIgnore",
    "LLMClient",
    "LLMContextCompactor",
    "LLMContextIgnore",
    "LLMDescription",
    "LLMExample",
    "LLMRequired",
    "LLMResponse",
    "LLMSummarizable",
    "LLMSummarizer",
    "ListArtifact",
    "LocalTokenCounter",
    "Message",
    "ModelBinding",
    "ModelCatalog",
    "ModelSpec",
    "NativeToolsFormatter",
    "OfflineCompactor",
    "OpenTurn",
    "OutgoingMessage",
    "OutputSize",
    "PendingCall",
    "PojoResponseHandler",
    "PreparedConversation",
    "RateLimits",
    "ResponseHandler",
    "ResponseStream",
    "Schema",
    "ScriptedClient",
    "StopReason",
    "StringResponseHandler",
    "Summarizer",
    "SummarySize",
    "SystemClock",
    "ThinkingMode",
    "ThinkingResponse",
    "ThinkingResponseHandler",
    "TokenCounter",
    "ToolCall",
    "ToolContext",
    "Transcript",
    "TruncatingSummarizer",
    "Turn",
    "TurnRole",
    "TurnStep",
    "Usage",
    "WireRequest",
    "alias_of",
    "build_registry_section",
    "canonicalize_artifact_refs",
    "class_for_alias",
    "client_for",
    "counter_for",
    "dangling_calls",
    "extract_alias_from_ref",
    "generate_schema",
    "is_interrupted_result",
    "normalize_ref",
    "read_artifact",
    "refs_mentioned_in",
    "render_tool_text",
    "resolve_grade",
    "respond_with_truncation_retry",
    "scripted_tool_calls",
    "summary_model",
    "tool_from_function",
    "type_alias",
    "validate_required_fields",
    "write_plain",
    "write_summarized",
    "write_summarized_with_refs",
]
