"""parlour.runtime.compaction: when a conversation outgrows its model's window.

``ContextWindowManager`` measures a conversation against the comfort window and the
compaction trigger, and before a model call climbs the ladder (``CompactionLevel``: LIGHT,
MODERATE, AGGRESSIVE, MAXIMUM) through a ``ContextCompactor`` only as far as needed;
``LLMContextCompactor`` has a small model write the summaries, ``OfflineCompactor`` writes
them deterministically with no model at all. Plain single-threaded Python, like the rest
of ``parlour.runtime``.
"""

from ._compactor import (
    AsyncContextCompactor,
    ContextCompactor,
    LLMContextCompactor,
    summary_model,
)
from ._levels import (
    CompactionLevel,
    CompactionResult,
    CompactionStep,
    FitReport,
    SummaryCall,
)
from ._manager import (
    DEFAULT_COMFORT_CONTEXT_TOKENS,
    DEFAULT_COMPACTION_TRIGGER,
    ContextWindowManager,
)
from ._offline import OfflineCompactor, compactor_for, offline_summary
from ._prompts import (
    ARTIFACT_RULE,
    CONVERSATION_SUMMARY_HEADER,
    EXCHANGE_SUMMARY_HEADER,
    SummaryRequest,
)

__all__ = [
    "ARTIFACT_RULE",
    "CONVERSATION_SUMMARY_HEADER",
    "DEFAULT_COMFORT_CONTEXT_TOKENS",
    "DEFAULT_COMPACTION_TRIGGER",
    "EXCHANGE_SUMMARY_HEADER",
    "AsyncContextCompactor",
    "CompactionLevel",
    "CompactionResult",
    "CompactionStep",
    "ContextCompactor",
    "ContextWindowManager",
    "FitReport",
    "LLMContextCompactor",
    "OfflineCompactor",
    "SummaryCall",
    "SummaryRequest",
    "compactor_for",
    "offline_summary",
    "summary_model",
]
