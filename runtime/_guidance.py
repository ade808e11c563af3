"""The framework's own texts the model reads: the schema-notation legend, the tool-weight
guidance, the late-tool announcement (their fixed markers are pinned by the tests, since
reconciliation looks for them in the stream)."""

SCHEMA_NOTATION_GUIDANCE = (
    "Schema notation. In any schema you are given, keys beginning with @ explain the "
    "structure to you; they are never part of your reply. @type names a value's type, "
    "@description says what it means, @required marks a field that must be present, "
    "@examples lists sample values, @values lists the only values an enum accepts, and "
    "@fields holds the members of an object.\n"
    "Answer with an instance of the schema: a node with @fields becomes an object holding "
    "those members, the same rule applying inside it; a node without @fields becomes a value "
    "of its @type.\n"
    'schema    {"@type":"Person","@fields":{"name":{"@type":"string"},'
    '"tags":{"@type":"array of string"}}}\n'
    'instance  {"name":"Ada Lovelace","tags":["mathematician"]}'
)
TOOL_WEIGHT_GUIDANCE = (
    "Available tools:\n"
    "Each tool may be annotated [type, weight: N]. The type says what a call does: 'in "
    "memory' is instant computation, 'api call' one external call, 'thinker LN' a sub-agent "
    "N levels deep. The weight is the call's relative cost on a 0-100 scale: 1-5 is a quick "
    "lookup, 30 or more a deep multi-step investigation. Prefer the lighter tool when it "
    "serves, and keep heavy ones for questions that need them."
)
TOOL_ANNOUNCEMENT = "Additional tools now available:"
