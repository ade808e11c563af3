"""The three layers install under one namespace and import only downward."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LAYERS = {
    "parlour.runtime": ("parlour.stores", "parlour.actors"),
    "parlour.stores": ("parlour.actors",),
    "parlour.actors": (),
}


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_a_layer_loads_nothing_above_it(package: str, tmp_path: Path) -> None:
    forbidden = LAYERS[package]
    code = (
        f"import sys, {package}\n"
        f"bad = [m for m in sys.modules if m.startswith({forbidden!r})]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    # run from a temporary directory: parlour must import from its installation
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_top_level_runtime_stores_or_actors_module_is_installed(tmp_path: Path) -> None:
    code = (
        "import importlib.util as u\n"
        "print([n for n in ('runtime', 'stores', 'actors') if u.find_spec(n)])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_all_lists_exactly_the_public_names(package: str) -> None:
    # its order (isort-style) is ruff's RUF022 to keep
    module = importlib.import_module(package)
    public = {n for n in vars(module) if not n.startswith("_")}
    public -= {"annotations", "logger"}
    public = {n for n in public if not isinstance(getattr(module, n), type(module))}
    assert len(module.__all__) == len(set(module.__all__))
    assert set(module.__all__) == public


# Every package's public names and the public modules' (blocks, snapshots, errors, the
# doubles), pinned: a change to the public face is a change to this list, made on purpose.
# The subpackages of parlour.runtime export nothing: their names are public from
# parlour.runtime.
PINNED = {
    "parlour.actors": [
        "Agent",
        "AgentEvent",
        "AgentThinker",
        "AlreadyDecidedError",
        "ApprovalDecided",
        "ApprovalError",
        "ApprovalRequested",
        "ApprovalsPendingError",
        "BasicThinker",
        "Chat",
        "Compacted",
        "CompactionRecord",
        "ConversationService",
        "Event",
        "HistoryMessage",
        "HistoryToolCall",
        "HistoryToolResult",
        "ModelCallRecord",
        "NoSuchApprovalError",
        "Obtaining",
        "OfferAccepted",
        "PendingApproval",
        "Recovered",
        "Reply",
        "Restarted",
        "RetryPolicy",
        "ServiceStats",
        "TextDelta",
        "Thinker",
        "TokenBook",
        "ToolCallFinished",
        "ToolCallStarted",
        "TurnCancelledError",
        "TurnDone",
        "TurnError",
        "UsageLedger",
        "UsageLimitExceeded",
        "UsageLimits",
        "asgi_app",
    ],
    "parlour.actors.agent": [],
    "parlour.actors.agent.mcp": ["MCPServer", "MCPServerError", "MCPServerHTTP", "MCPServerStdio"],
    "parlour.actors.app": [],
    "parlour.actors.tuning": [
        "Booking",
        "BookingTooLargeError",
        "Limiter",
        "LimiterStatistics",
        "TurnGate",
        "follow_catalog_limits",
        "host_collector",
        "limiter_for",
        "limits_for",
        "one_core",
        "set_model_limits",
        "set_provider_concurrency",
        "turn_gate",
    ],
    "parlour.runtime": [
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
        "DEFAULT_COMFORT_CONTEXT_TOKENS",
        "DEFAULT_COMPACTION_TRIGGER",
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
        "MAX_NESTING",
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
        "REGISTRY_GUIDANCE",
        "REGISTRY_HEADER",
        "RateLimits",
        "ResponseHandler",
        "ResponseStream",
        "SCHEMA_NOTATION_GUIDANCE",
        "Schema",
        "ScriptedClient",
        "StopReason",
        "StringResponseHandler",
        "Summarizer",
        "SummarySize",
        "SystemClock",
        "TOOL_ANNOUNCEMENT",
        "TOOL_WEIGHT_GUIDANCE",
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
    ],
    "parlour.runtime.artifacts": [],
    "parlour.runtime.blocks": [
        "BLOCK_KINDS",
        "ContentBlock",
        "ContentBlockSnapshot",
        "FileBlock",
        "ImageBlock",
        "JsonBlock",
        "PojoBlock",
        "ReasoningBlock",
        "RedactedThinkingBlock",
        "SkillBlock",
        "TextBlock",
        "ThinkingBlock",
        "ToolDefinitionBlock",
        "ToolResultBlock",
        "ToolUseBlock",
        "check_block",
        "class_path_of",
        "plainly_storable",
        "render_text",
        "render_tool_text",
        "revive",
        "transcript_text",
    ],
    "parlour.runtime.compaction": [
        "ARTIFACT_RULE",
        "AsyncContextCompactor",
        "CONVERSATION_SUMMARY_HEADER",
        "CompactionLevel",
        "CompactionResult",
        "CompactionStep",
        "ContextCompactor",
        "ContextWindowManager",
        "DEFAULT_COMFORT_CONTEXT_TOKENS",
        "DEFAULT_COMPACTION_TRIGGER",
        "EXCHANGE_SUMMARY_HEADER",
        "FitReport",
        "LLMContextCompactor",
        "OfflineCompactor",
        "SummaryCall",
        "SummaryRequest",
        "compactor_for",
        "offline_summary",
        "summary_model",
    ],
    "parlour.runtime.errors": [
        "ContextOverflowError",
        "ConversationNotFoundError",
        "ConversationUnavailableError",
        "CorruptSnapshotError",
        "DehydratedError",
        "IllegalStateError",
        "MissingTypeAliasError",
        "OutputCeilingError",
        "OutputTruncationRetry",
        "ParlourError",
        "ProviderRefusalError",
        "RetryableLLMError",
        "StaleVersionError",
        "UncorrectableLLMError",
        "UnpairedToolCallError",
        "not_owned",
    ],
    "parlour.runtime.models": [],
    "parlour.runtime.providers": [
        "AnthropicClient",
        "BedrockClient",
        "DEFAULT_USER_OPENER",
        "LLMClient",
        "LLMResponse",
        "OpenAIClient",
        "OpenAIResponsesClient",
        "PrefixMonitor",
        "ProcessWorkers",
        "Raised",
        "ResponseStream",
        "SCRIPTED",
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
    ],
    "parlour.runtime.providers.testing": [
        "ConverseStreamMock",
        "MockProvider",
        "anthropic_message",
        "anthropic_sse",
        "anthropic_sse_error",
        "converse_response",
        "converse_stream_events",
        "dummy_bedrock_client",
        "encode_event",
        "mock_anthropic_sdk",
        "mock_async_anthropic_sdk",
        "mock_async_openai_sdk",
        "mock_openai_sdk",
        "openai_completion",
        "openai_reasoning",
        "openai_response",
        "openai_response_sse",
        "openai_response_sse_error",
        "openai_sse",
        "openai_sse_error",
        "record_params",
    ],
    "parlour.runtime.schema": [],
    "parlour.runtime.snapshots": [
        "Appended",
        "ConversationPersistenceSnapshot",
        "FORMAT_VERSION",
        "MessageSnapshot",
        "ObjectiveSlot",
        "OpenTurn",
        "applied",
        "decode_message_snapshot",
        "decode_snapshot",
        "decode_usage_entry",
        "encode_snapshot",
        "message_snapshots",
        "repaired_messages",
    ],
    "parlour.runtime.testing": [
        "ConverseStreamMock",
        "FakeClock",
        "MockProvider",
        "ScriptedClient",
        "anthropic_message",
        "anthropic_sse",
        "anthropic_sse_error",
        "converse_response",
        "converse_stream_events",
        "dummy_bedrock_client",
        "encode_event",
        "fake_spec",
        "mock_anthropic_sdk",
        "mock_async_anthropic_sdk",
        "mock_async_openai_sdk",
        "mock_openai_sdk",
        "openai_completion",
        "openai_reasoning",
        "openai_response",
        "openai_response_sse",
        "openai_response_sse_error",
        "openai_sse",
        "openai_sse_error",
        "record_params",
        "scripted_tool_calls",
    ],
    "parlour.stores": [
        "ConversationSummary",
        "ConversationVersion",
        "LmdbStore",
        "MemorySessionCache",
        "MemoryStore",
        "PersistentStore",
        "PostgresStore",
        "SaveFuture",
        "SessionStore",
        "StoreInUseError",
        "StoreStatistics",
        "no_appends",
        "saved_in_thread",
        "saved_now",
    ],
    "parlour.stores.lmdb": [],
    "parlour.stores.postgres": [],
}


@pytest.mark.parametrize("package", sorted(PINNED))
def test_the_public_names_of_every_package_are_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == PINNED[package]
    assert all(hasattr(module, name) for name in module.__all__)


def _documented_imports() -> list[tuple[str, str, str]]:
    """(document, module, name) for every ``from parlour... import`` the docs show."""
    docs = [ROOT / "README.md", *sorted(ROOT.glob("**/PACKAGE.md"))]
    found = []
    for doc in docs:
        if ".venv" in doc.parts or "build" in doc.parts:
            continue
        text = doc.read_text()
        for module, names in re.findall(r"from (parlour[\w.]*) import (\([^)]*\)|[^\n`]*)", text):
            for name in re.findall(r"\w+", re.sub(r"#.*", "", names)):
                found.append((doc.relative_to(ROOT).as_posix(), module, name))
    return found


def test_every_name_the_docs_import_is_public_where_they_import_it() -> None:
    documented = _documented_imports()
    misplaced = [
        f"{doc}: from {module} import {name}"
        for doc, module, name in documented
        if name not in getattr(importlib.import_module(module), "__all__", ())
        and not isinstance(getattr(importlib.import_module(module), name, None), type(re))
    ]
    assert len(documented) > 20  # the scan reads the docs' imports at all
    assert misplaced == []


def test_every_public_name_of_a_subpackage_is_public_from_parlour_runtime() -> None:
    runtime = importlib.import_module("parlour.runtime")
    for package in (
        "parlour.runtime.schema",
        "parlour.runtime.artifacts",
        "parlour.runtime.models",
    ):
        assert importlib.import_module(package).__all__ == []
    # each name the runtime exports is the very object its defining module holds
    for name in runtime.__all__:
        value = getattr(runtime, name)
        home = getattr(value, "__module__", None)
        if home and home.startswith("parlour.runtime") and hasattr(value, "__qualname__"):
            assert getattr(importlib.import_module(home), value.__qualname__) is value
