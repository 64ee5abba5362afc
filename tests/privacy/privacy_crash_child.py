"""Child process of the crash tests: run one privacy operation and die by SIGKILL midway.

Usage: ``python privacy_crash_child.py ROOT OPERATION POINT N``. OPERATION is ``erase``,
``redact`` or ``rotate``; POINT names where the process kills itself: ``destroy`` (the event is
durable, no key destroyed yet) or ``rename`` (the N-th crash-safe file replace, after its temp
file is written and fsynced but before the rename), ``renamed`` (just after that rename, before
the directory fsync), ``drop`` (the keys are destroyed, the session's snapshot not dropped yet).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from sessionledger.eventlog import FileStore, LocalKeyFile, _crypto, _keystore, _privacy


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    root, operation, point, nth = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    provider = LocalKeyFile(Path(root) / "master.key")
    store = FileStore(Path(root) / "s", key_provider=provider, durability="always")
    calls = {"n": 0}
    real_rename = _keystore._rename

    def rename(src: Any, dst: Any) -> None:
        calls["n"] += 1
        if point == "rename" and calls["n"] == nth:
            _die()
        real_rename(src, dst)
        if point == "renamed" and calls["n"] == nth:
            _die()

    _keystore._rename = rename  # type: ignore[assignment]
    if point == "destroy":
        _crypto.Keyring.destroy = lambda *a, **k: _die()  # type: ignore[assignment,method-assign]
    if point == "drop":
        _privacy.Privacy.drop_views = lambda *a, **k: _die()  # type: ignore[method-assign]
    if operation == "erase":
        store.erase("victim", by="ops", reason="crash test")
    elif operation == "redact":
        store.redact("victim", 2, by="ops")
    else:
        store.rotate_master_key()
    print("finished", flush=True)


if __name__ == "__main__":
    main()
