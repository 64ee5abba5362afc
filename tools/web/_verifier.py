"""Verify state per session for the viewer, kept current by a background thread.

A session is verified again when its signature changes: for a file store the log's size, mtime
and inode (so an edit in place is seen, not only an append); for other stores the log's size.
The result names the first bad line. A verify reads the whole log (seconds for 100,000
messages), so it runs in the background and pages show "checking" until it is done; for a file
store it runs in a child process, so the server's own threads keep the interpreter to
themselves while a long log is checked.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from sessionledger.eventlog import BaseStore, EventLogError, FileStore, SessionNotFoundError
from sessionledger.replay import SessionVerify, verify_session

Signature = tuple[object, ...]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A session's verify state: ok, or the first bad line and what is wrong."""

    ok: bool
    line: int = 0
    what: str = ""
    seq: int = 0
    head: str = ""


def _verdict(report: SessionVerify) -> Verdict:
    if report.ok:
        return Verdict(True, seq=report.seq, head=report.head)
    first = min(report.problems, key=lambda p: (p.line == 0, p.line))
    return Verdict(False, first.line, first.what, report.seq, report.head)


def _worker(conn: Connection, root: str, hash_key: bytes) -> None:
    """The child process: verify the keys it is sent, answer each with a verdict or an error."""
    store = FileStore(root, hash_key=hash_key or None)
    try:
        while True:
            key = conn.recv()
            if key is None:
                return
            try:
                conn.send(_verdict(verify_session(store, key)))
            except SessionNotFoundError:
                conn.send(("missing", key))
            except EventLogError as exc:
                conn.send(("error", str(exc)))
    except (EOFError, OSError, KeyboardInterrupt):
        return
    finally:
        store.close()


class _Child:
    """One verifying child process and the pipe to it."""

    def __init__(self, root: Path, hash_key: bytes) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker, args=(child, str(root), hash_key), name="viewer-verify", daemon=True
        )
        self.proc.start()
        child.close()

    def verify(self, key: str, stop: threading.Event) -> Verdict:
        self.conn.send(key)
        while not self.conn.poll(0.2):
            if stop.is_set() or not self.proc.is_alive():
                raise EventLogError("verification stopped")
        answer = self.conn.recv()
        if isinstance(answer, Verdict):
            return answer
        kind, what = answer
        if kind == "missing":
            raise SessionNotFoundError(what)
        raise EventLogError(what)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.proc.join(timeout=1)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=5)
        self.conn.close()


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
        self._child: _Child | None = None
        self._use_child = isinstance(store, FileStore)
        #: One verification at a time (the child answers in order).
        self._busy = threading.Lock()

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
        with self._busy:
            if self._child is None and self._use_child and not self._stop.is_set():
                assert isinstance(self.store, FileStore)
                self._child = _Child(self.store.root, self.store.hash_key)
            if self._child is not None:
                verdict = self._child.verify(key, self._stop)
            else:
                verdict = _verdict(verify_session(self.store, key))
        with self._lock:
            old = self._results.get(key)
            self._results[key] = (sig, verdict)
            if old is None or old[1] != verdict:
                self.version += 1
        return verdict

    def _run(self) -> None:
        # Let the first page a person opens have the machine to itself for a moment.
        self._stop.wait(min(self.interval, 1.0))
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
        with self._busy:
            if self._child is not None:
                self._child.close()
                self._child = None
