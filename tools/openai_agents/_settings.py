"""The SDK's ``SessionSettings``, accepted as its own sessions accept them.

``SessionSettings`` or a dict of its fields; ``None`` means ``SessionSettings()``. With the SDK
installed a dict is coerced by the SDK itself (unknown keys raise as they do there); without
it the settings are kept as given and only ``limit`` is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sessionledger.eventlog import InvalidEventError


def coerce(value: Any) -> Any:
    """The settings object an SDK session would keep for ``value``."""
    try:
        from agents.memory.session_settings import SessionSettings, coerce_session_settings
    except ImportError:
        return {} if value is None else value
    if value is None:
        return SessionSettings()
    return coerce_session_settings(value)


def limit_of(settings: Any) -> int | None:
    """The default ``get_items`` limit of settings (a ``SessionSettings`` or a dict)."""
    if settings is None:
        return None
    limit = settings.get("limit") if isinstance(settings, Mapping) else settings.limit
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise InvalidEventError(f"session_settings.limit must be an int or None, not {limit!r}")
    return limit
