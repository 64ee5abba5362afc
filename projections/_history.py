"""The LLM history: the message dicts a model call takes, derived from a folded session (pure).

Rules (nanobot's ``get_history`` contract, in order):
1. The window starts at :func:`context_start` (after ``last_consolidated`` and after the latest
   compaction's ``upto``) and holds the newest ``max_messages`` of what follows
   (``max_messages <= 0`` means 120). With ``extend_to_user``, a window that holds no user
   message starts instead at the nearest earlier user message after the context start (or at
   a ``_channel_delivery`` message just before it), so a turn is never cut off from its user.
2. It is aligned to its first user message, keeping a ``_channel_delivery`` message just before
   it; a window without a user message is kept as it is.
3. Orphan tool results at the front are dropped (:func:`legal_start`).
4. Each message becomes an entry: ``_command`` messages are skipped; assistant string content is
   sanitised (:func:`sanitize_assistant_text`); a user message with ``media`` gets one
   ``[image: path]`` line per non-empty path (an image-only turn becomes the breadcrumbs), then
   the ``[CLI App Attachment: ...]`` and ``[MCP Preset Attachment: ...]`` hints of its
   ``cli_apps`` and ``mcp_presets`` (:func:`attachment_hints`); with
   ``include_timestamps`` a user turn with a ``timestamp`` gets ``[Message Time: <ts>]\\n`` in
   front; an assistant entry left empty is dropped unless the message has ``tool_calls``,
   ``reasoning_content`` or ``thinking_blocks``; only role, content, tool_calls, tool_call_id,
   name, reasoning_content and thinking_blocks are kept (content defaults to ``""``).
5. With ``max_tokens > 0`` the newest entries that fit are kept (always at least the last);
   the result is realigned to its first user entry, or, when it has none, extended back to the
   nearest user entry even past the budget.
6. The result never starts on (nor holds) an orphan tool result: the legal start is applied
   again at the end. nanobot does this only after token slicing; doing it always differs only
   when a skipped ``_command`` message declared the call, and keeps rule 6 true for every call.

Token counts are the stored ones (``MessageAppended.tokens``), never recounted. An entry whose
text the history lengthened (breadcrumbs, time prefix) is charged its stored count plus one token
per 4 UTF-8 bytes added, rounded up; text removed by sanitising is not credited back. So with the
default byte counter an entry is never charged less than its own estimate.

Only the window is touched: with ``max_tokens`` set, entries are built from the newest message
backwards and building stops once the budget is spent, so the cost is O(window), not O(log);
rule 3 is then checked from a little before the oldest message built (:func:`_front_cut`), so
messages the budget does not reach are not opened either (a lazy or sealed message list reads
and decrypts only what the result needs, plus a few before it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, cast

from sessionledger.eventlog import (
    AGENTS_ITEM_KEY,
    WITHHELD,
    InvalidEventError,
    MessageAppended,
    SessionState,
    estimate_tokens,
)
from sessionledger.eventlog.codec import decode_messages
from sessionledger.eventlog.preview import sanitize_assistant_text

from ._orphans import legal_start
from ._sanitize import image_breadcrumb
from ._sdk_items import item_call
from ._usage import context_start

DEFAULT_MAX_MESSAGES: Final = 120
#: The compaction summary, when asked for, is a system message with this text before it.
SUMMARY_ROLE: Final = "system"
SUMMARY_PREFIX: Final = "Summary of the earlier conversation:\n"

#: How many ``cli_apps`` / ``mcp_presets`` items a user message's hints look at.
ATTACHMENT_HINTS_MAX: Final = 8

_KEPT_KEYS: Final = ("tool_calls", "tool_call_id", "name", "reasoning_content", "thinking_blocks")
_KEEPS_EMPTY_ASSISTANT: Final = ("tool_calls", "reasoning_content", "thinking_blocks")

Entry = dict[str, Any]


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _attachment_lines(items: object, line: Callable[[dict[str, Any], str], str]) -> list[str]:
    if not isinstance(items, list):
        return []
    out: list[str] = []
    for item in items[:ATTACHMENT_HINTS_MAX]:
        if not isinstance(item, dict):
            continue
        name = str(item.get("name") or "").strip().lower()
        if name:
            out.append(line(item, name))
    return out


def _cli_app_line(item: dict[str, Any], name: str) -> str:
    entry = str(item.get("entry_point") or "unknown").strip() or "unknown"
    return (
        f"[CLI App Attachment: @{name}; tool=run_cli_app; entry_point={entry}; "
        f"skill=skills/cli-app-{name}/SKILL.md]"
    )


def _mcp_preset_line(item: dict[str, Any], name: str) -> str:
    transport = str(item.get("transport") or "mcp").strip() or "mcp"
    return f"[MCP Preset Attachment: @{name}; tool_prefix=mcp_{name}_; transport={transport}]"


def attachment_hints(message: Mapping[str, Any]) -> list[str]:
    """The hint blocks a user message's ``cli_apps`` and ``mcp_presets`` add to its text.

    One block per kind that yields at least one line (lines joined by ``\n``); each kind looks
    at its first :data:`ATTACHMENT_HINTS_MAX` items and skips those without a name.
    """
    blocks = []
    for key, line in (("cli_apps", _cli_app_line), ("mcp_presets", _mcp_preset_line)):
        lines = _attachment_lines(message.get(key), line)
        if lines:
            blocks.append("\n".join(lines))
    return blocks


#: What a message's keys say about how it is built (see :func:`_shape`).
_MAY_SKIP: Final = 1  # ``_command``, ``_withheld`` or ``_agents_item``: skipped, or an SDK item
_USER_EXTRAS: Final = 2  # ``media``, ``cli_apps`` or ``mcp_presets``: a user turn's text grows
_KEEPS_EMPTY: Final = 4  # one of _KEEPS_EMPTY_ASSISTANT: an empty assistant entry is kept
_CALLS: Final = 8  # ``tool_calls``: an assistant message may declare calls (rule 3)
_ITEM: Final = 16  # ``_agents_item``: an SDK call item declares, an output item answers (rule 3)

Shape = tuple[int, tuple[str, ...]]


def _shape(keys: tuple[Any, ...]) -> Shape:
    """The flags above for a message with ``keys``, and its keys of :data:`_KEPT_KEYS`, in
    that order (an entry's keys come in that order whatever the message's order)."""
    flags = 0
    if "_command" in keys or WITHHELD in keys or AGENTS_ITEM_KEY in keys:
        flags |= _MAY_SKIP
    if "media" in keys or "cli_apps" in keys or "mcp_presets" in keys:
        flags |= _USER_EXTRAS
    if any(key in keys for key in _KEEPS_EMPTY_ASSISTANT):
        flags |= _KEEPS_EMPTY
    if "tool_calls" in keys:
        flags |= _CALLS
    if AGENTS_ITEM_KEY in keys:
        flags |= _ITEM
    return flags, tuple(key for key in _KEPT_KEYS if key in keys)


def _user_extras(message: dict[str, Any], content: str) -> tuple[str, int]:
    """A user turn's text with its image breadcrumbs and attachment hints, and the UTF-8
    bytes they added (rule 4)."""
    added = 0
    media = message.get("media")
    if isinstance(media, list) and media:
        crumbs = "\n".join(image_breadcrumb(p) for p in media if isinstance(p, str) and p)
        if content:
            added += 1 + _utf8_len(crumbs)
            content = f"{content}\n{crumbs}"
        else:
            added += _utf8_len(crumbs)
            content = crumbs
    if "cli_apps" in message or "mcp_presets" in message:
        for hint in attachment_hints(message):
            added += (1 if content else 0) + _utf8_len(hint)
            content = f"{content}\n{hint}" if content else hint
    return content, added


class _Front:
    """What building a whole window (oldest first) finds out on the way: where rule 3 cuts
    (:func:`legal_start` of the messages given), and whether an entry may differ from its
    message where orphans are decided (a message skipped, or an Agents SDK item), so that
    rule 6 must look at the entries again."""

    __slots__ = ("again", "start")

    def __init__(self) -> None:
        self.start = 0
        self.again = False


def _entries(
    events: Iterable[MessageAppended], include_timestamps: bool, front: _Front | None = None
) -> Iterator[tuple[Entry, int] | None]:
    """Rule 4, message by message: each one's entry and charged tokens, or None when it is
    skipped. Lazy: a message is opened only when its entry is asked for.

    Which of the rule's keys a message has is looked up once per distinct key tuple (the
    messages of a conversation come in a handful of shapes), not key by key per message.
    With ``front``, rule 3 is decided in the same pass: :func:`legal_start`'s scan, inlined
    (a tool result whose id no message since the last cut declared cuts after itself)."""
    shapes: dict[tuple[Any, ...], Shape] = {}
    declared: set[str] = set()
    position = 0
    for event in events:
        message = event.message
        keys = tuple(message)
        shape = shapes.get(keys)
        if shape is None:
            shape = shapes[keys] = _shape(keys)
        flags, kept = shape
        role = message.get("role")
        if front is not None:
            position += 1
            if role == "tool":
                call_id = message.get("tool_call_id")
                # str() of a str is itself: only other values are converted.
                if call_id and (call_id if type(call_id) is str else str(call_id)) not in declared:
                    front.start = position
                    declared.clear()
            elif role == "assistant" and flags & _CALLS and (calls := message["tool_calls"]):
                if isinstance(calls, list):
                    for call in calls:
                        if type(call) is dict:
                            ident = call.get("id")
                            if ident:
                                declared.add(ident if type(ident) is str else str(ident))
                        elif isinstance(call, Mapping) and call.get("id"):
                            declared.add(str(call["id"]))
            elif flags & _ITEM and role != "user":
                pair = item_call(message)
                if pair is not None:
                    if pair[0] == "call":
                        declared.add(pair[1])
                    elif pair[1] not in declared:
                        front.start = position
                        declared.clear()
            if flags & _MAY_SKIP:
                front.again = True
        if flags & _MAY_SKIP:
            if message.get("_command") or message.get(WITHHELD):
                yield None  # a command, or the placeholder of erased or redacted content
                continue
            item = message.get(AGENTS_ITEM_KEY)
            if item is not None and isinstance(item, dict):
                yield dict(item), event.tokens  # an Agents SDK item goes to the model as it is
                continue
        content = message.get("content", "")
        added = 0
        if role == "assistant":
            if isinstance(content, str):
                content = sanitize_assistant_text(content)
                if not content and not flags & _KEEPS_EMPTY:
                    if front is not None:
                        front.again = True
                    yield None
                    continue
        elif role == "user" and isinstance(content, str):
            if flags & _USER_EXTRAS:
                content, added = _user_extras(message, content)
            if include_timestamps:
                timestamp = message.get("timestamp")
                if timestamp:
                    prefix = f"[Message Time: {timestamp}]\n"
                    added += _utf8_len(prefix)
                    content = prefix + content
        entry: Entry = {"role": role, "content": content}
        for key in kept:
            entry[key] = message[key]
        yield entry, (event.tokens + (added + 3) // 4 if added else event.tokens)


def _window(
    state: SessionState, max_messages: int, extend_to_user: bool = False, decode: bool = False
) -> list[MessageAppended]:
    """Rules 1-3: the messages of the window, oldest first (read with one slice of
    ``state.messages``: an indexed list reads them in one go; with ``decode``, every message
    of the window is built, so their dicts are decoded in one call too)."""
    messages = state.messages
    n = len(messages)
    limit = max_messages if max_messages > 0 else DEFAULT_MAX_MESSAGES
    base = context_start(state)
    lo = max(base, n - limit)
    if extend_to_user and lo > base and not any(_is_user(messages[i]) for i in range(lo, n)):
        back = next((i for i in range(lo - 1, base - 1, -1) if _is_user(messages[i])), None)
        if back is not None:
            lo = (
                back - 1
                if back > base and messages[back - 1].message.get("_channel_delivery")
                else back
            )
    window = messages[lo:n]
    if decode:
        decode_messages(window)
    for i, event in enumerate(window):
        if event.message.get("role") == "user":
            if i and window[i - 1].message.get("_channel_delivery"):
                i -= 1
            window = window[i:]
            break
    return window


def _front_cut(window: list[MessageAppended], lowest: int) -> int:
    """Rule 3 for a window whose entries were built down to position ``lowest`` only: 0 when
    no orphan lies at or after ``lowest`` (then the cut changes nothing), else the exact
    :func:`legal_start` of the whole window.

    Scanning from a later start declares a subset of the calls a scan from the window's front
    has declared at each position (both empty their set at every cut), so every orphan of the
    whole window at or after that start is an orphan of the shorter scan too: a shorter scan
    that finds none at or after ``lowest`` proves the window has none there. Starting a little
    before ``lowest`` (a tool result follows its call closely) opens only those messages; the
    scan moves back, up to the window's front, only while it finds one.
    """
    back = 16
    while True:
        begin = max(0, lowest - back)
        cut = begin + legal_start(event.message for event in window[begin:])
        if begin == 0:
            return cut
        if cut <= lowest:
            return 0
        back *= 8


def _is_user(event: MessageAppended) -> bool:
    return bool(event.message.get("role") == "user")


def _first_user(entries: list[tuple[Entry, int]]) -> int | None:
    return next((i for i, (e, _) in enumerate(entries) if e.get("role") == "user"), None)


def _slice_tokens(
    messages: list[MessageAppended], budget: int, include_timestamps: bool
) -> tuple[list[tuple[Entry, int]], int]:
    """Rule 5, building entries from the newest message back only as far as needed; with the
    position of the oldest message it built (the result does not depend on anything older)."""
    kept: list[tuple[Entry, int]] = []  # newest first while collecting
    used = 0
    j = len(messages) - 1  # the next message to build
    overflow: tuple[Entry, int] | None = None
    newest_first = _entries(reversed(messages), include_timestamps)
    for built in newest_first:
        j -= 1
        if built is None:
            continue
        if kept and used + built[1] > budget:
            overflow = built
            break
        kept.append(built)
        used += built[1]
    kept.reverse()
    first = _first_user(kept)
    if first is not None:
        return kept[first:], j + 1
    # No user entry fits: recover the nearest earlier one, even past the budget.
    extra: list[tuple[Entry, int]] = []
    candidate = overflow
    while candidate is not None:
        extra.append(candidate)
        if candidate[0].get("role") == "user":
            extra.reverse()
            return extra + kept, j + 1
        candidate = None
        for built in newest_first:
            j -= 1
            if built is not None:
                candidate = built
                break
    return kept, j + 1


def _summary_entry(state: SessionState) -> tuple[Entry, int] | None:
    compaction = state.compaction
    if compaction is None or not compaction.summary:
        return None
    entry: Entry = {"role": SUMMARY_ROLE, "content": SUMMARY_PREFIX + compaction.summary}
    return entry, estimate_tokens(entry)


def history_with_tokens(
    state: SessionState,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    max_tokens: int = 0,
    include_timestamps: bool = False,
    *,
    include_summary: bool = False,
    extend_to_user: bool = False,
) -> list[tuple[dict[str, Any], int]]:
    """:func:`history` with the token count each entry was charged, entry by entry."""
    _check_arguments(state, max_messages, max_tokens)
    summary = _summary_entry(state) if include_summary else None
    window = _window(state, max_messages, extend_to_user, decode=max_tokens <= 0)
    if max_tokens > 0:
        budget = max(1, max_tokens - summary[1]) if summary else max_tokens
        # Rule 3 after rule 5 (same result; see _front_cut): a window longer than the budget
        # opens only the messages the budget reaches (a sealed message is decrypted to open).
        out, lowest = _slice_tokens(window, budget, include_timestamps)
        cut = _front_cut(window, lowest)
        if cut > lowest:
            out = _slice_tokens(window[cut:], budget, include_timestamps)[0]
        start = legal_start(e for e, _ in out)
    else:
        # Rules 3 and 4 in one pass (the messages before the cut are built too, then dropped).
        front = _Front()
        built = list(_entries(window, include_timestamps, front))
        if front.start:
            built = built[front.start :]
        # An entry is None only where front.again was set (a message skipped or left empty).
        if front.again:
            out = [b for b in built if b is not None]
        else:
            out = cast("list[tuple[Entry, int]]", built)
        # Rule 6 again only when an entry may differ from its message where orphans are
        # decided: a message skipped, or an Agents SDK item (its entry is the item). Otherwise
        # the entries pair exactly as the messages do, which start at their legal start.
        start = legal_start(e for e, _ in out) if front.again else 0
    if start:
        out = out[start:]
    if summary is not None:
        out.insert(0, summary)
    return out


def _check_arguments(state: object, max_messages: object, max_tokens: object) -> None:
    """Refuse what would otherwise fail deep inside (or slice silently wrong) with a clear error."""
    if not isinstance(state, SessionState):
        raise InvalidEventError(
            "history takes a folded session (writer.state or store.state(key)), "
            f"not {type(state).__name__}"
        )
    for name, value in (("max_messages", max_messages), ("max_tokens", max_tokens)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidEventError(f"{name} must be an int, not {value!r}")


def history(
    state: SessionState,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    max_tokens: int = 0,
    include_timestamps: bool = False,
    *,
    include_summary: bool = False,
    extend_to_user: bool = False,
) -> list[dict[str, Any]]:
    """The messages an LLM call takes, by nanobot's ``get_history`` rules (see the module doc).

    With ``include_summary`` the latest compaction summary comes first, as a ``system`` message
    whose content is :data:`SUMMARY_PREFIX` plus the summary; it is counted (estimated, as it is
    not a logged message) against ``max_tokens`` before the window is sliced, leaving the
    window at least one token, so the window keeps its own rules.
    """
    return [
        entry
        for entry, _ in history_with_tokens(
            state,
            max_messages,
            max_tokens,
            include_timestamps,
            include_summary=include_summary,
            extend_to_user=extend_to_user,
        )
    ]
