"""parlour's exceptions, in one small tree.

Every error parlour raises on purpose derives from ``ParlourError``; the ones defined
outside ``runtime`` (which imports nothing of the packages above it) name their module.

```
Exception
├── ParlourError                       base of everything parlour raises on purpose
│   ├── UncorrectableLLMError          a call that must not be retried as it is
│   │   ├── ContextOverflowError       the call cannot fit the model's hard context
│   │   ├── ProviderRefusalError       the provider refused to answer
│   │   ├── OutputCeilingError         truncated at the model's own output ceiling
│   │   ├── UnpairedToolCallError      a tool call without its result, or the reverse
│   │   └── BookingTooLargeError       a call booking more than a rate limit's bucket
│   │                                  (parlour.actors._limiter)
│   ├── RetryableLLMError              rate limit, overload, timeout: try again later
│   ├── OutputTruncationRetry          a signal: retry with the larger budget it carries
│   ├── ConversationUnavailableError   obtain failed: missing, or busy past the timeout
│   │   └── Reobtain                   a signal to a waiter: obtain again, from a fresh
│   │                                  load (parlour.actors._messages)
│   ├── DehydratedError                a restored message has no response handler yet
│   ├── MissingTypeAliasError          an artifact class without a type alias
│   ├── CorruptSnapshotError           a stored record that does not decode
│   ├── StaleVersionError              a save from a version the record has moved past
│   ├── IllegalStateError              an operation the current state forbids
│   │   │                              (also a RuntimeError)
│   │   └── StoreInUseError            another process writes the LMDB directory
│   │                                  (parlour.stores.lmdb._lock)
│   ├── ConversationNotFoundError      an update for a record that does not exist
│   │                                  (also a LookupError)
│   ├── MCPServerError                 an MCP server that could not be started or listed
│   │                                  (parlour.actors.agent.mcp._server)
│   ├── ApprovalError                  an approval operation refused; nothing stored
│   │   │                              (parlour.actors.agent._events)
│   │   ├── ApprovalsPendingError      a message or resume while calls await approval
│   │   │                              (parlour.actors.agent._events)
│   │   ├── AlreadyDecidedError        the call was decided already
│   │   │                              (parlour.actors.agent._events)
│   │   └── NoSuchApprovalError        no pending call of that id (also a LookupError)
│   │                                  (parlour.actors.agent._events)
│   └── TurnError                      a turn ended abnormally after its boundary save
│       │                              (parlour.actors.agent._events)
│       ├── TurnCancelledError         the turn was cancelled at a boundary
│       │                              (parlour.actors.agent._events)
│       ├── UsageLimitExceeded         the turn reached a usage limit
│       │                              (parlour.actors.agent._limits)
│       └── ShardLostError             a cluster shard died before it answered
│                                      (parlour.actors.cluster._client)
└── internal signals: raised and caught inside parlour, they never reach a caller
    ├── Abandoned                      ends a model call whose turn stopped listening
    │                                  (parlour.actors.agent._calls)
    ├── AdminError                     a command's refusal, printed as one line
    │                                  (parlour.actors.app._guard)
    ├── ApiError                       an HTTP refusal, answered as a JSON error
    │                                  (parlour.actors.app.serve._http)
    ├── ToolFailed                     a tool's failure, given to the model as an error result
    │                                  (parlour.actors.agent._tools)
    ├── ShuttingDownError              the HTTP host starts no more turns: a 503
    │                                  (parlour.actors.app.serve._host; a RuntimeError)
    └── Unbuildable                    a prune met a version it cannot rebuild: the
                                       damaged run goes into quarantine
                                       (parlour.stores.lmdb._pruning)
```

Bad arguments raise ``ValueError``; another user's conversation raises ``PermissionError``
(always the one ``not_owned`` builds, from the service and every store alike); surface a
store has not built raises ``NotImplementedError``.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
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
]


class ParlourError(Exception):
    """Base class of the errors parlour raises on purpose."""


class UncorrectableLLMError(ParlourError):
    """An LLM call that must not be retried as it stands."""


class ContextOverflowError(UncorrectableLLMError):
    """Even maximum compaction cannot fit the call inside the model's hard context.

    ``tokens`` is the input measured last, ``reserve`` the output reserve, ``limit`` the
    model's hard context (None when the raiser did not say).
    """

    def __init__(
        self,
        message: str,
        *,
        tokens: int | None = None,
        reserve: int | None = None,
        limit: int | None = None,
    ) -> None:
        self.tokens = tokens
        self.reserve = reserve
        self.limit = limit
        super().__init__(message)


class ProviderRefusalError(UncorrectableLLMError):
    """The provider refused to answer; carries its category and explanation when it gave them."""

    def __init__(self, model_id: str, category: str | None, explanation: str | None) -> None:
        self.model_id = model_id
        self.category = category
        self.explanation = explanation
        if category is None and explanation is None:
            text = f"Model {model_id} refused the request and gave no account of why."
        else:
            text = f"Model {model_id} refused the request ({category}): {explanation}"
        super().__init__(text)


class OutputCeilingError(UncorrectableLLMError):
    """The answer was truncated at the model's own output ceiling: no larger budget exists,
    so a retry would only repeat the same truncation."""

    def __init__(self, model_id: str, ceiling: int) -> None:
        self.model_id = model_id
        self.ceiling = ceiling
        super().__init__(
            f"Model {model_id} truncated its answer at its own ceiling of {ceiling} output "
            "tokens, so no larger budget exists. Ask for less (a smaller rung, or split the "
            "task) or choose a model with a higher ceiling."
        )


class UnpairedToolCallError(UncorrectableLLMError):
    """A request would hold a tool call without its result right after it (``missing`` is
    ``"result"``), or a result that follows no call of its id (``missing`` is ``"call"``).

    Every provider refuses such a request, so it is refused before anything is sent. A
    restore answers every call its process left without a result, so a conversation that
    parlour stored never gets here; one built or edited by hand can.
    """

    def __init__(
        self, conversation_id: str | None, call_id: str, missing: Literal["result", "call"]
    ) -> None:
        self.conversation_id = conversation_id
        self.call_id = call_id
        self.missing = missing
        where = "A conversation" if conversation_id is None else f"Conversation {conversation_id}"
        if missing == "result":
            said = f"holds tool call {call_id} without its result right after it"
        else:
            said = f"holds a result for tool call {call_id} that follows no such call"
        super().__init__(
            f"{where} {said}; every provider refuses that, so nothing was sent. Answer or "
            "drop the unpaired block before asking the model again."
        )


class RetryableLLMError(ParlourError):
    """A transient provider failure (rate limit, overload, timeout); the same call may succeed."""


class OutputTruncationRetry(ParlourError):
    """The answer was truncated and a larger output budget exists: retry with ``new_budget``."""

    def __init__(self, previous_budget: int, new_budget: int) -> None:
        self.previous_budget = previous_budget
        self.new_budget = new_budget
        super().__init__(
            f"Answer truncated at {previous_budget} output tokens; retry with {new_budget}."
        )


class ConversationUnavailableError(ParlourError):
    """``obtain_conversation`` could not hand the conversation over."""


class DehydratedError(ParlourError):
    """A restored message has no response handler until it is rehydrated."""


class MissingTypeAliasError(ParlourError):
    """An artifact class was registered without a type alias."""


class CorruptSnapshotError(ParlourError):
    """A stored conversation record does not decode; the record is left untouched."""


class IllegalStateError(ParlourError, RuntimeError):
    """The operation is not allowed in the object's current state."""


class ConversationNotFoundError(ParlourError, LookupError):
    """An update was saved for a conversation the store does not hold (it was deleted)."""


class StaleVersionError(ParlourError):
    """A save named a version the stored record has moved past; nothing was written.

    Another owner saved the conversation since this one loaded it. It is retryable in the
    sense that obtaining the conversation again loads the newer state and goes on from there.
    """

    def __init__(self, conversation_id: str, expected: int, found: int) -> None:
        self.conversation_id = conversation_id
        self.expected = expected
        self.found = found
        super().__init__(
            f"Conversation {conversation_id} was saved at version {found} since this copy "
            f"loaded version {expected}; the save was refused. Obtain it again to go on."
        )


def not_owned(conversation_id: str, user_id: str) -> PermissionError:
    """The one refusal of another user's conversation, from every store and the service
    alike: it says the id is taken and nothing more, whatever state the conversation is in."""
    return PermissionError(f"User {user_id} does not own conversation {conversation_id}")
