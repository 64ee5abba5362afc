"""nanobot's own helpers, found at call time, with stand-ins when nanobot is not installed.

Where nanobot's session manager calls one of its helpers (the token estimator, ``strip_think``,
the legacy sessions directory), the drop-in calls the same name in the same module,
``nanobot.session.manager``, looked up on every call. So a nanobot that patches its helper
(its tests do) patches ours too, and an upgraded nanobot's estimator is the one used. Without
nanobot the stand-ins below answer: byte-based token estimates, a ``<think>`` stripper for
closed, unclosed and stray tags, and ``~/.nanobot/sessions``.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from sessionledger.eventlog import estimate_tokens

NANOBOT_MODULE: Final = "nanobot.session.manager"
_UNSAFE = re.compile(r'[<>:"/\\|?*]')
_CLOSED = re.compile(r"<(think|thought)>.*?</\1>", re.S)
_UNCLOSED = re.compile(r"^\s*<(?:think|thought)>.*\Z", re.S)
_STRAY = re.compile(r"\A\s*</?(?:think|thought)>|</?(?:think|thought)>\s*\Z")
_missing = False


def nanobot_module() -> Any | None:
    """``nanobot.session.manager`` when nanobot is installed, else None (looked up once)."""
    global _missing
    module = sys.modules.get(NANOBOT_MODULE)
    if module is not None or _missing:
        return module
    if importlib.util.find_spec("nanobot") is None:
        _missing = True
        return None
    try:
        # nanobot 0.2.2's config models stay half-built (pydantic "not fully defined") when its
        # session manager is imported before them: import them first, as nanobot itself does.
        importlib.import_module("nanobot.config.schema")
        return importlib.import_module(NANOBOT_MODULE)
    except Exception:  # a broken nanobot install: behave as without it
        _missing = True
        return None


def _helper(name: str) -> Callable[..., Any] | None:
    module = nanobot_module()
    found = getattr(module, name, None) if module is not None else None
    return found if callable(found) else None


def estimator() -> Callable[[Mapping[str, Any]], int] | None:
    """nanobot's ``estimate_message_tokens``, or None without nanobot."""
    return _helper("estimate_message_tokens")


def strip_think(text: str) -> str:
    """A title without its model-thinking blocks (nanobot's ``strip_think`` when installed)."""
    found = _helper("strip_think")
    if found is not None:
        return str(found(text))
    text = _CLOSED.sub("", text)
    text = _UNCLOSED.sub("", text)
    return _STRAY.sub("", text).strip()


def legacy_sessions_dir() -> Path:
    """The global pre-workspace sessions directory nanobot migrates from."""
    found = _helper("get_legacy_sessions_dir")
    if found is not None:
        return Path(found())
    return Path.home() / ".nanobot" / "sessions"


def nanobot_stem(key: str) -> str:
    """nanobot's file stem for ``key`` (``safe_key``): ``:`` and unsafe characters become ``_``.

    Not collision-free (``a:b`` and ``a_b`` share a stem); the logs use their own names.
    """
    return _UNSAFE.sub("_", key.replace(":", "_")).strip()


def fallback_estimate(message: Mapping[str, Any]) -> int:
    """The library's byte-based estimate (when nanobot's is not there)."""
    return estimate_tokens(message)
