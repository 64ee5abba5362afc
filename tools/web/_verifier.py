"""Verify state per session for the viewer, kept current by a background thread.

A session is verified again when its signature changes: for a file store the log's size, mtime
and inode (so an edit in place is seen, not only an append); for other stores the catalog's seq
and head. The result names the first bad line. A verify reads the whole log, so it runs in the
background and pages show "checking" until it is done.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from sessionledger.eventlog import BaseStore, EventLogError
from sessionledger.replay import verify_session

Signature = tuple[object, ...]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A session's verify state: ok, or the first bad line and what is wrong."""

    ok: bool
    line: int = 0
    what: str = ""
    seq: int = 0
    head: str = ""


class Verifier:
    """Verifies the sessions of a store in a background thread; ``verdict(key)`` reads it."""

    def __init__(self, store: BaseStore, *, interval: float = 1.0) -> None:
        self.store = store
        self.interval = interval
        self._results: dict[str, tuple[Signature, Verdict]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Bumped whenever a verdict changes (the list page's live updates watch it).
        self.version = 0
        path_for: Callable[[str], object] | None = getattr(store, "path_for", None)
        self._path_for = path_for

    def signature(self, key: str) -> Signature:
        """What, when it changes, makes ``key`` worth verifying again."""
        if self._path_for is not None:
            try:
                st = os.stat(str(self._path_for(key)), follow_symlinks=False)
            except OSError:
                return ("gone",)
            return (st.st_size, st.st_mtime_ns, st.st_ino)
        size, _ = self.store.read_tail(key, 1 << 62)
        return (size,)

    def verdict(self, key: str) -> Verdict | None:
        """The last verdict for ``key`` if still current, else None."""
        with self._lock:
            found = self._results.get(key)
        if found is None:
            return None
        try:
            current = self.signature(key)
        except EventLogError:
            return None
        return found[1] if found[0] == current else None

    def check(self, key: str) -> Verdict:
        """Verify ``key`` now (unless its verdict is current) and remember the verdict."""
        sig = self.signature(key)
        with self._lock:
            found = self._results.get(key)
        if found is not None and found[0] == sig:
            return found[1]
        report = verify_session(self.store, key)
        if report.ok:
            verdict = Verdict(True, seq=report.seq, head=report.head)
        else:
            first = min(report.problems, key=lambda p: (p.line == 0, p.line))
            verdict = Verdict(False, first.line, first.what, report.seq, report.head)
        with self._lock:
            old = self._results.get(key)
            self._results[key] = (sig, verdict)
            if old is None or old[1] != verdict:
                self.version += 1
        return verdict

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                keys = self.store.keys()
            except EventLogError:
                keys = []
            for key in keys:
                if self._stop.is_set():
                    return
                try:
                    self.check(key)
                except EventLogError:
                    continue  # deleted meanwhile, or unreadable: the page says so
            self._stop.wait(self.interval)

    def start(self) -> None:
        """Start the background thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="viewer-verify", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the background thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
