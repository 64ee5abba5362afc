"""pytest plugin: nanobot's ``Session`` and ``SessionManager`` become the drop-in's.

Load with ``-p sessionledger.tools.peer._nanobot_plugin``.
"""

from __future__ import annotations

import pytest

from sessionledger.tools.nanobot import Session, SessionManager

from ._swap import swap


def pytest_configure(config: pytest.Config) -> None:
    """Swap the classes before nanobot's test modules import them."""
    import nanobot.config.schema  # noqa: F401  # first, as nanobot's own imports order it
    import nanobot.session.manager as theirs

    swap(theirs.Session, Session)
    swap(theirs.SessionManager, SessionManager)
