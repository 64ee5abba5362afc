"""The model's view: which live messages ``projections.history`` gives the model, and why not the
others (pure).

Rules:
- The entries are exactly ``projections.history_with_tokens(state, ...)``; each is matched to
  the live message it came from by walking both from the newest end (an entry keeps its
  message's role and ``tool_call_id``, and history keeps message order).
- Every live message before the first one given gets the reason it is outside: ``consolidated``
  (before ``last_consolidated``), ``compacted`` (the summary stands for it), ``window`` (outside
  the ``max_messages`` window or cut by its alignment rules) or ``budget`` (the window held it,
  the token budget did not). One inside the range but not given is ``skipped`` (a ``_command``
  message, an empty assistant message).
- Only ``context`` rows before the first given message are listed; ``hidden`` counts the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from sessionledger.eventlog import SessionState
from sessionledger.projections import context_start, history_with_tokens

from ._redact import NO_REDACTION, Redaction


class ViewRow(msgspec.Struct, kw_only=True):
    """One live message and whether the model is given it."""

    seq: int
    role: str | None
    tokens: int
    included: bool
    #: Why it is left out (consolidated, compacted, window, budget, skipped), or "".
    reason: str = ""
    #: The entry the model is given (redacted), when included.
    entry: dict[str, Any] | None = None


class ModelView(msgspec.Struct, kw_only=True):
    """What ``history()`` gives the model at one point of a session."""

    seq: int
    max_messages: int
    max_tokens: int
    #: Tokens charged for what the model is given, and how many entries.
    used_tokens: int
    entries: int
    #: The compaction summary entry, when one is given first.
    summary: dict[str, Any] | None
    rows: list[ViewRow]
    #: Live messages before ``rows`` not listed (all outside).
    hidden: int
    live_messages: int


def _match(messages: Sequence[Any], entries: list[tuple[dict[str, Any], int]]) -> dict[int, int]:
    """Index of the live message -> index of its entry."""
    out: dict[int, int] = {}
    j = len(messages) - 1
    for k in range(len(entries) - 1, -1, -1):
        entry = entries[k][0]
        while j >= 0:
            m = messages[j].message
            if (
                m.get("role") == entry.get("role")
                and m.get("tool_call_id") == entry.get("tool_call_id")
                and not m.get("_command")
            ):
                break
            j -= 1
        if j < 0:
            break
        out[j] = k
        j -= 1
    return out


def model_view(
    state: SessionState,
    *,
    max_messages: int = 0,
    max_tokens: int = 0,
    include_summary: bool = True,
    context: int = 10,
    redaction: Redaction = NO_REDACTION,
) -> ModelView:
    """What the model is given from ``state``, row by row (see the module doc)."""
    given = history_with_tokens(state, max_messages, max_tokens, include_summary=include_summary)
    summary = None
    if (
        include_summary
        and state.compaction is not None
        and given
        and given[0][0].get("role") == "system"
        and state.compaction.summary
    ):
        summary = dict(given[0][0])
        if redaction.summary:
            summary["content"] = redaction.text(summary["content"])
        body = given[1:]
    else:
        body = given
    messages = state.messages
    matched = _match(messages, body)
    window = _match(messages, history_with_tokens(state, max_messages, 0)) if max_tokens else {}
    first = min(matched) if matched else len(messages)
    first_window = min(window) if window else first
    start = context_start(state)
    lo = max(0, min(first, len(messages)) - context)
    rows: list[ViewRow] = []
    for i in range(lo, len(messages)):
        m = messages[i]
        role = m.message.get("role")
        k = matched.get(i)
        if k is not None:
            entry = redaction.message(body[k][0])
            rows.append(
                ViewRow(
                    seq=m.seq,
                    role=role if isinstance(role, str) else None,
                    tokens=body[k][1],
                    included=True,
                    entry=entry,
                )
            )
            continue
        if i < state.last_consolidated:
            reason = "consolidated"
        elif i < start:
            reason = "compacted"
        elif i >= first or m.message.get("_command"):
            reason = "skipped"
        elif max_tokens and i >= first_window:
            reason = "budget"
        else:
            reason = "window"
        rows.append(
            ViewRow(
                seq=m.seq,
                role=role if isinstance(role, str) else None,
                tokens=m.tokens,
                included=False,
                reason=reason,
            )
        )
    return ModelView(
        seq=state.seq,
        max_messages=max_messages,
        max_tokens=max_tokens,
        used_tokens=sum(t for _, t in given),
        entries=len(given),
        summary=summary,
        rows=rows,
        hidden=lo,
        live_messages=len(messages),
    )
