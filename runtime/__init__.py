"""parlour.runtime: the conversation itself, single-threaded and free of I/O.

Blocks, messages, the objective map and its freeze, rendering to the channel contract,
snapshots, and the model clients. It imports nothing else of parlour's.
"""

from loguru import logger

from parlour.runtime._artifacts import (
    Artifact,
    ArtifactRegistry,
    ListArtifact,
    alias_of,
    canonicalize_artifact_refs,
    class_for_alias,
    extract_alias_from_ref,
    normalize_ref,
    refs_mentioned_in,
    type_alias,
)
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
from parlour.runtime._function_tools import FunctionTool, tool_from_function
from parlour.runtime._handlers import (
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
from parlour.runtime._markers import (
    JsonIgnore,
    LLMContextIgnore,
    LLMDescription,
    LLMExample,
    LLMRequired,
    LLMSummarizable,
    SummarySize,
)
from parlour.runtime._messages import IncomingMessage, Message, OutgoingMessage
from parlour.runtime._prepared import PreparedConversation, Turn
from parlour.runtime._roles import Depth, Grade, Input, OutputSize, TurnRole
from parlour.runtime._schema import Schema, generate_schema, validate_required_fields
from parlour.runtime._serializer import (
    REGISTRY_GUIDANCE,
    REGISTRY_HEADER,
    build_registry_section,
    read_artifact,
    write_plain,
    write_summarized,
    write_summarized_with_refs,
)
from parlour.runtime._summarizers import LLMSummarizer, Summarizer, TruncatingSummarizer
from parlour.runtime._tokens import EncodingCounter, counter_for
from parlour.runtime._transcript import Transcript
from parlour.runtime._validation import MAX_NESTING
from parlour.runtime.compaction import (
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
from parlour.runtime.providers import (
    LLMClient,
    LLMResponse,
    ResponseStream,
    ScriptedClient,
    StopReason,
    Usage,
    WireRequest,
    client_for,
    respond_with_truncation_retry,
)

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
    "Artifact",
    "ArtifactRegistry",
    "Clock",
    "CompactionLevel",
    "CompactionResult",
    "ContentFormatter",
    "ContextCompactor",
    "ContextWindowManager",
    "ConversationContext",
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
    "OutgoingMessage",
    "OutputSize",
    "PojoResponseHandler",
    "PreparedConversation",
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
    "Transcript",
    "TruncatingSummarizer",
    "Turn",
    "TurnRole",
    "Usage",
    "WireRequest",
    "alias_of",
    "build_registry_section",
    "canonicalize_artifact_refs",
    "class_for_alias",
    "client_for",
    "counter_for",
    "extract_alias_from_ref",
    "generate_schema",
    "normalize_ref",
    "read_artifact",
    "refs_mentioned_in",
    "render_tool_text",
    "resolve_grade",
    "respond_with_truncation_retry",
    "summary_model",
    "tool_from_function",
    "type_alias",
    "validate_required_fields",
    "write_plain",
    "write_summarized",
    "write_summarized_with_refs",
]
