"""The JSON Schema of a log line (format version 2), generated from the event types.

Generated with msgspec from the very structs the codec encodes and decodes, so it cannot drift
from the code; :func:`line_schema` adds what the structs do not say: ``h`` is required and is
32 lowercase hex digits, ``seq`` is never negative, a message has a non-empty ``role``, and the reasons and states
this version writes (the structs read any string, so a newer writer's value is not corruption).
``docs/event-schema.json`` is this function's output (a test keeps it current).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._events import (
    END_REASONS,
    FORMAT_VERSION,
    LIFECYCLE_STATES,
    TRIM_REASONS,
    Header,
    KnownEvent,
)

SCHEMA_ID = "https://sessionlog.invalid/schema/line-v1.json"


def line_schema() -> dict[str, Any]:
    """The JSON Schema every line of a log (header or known event) satisfies."""
    schema: dict[str, Any] = msgspec.json.schema(Header | KnownEvent)
    for definition in schema["$defs"].values():
        props = definition.get("properties", {})
        if "h" in props:
            props["h"] = {
                "type": "string",
                "pattern": "^[0-9a-f]{32}$",
                "description": "blake2b-128 of the previous line's h and this line's bytes "
                "before the h field (the header chains from 32 zeros)",
            }
            required = definition.setdefault("required", [])
            if "h" not in required:
                required.append("h")
        if "seq" in props:
            props["seq"] = {"type": "integer", "minimum": 0}
        for name in ("ts", "created_at"):
            if name in props:
                props[name] = {"type": "string", "format": "date-time"}
    defs = schema["$defs"]
    defs["Trimmed"]["properties"]["reason"] = {"enum": list(TRIM_REASONS)}
    defs["Cleared"]["properties"]["reason"] = {"enum": [*END_REASONS, None]}
    defs["LifecycleChanged"]["properties"]["state"] = {"enum": list(LIFECYCLE_STATES)}
    defs["LifecycleChanged"]["properties"]["reason"] = {"enum": [*END_REASONS, None]}
    message = defs["MessageAppended"]["properties"]["message"]
    message["type"] = "object"
    message["required"] = ["role"]
    message["properties"] = {"role": {"type": "string", "minLength": 1}}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    schema["title"] = f"sessionlog log line, format version {FORMAT_VERSION}"
    schema["description"] = (
        "One line of a session log: the header (first line) or an event. Readers keep events "
        "of a type they do not know (from a newer writer) and pass them through. A log in "
        "segments has a header (version 2, segment 2, 3, ...) at the start of every later "
        "segment; a version-1 log is a version-2 log of one segment."
    )
    return schema
