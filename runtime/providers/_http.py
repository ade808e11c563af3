"""The base of the clients over an HTTP SDK (anthropic, openai): one way to build the SDK
client, with the SDK's own retry, and to report what is missing."""

from __future__ import annotations

from typing import Any, ClassVar

from parlour.runtime._catalog import ModelCatalog, ModelSpec
from parlour.runtime._handlers import NativeToolsFormatter
from parlour.runtime._llm import LLMClient
from parlour.runtime._roles import Depth
from parlour.runtime.providers._errors import require_key, require_sdk
from parlour.runtime.providers._shared import OutputDeclaration, spec_of


class HttpSdkClient(LLMClient):
    """A native-tools client over an HTTP SDK whose client class is ``provider``.

    Args:
        model: a catalog id or a ``ModelSpec`` (default: the dialect's ``default_model``).
        api_key: else the dialect's environment variable.
        sdk_client: a ready SDK client (tests pass one over a mock transport); when given,
            ``api_key`` and ``max_retries`` are not used.
        max_retries: the SDK's own retry with backoff for rate limits, overload, timeouts.
        catalog, depth, output_declaration: see ``LLMClient``.

    Raises:
        ImportError: the SDK is missing; the message names the pip extra.
        UncorrectableLLMError: no API key is configured; the message names the variable.
    """

    formatter = NativeToolsFormatter()
    module: ClassVar[str]  # the SDK's import name, also its pip extra
    provider: ClassVar[str]  # the SDK's client class, also the name in messages
    env_var: ClassVar[str]
    default_model: ClassVar[str]

    def __init__(
        self,
        model: str | ModelSpec | None = None,
        *,
        api_key: str | None = None,
        sdk_client: Any = None,
        max_retries: int = 2,
        catalog: ModelCatalog | None = None,
        depth: Depth | None = None,
        output_declaration: OutputDeclaration | None = None,
    ) -> None:
        super().__init__(
            spec_of(model or self.default_model, catalog),
            depth=depth,
            output_declaration=output_declaration,
        )
        self._sdk = require_sdk(self.module, self.module)
        if sdk_client is None:
            key = require_key(api_key, self.env_var, self.provider)
            sdk_client = getattr(self._sdk, self.provider)(api_key=key, max_retries=max_retries)
        self.sdk_client = sdk_client
