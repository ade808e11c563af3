"""parlour.runtime.models: which model serves a seat, how much it may answer, what it costs.

A spec (``_spec``) says what one model takes and emits; the catalog (``_catalog``, its
shipped figures in ``_catalog_data``) holds the specs and finds one for a seat's grade; a
binding (``_budget``) ties a seat's declarations to the spec it resolved to and computes
the next call's output budget; the token module (``_tokens``) estimates what
a conversation sends, offline. Import the public names from ``parlour.runtime``; this
package re-exports nothing.
"""

__all__: list[str] = []
