"""parlour.runtime.schema: what the model is told a value looks like.

A msgspec Struct or dataclass is reflected once (``_generation``) into a schema model
(``_nodes``) steered by the field markers (``_markers``), and rendered by one renderer
(``_render``) either as standard JSON Schema for a provider's tool palette or as the
compact @-notation the model reads in the conversation; a Python function becomes a tool
through the same generation (``_function_tools``). Import the public names from
``parlour.runtime``; this package re-exports nothing.
"""

__all__: list[str] = []
