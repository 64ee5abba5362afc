"""Tool-call boundaries: where a message list may legally start, and orphan clean-up (pure).

Invariants (DESIGN "Precise rules", nanobot's ``find_legal_message_start``):
- Scanning from the front, an assistant message declares the ids of its ``tool_calls`` (dict
  items with a truthy ``id``, compared as ``str``). A ``tool`` message whose ``tool_call_id``
  is set and not declared since the last cut is an orphan: the start moves to just after it
  and the declared set is emptied. A tool message without an id is never an orphan here.
- :func:`legal_start` returns the position after the last orphan (0 when there is none), so
  ``messages[legal_start(messages):]`` never begins with, nor contains, an orphan result.
- :func:`orphaned_tool_indices` is the stricter clean-up over a whole list: a tool
  message is kept only when its id was declared by some assistant message anywhere in it.
- Agents SDK items pair the same way: a call item (``function_call`` ...) declares its
  ``call_id``, a call-output item is a tool result for its ``call_id`` (see ``_sdk_items``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sessionledger.eventlog import AGENTS_ITEM_KEY

from ._sdk_items import item_call


def declared_call_ids(message: Mapping[str, Any]) -> list[str]:
    """The tool-call ids an assistant message (or an SDK call item) declares (else empty)."""
    if message.get("role") != "assistant":
        pair = item_call(message)
        return [pair[1]] if pair is not None and pair[0] == "call" else []
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [str(call["id"]) for call in calls if isinstance(call, Mapping) and call.get("id")]


def legal_start(messages: Iterable[Mapping[str, Any]]) -> int:
    """Offset of the first message after the last orphan tool result (0 when none)."""
    declared: set[str] = set()
    start = 0
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id and str(call_id) not in declared:
                start = i + 1
                declared.clear()
        elif role == "assistant" and message.get("tool_calls"):
            # Inlined rather than calling declared_call_ids: this loop is the history hot path.
            calls = message["tool_calls"]
            if isinstance(calls, list):
                for call in calls:
                    if (type(call) is dict or isinstance(call, Mapping)) and call.get("id"):
                        declared.add(str(call["id"]))
        elif role != "user" and AGENTS_ITEM_KEY in message:
            pair = item_call(message)
            if pair is None:
                continue
            if pair[0] == "call":
                declared.add(pair[1])
            elif pair[1] not in declared:
                start = i + 1
                declared.clear()
    return start


def orphaned_tool_indices(messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indices of tool messages whose id no assistant message in ``messages`` declared.

    A tool message without an id counts as orphaned here.
    """
    declared: set[str] = set()
    for message in messages:
        declared.update(declared_call_ids(message))
    out = []
    for i, message in enumerate(messages):
        if message.get("role") == "tool":
            if not (message.get("tool_call_id") and str(message["tool_call_id"]) in declared):
                out.append(i)
            continue
        pair = item_call(message)
        if pair is not None and pair[0] == "output" and pair[1] not in declared:
            out.append(i)
    return out
