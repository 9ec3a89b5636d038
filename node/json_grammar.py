"""A JSON schema as the grammar a runner enforces (llguidance: Microsoft's low-level guidance
library, a Rust core with prebuilt abi3 wheels and JSON Schema support).

The API compiles a request's schema to refuse an unusable one at once (a 400), and the runner
compiles the same way to warm its constrained path: one function, so both agree on the grammar.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # declared in llguidance's stub only

COMPACT: JsonCompileOptions = {"whitespace_flexible": False}
"""No free whitespace between JSON tokens: a weak model could otherwise spend its whole budget
on blank lines inside a valid prefix."""


class GrammarError(ValueError):
    """The schema cannot be used; the message says why."""


def json_schema_grammar(schema: Any) -> str:
    """The llguidance grammar that constrains output to `schema`."""
    import llguidance

    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=COMPACT)
        error = llguidance.LLMatcher.validate_grammar(grammar)
    except (ValueError, TypeError) as exc:
        raise GrammarError(str(exc)) from None
    if error and not error.startswith("WARNING"):
        raise GrammarError(error)
    return grammar
