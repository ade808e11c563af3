"""parlour.runtime.artifacts: typed data the model refers to by reference, never rewrites.

The registry (``_registry``) holds a conversation's artifacts under stable ``@ref`` ids
and their type aliases; the serializer (``_serializer``) writes typed values for the model
(artifacts as references, long fields summarized) and artifacts for persistence; the
summarizers (``_summarizers``) shorten a long summarizable text. Import the public names
from ``parlour.runtime``; this package re-exports nothing.
"""

__all__: list[str] = []
