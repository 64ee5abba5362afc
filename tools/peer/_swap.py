"""Replacing a framework's class everywhere it is already bound (pure Python, no I/O)."""

from __future__ import annotations

import sys
from typing import Any


def swap(original: Any, replacement: Any) -> int:
    """Rebind every module attribute that is ``original`` to ``replacement``; return how many.

    Modules imported later that do ``from x import Name`` get the replacement from ``x``.
    """
    count = 0
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            if value is original:
                namespace[name] = replacement
                count += 1
    return count
