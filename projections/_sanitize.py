"""Text clean-up for replayed history (pure).

The display-text rules (sanitising, content text, previews) live with the preview rule in
:mod:`sessionledger.eventlog.preview`; what is here is only the history's own placeholder.
"""

from __future__ import annotations


def image_breadcrumb(path: str) -> str:
    """The placeholder an image attachment leaves in replayed text: ``[image: <path>]``."""
    return f"[image: {path}]"
