"""A tool built from a Python function: its signature is the input schema, its docstring
the description (Google-style ``Args:`` lines describe the parameters).

    def search_documents(query: str, max_results: int = 10) -> list[str]:
        '''Search for relevant documents.

        Args:
            query: The search query.
            max_results: Maximum results to return (1-100).
        '''

    tool = tool_from_function(search_documents)
    conversation.add_tool(tool)            # a DeclaredTool: converted at first render
    tool.call('{"query": "parlour"}')      # decoded and checked against the signature

A parameter annotated ``ToolContext`` is not part of the schema: the host running the call
passes it (``tool.call(input_json, context)``).
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Annotated, Any

import msgspec

from ..blocks import ToolDefinitionBlock
from ._generation import Schema, generate_schema
from ._markers import LLMDescription, LLMRequired
from ._tool_context import ToolContext, is_tool_context

__all__ = ["FunctionTool", "tool_from_function"]

_ARG_LINE = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class FunctionTool:
    """A declared tool wrapping a function; ``definition()`` is built once, lazily.

    ``context_param`` names the function's parameter that receives the call's
    ``ToolContext`` (None: it takes none); it is not a field of ``input_type``.
    ``rerun_on_recovery`` declares the tool safe to run again with the same arguments (and
    the same ``ToolContext.idempotency_key``): a host resuming a turn whose call to it was
    interrupted by a crash runs the call again instead of keeping the interrupted result.
    ``needs_approval`` declares that a person must approve each call before it runs: a host
    parks the turn with the call pending until someone approves or denies it.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str,
        description: str,
        input_type: type[msgspec.Struct],
        *,
        context_param: str | None = None,
        rerun_on_recovery: bool = False,
        needs_approval: bool = False,
    ) -> None:
        self.fn = fn
        self.rerun_on_recovery = rerun_on_recovery
        self.needs_approval = needs_approval
        self._name = name
        self.description = description
        self.input_type = input_type
        self.context_param = context_param
        self._definition: ToolDefinitionBlock | None = None

    @property
    def name(self) -> str:
        return self._name

    def schema(self) -> Schema:
        return generate_schema(self.input_type)

    def definition(self) -> ToolDefinitionBlock:
        """The model-facing definition: standard JSON Schema without harness keywords."""
        if self._definition is None:
            self._definition = ToolDefinitionBlock(
                name=self._name,
                description=self.description,
                schema_json=self.schema().to_model_json(),
            )
        return self._definition

    def call(self, input_json: str | bytes, context: ToolContext[Any] | None = None) -> Any:
        """Decode the model's arguments against the signature and call the function, with
        ``context`` as its ``context_param`` when it has one (none given: the parameter's
        default, if it has one).

        Raises:
            msgspec.ValidationError: the arguments do not fit the signature.
            msgspec.DecodeError: the arguments are not JSON.
            TypeError: the function needs a context and none was given.
        """
        args: Any = msgspec.json.decode(input_json, type=self.input_type)
        kwargs = {f: getattr(args, f) for f in self.input_type.__struct_fields__}
        if context is not None and self.context_param is not None:
            kwargs[self.context_param] = context
        return self.fn(**kwargs)


def tool_from_function(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    rerun_on_recovery: bool = False,
    needs_approval: bool = False,
) -> FunctionTool:
    """A ``FunctionTool`` from ``fn``'s signature and docstring.

    A parameter without a default is required; its description comes from the docstring's
    ``Args:`` section (or an ``Annotated[..., LLMDescription(...)]`` annotation). A parameter
    annotated ``ToolContext`` (``ToolContext[X]``, optional or not) is left out of the
    schema and becomes the tool's ``context_param``. ``rerun_on_recovery`` and
    ``needs_approval``: as ``FunctionTool``'s.

    Raises:
        TypeError: ``fn`` takes ``*args`` or ``**kwargs``, which have no schema, or more
            than one ``ToolContext``.
    """
    doc = inspect.getdoc(fn) or ""
    summary, arg_docs = _parse_doc(doc)
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    context_param: str | None = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{fn.__qualname__} takes *{param.name}: a tool needs named inputs")
        hint = hints.get(param.name, Any)
        if is_tool_context(hint):
            if context_param is not None:
                raise TypeError(f"{fn.__qualname__} takes two ToolContext parameters")
            context_param = param.name
            continue
        fields.append(_field(param, hint, arg_docs.get(param.name)))
    tool_name = name or fn.__name__
    input_type = msgspec.defstruct(
        _camel(tool_name) + "Input", fields, kw_only=True, module=fn.__module__
    )
    return FunctionTool(
        fn,
        tool_name,
        description or summary or tool_name,
        input_type,
        context_param=context_param,
        rerun_on_recovery=rerun_on_recovery,
        needs_approval=needs_approval,
    )


def _field(
    param: inspect.Parameter, hint: Any, doc: str | None
) -> tuple[str, Any] | tuple[str, Any, Any]:
    markers: list[object] = []
    if doc:
        markers.append(LLMDescription(doc))
    if param.default is inspect.Parameter.empty:
        markers.append(LLMRequired)
    annotated = Annotated[(hint, *markers)] if markers else hint
    if param.default is inspect.Parameter.empty:
        return (param.name, annotated)
    return (param.name, annotated, param.default)


def _parse_doc(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph, and ``name: text`` lines of an ``Args:`` section (continuation
    lines joined)."""
    paragraphs = doc.split("\n\n")
    summary = " ".join(paragraphs[0].split()) if paragraphs and paragraphs[0] else ""
    args: dict[str, str] = {}
    in_args, current = False, None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args and stripped.endswith(":") and not line.startswith(" "):
            break  # the next section (Returns:, Raises:)
        if not in_args or not stripped:
            continue
        m = _ARG_LINE.match(line)
        if m and line.startswith("    ") and not line.startswith("        "):
            current = m.group(1)
            args[current] = m.group(2).strip()
        elif current is not None:
            args[current] = f"{args[current]} {stripped}"
    return summary, args


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)
