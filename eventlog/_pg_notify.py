"""Waking followers of a PostgreSQL session with LISTEN/NOTIFY instead of polling alone.

An append runs ``pg_notify(channel, '[key, seq]')``, delivered when it commits, only when the
``followers`` table names its session (or the whole store, the empty key): writers nobody
follows pay one index probe of a tiny table, not a NOTIFY. A :class:`NotifyWaker` holds one
dedicated connection that LISTENs on the store's channel, registers itself in ``followers``
(keyed by its backend pid, so rows of dead followers are recognised and pruned by the next
follower), and returns from :meth:`~NotifyWaker.wait` as soon as a notification for its
session (or one whose key was too long to send) arrives, else at the timeout. It registers
before the follower's first read, so an append committed after that read is notified. A waker
only shortens waits: the follower re-reads the log either way, so a lost notification costs
latency, never an event.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import msgspec

from ._errors import StorageError

if TYPE_CHECKING:
    import psycopg

    from ._pg_common import PgTarget, Statements

_payload = msgspec.json.Decoder(tuple[str | None, int])


class NotifyWaker:
    """Blocks a follower of ``key`` until an append to it commits, or the timeout passes."""

    def __init__(self, target: PgTarget, statements: Statements, key: str) -> None:
        from psycopg import sql

        self._key = key
        self._sql = statements
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = target.connect()
        try:
            self._conn.autocommit = True
            self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(statements.channel)))
            self._conn.execute(statements.prune_followers)
            self._conn.execute(statements.follow, (key.encode(),))
        except Exception as exc:
            self._conn.close()
            raise StorageError(target.where, "listen", " ".join(str(exc).split())) from exc

    def _matches(self, payload: str) -> bool:
        try:
            key, _ = _payload.decode(payload)
        except msgspec.DecodeError:
            return True  # not ours to judge: wake and re-read
        return key is None or key == self._key

    def wait(self, timeout: float) -> None:
        """Block for at most ``timeout`` seconds; return early on an append to the session."""
        deadline = time.monotonic() + timeout
        with self._lock:
            conn = self._conn
            if conn is None:
                time.sleep(max(0.0, timeout))
                return
            try:
                while (left := deadline - time.monotonic()) > 0:
                    for note in conn.notifies(timeout=left, stop_after=1):
                        if self._matches(note.payload):
                            return
            except Exception:  # a lost connection: fall back to sleeping (polling)
                self._drop()
                time.sleep(max(0.0, deadline - time.monotonic()))

    async def wait_async(self, timeout: float) -> None:
        """:meth:`wait` in a worker thread (asyncio and trio)."""
        await anyio.to_thread.run_sync(self.wait, timeout)

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                conn.close()

    def close(self) -> None:
        """Unregister, stop listening and close the connection."""
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):  # a dead follower's row is pruned later
                    self._conn.execute(self._sql.unfollow, (self._key.encode(),))
            self._drop()
