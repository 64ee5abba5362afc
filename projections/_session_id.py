"""Structured session keys: ``agent:channel:peer[:thread]`` pure.

Rules:
- :meth:`SessionID.parse` is strict: three or four ``:``-separated parts, none empty, and the
  thread (the fourth part) may itself contain ``:``. ``str()`` gives the key back.
- :meth:`SessionID.from_key` is lenient, for filtering keys written by other conventions: a
  two-part key is nanobot's ``channel:chat_id`` (agent empty, peer the chat id); a key with no
  ``:`` or an empty part has no structure (None). It never raises.
- Both read keys with ``eventlog.backend.split_key``, the one reading of key structure.
"""

from __future__ import annotations

import msgspec

from sessionledger.eventlog import InvalidEventError, portable
from sessionledger.eventlog.backend import split_key


@portable()
class SessionID(msgspec.Struct, frozen=True, kw_only=True):
    """A session key split into agent, channel, peer and optional thread."""

    agent: str = ""
    channel: str
    peer: str
    thread: str | None = None

    @classmethod
    def parse(cls, key: str) -> SessionID:
        """Parse ``agent:channel:peer[:thread]``; raise :class:`InvalidEventError` otherwise."""
        if not isinstance(key, str):
            raise InvalidEventError(f"session id must be a str, not {type(key).__name__}")
        parts = split_key(key)
        if parts is None or not parts[0]:
            raise InvalidEventError(
                f"session id {key!r} is not agent:channel:peer[:thread] with no empty part"
            )
        agent, channel, peer, thread = parts
        return cls(agent=agent, channel=channel, peer=peer, thread=thread)

    @classmethod
    def from_key(cls, key: str) -> SessionID | None:
        """The structure of any key: ``channel:peer`` or the strict form; None if it has none."""
        parts = split_key(key)
        if parts is None:
            return None
        agent, channel, peer, thread = parts
        return cls(agent=agent, channel=channel, peer=peer, thread=thread)

    def __str__(self) -> str:
        parts = [self.agent] if self.agent else []
        parts += [self.channel, self.peer]
        if self.thread is not None:
            parts.append(self.thread)
        return ":".join(parts)

    @property
    def key(self) -> str:
        """The session key this id stands for (same as ``str(self)``)."""
        return str(self)
