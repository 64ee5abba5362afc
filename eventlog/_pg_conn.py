"""The PostgreSQL store's connections: its own first connection, then a pool, per process.

Rules:
- The first connection (made as the store's last step, so a bad DSN fails fast and clearly,
  and a refused argument opens none) stays the store's own: a store used by one thread at a
  time (a CLI run, a single agent) connects once and never starts the pool's threads. The
  pool opens, with its own connections, when every connection the store holds is busy; with
  it, at most ``pool_size`` connections (2 for ``pool_size=1``).
- A connection taken from the pool is kept by the store once given back (idle, beside its
  own) and lent again from there, newest first; it goes back to the pool only when it is
  unusable or the store closes. The pool's checkout and return cost each append about as
  much client time as the rest of its bookkeeping: with 8 threads appending, they were a
  fifth of the writers' Python.
- The schema is checked (and migrated when older) before the store's first statement runs,
  once per store: a read whose first statement goes through ``run`` (``reading(via_run=True)``:
  opening, listing, state) carries the check in the statement itself: a CTE naming this
  version's marker function (migration 8), which fails at parse time on any other version, so
  the statement never runs against a schema it was not written for; any other first use
  checks in a query of its own when the connection is lent. A newer schema raises
  ``SchemaVersionError`` there, and nothing is changed.
- The own connection given back while a thread waits on the pool is closed, and the pool
  may hold one more (it connects one, which goes to the first thread waiting): a thread
  blocked in the pool's ``getconn`` never saw the own connection in the idle list, and the
  pool cannot take a connection it did not make.
- A connection the server ended while idle was sent nothing: it is dropped, another lent.
- Each thread's lent connections are known (newest last): a lazy read made while a thread
  holds one (a preview computed in an append reads message bodies) runs on it
  (:meth:`PgConnections.held_connection`) rather than waiting on the pool for a second.
- A forked child never uses its parent's connections (the sockets are shared): it gets a pool
  of its own on first use, and leaves the parent's unused and unclosed; a connection the
  forking thread held is not the child's to read on.
- ``durability="none"``: every connection commits without waiting on the WAL flush.
- Every error becomes the library's (``translate``), naming the database and the action.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ._errors import StoreClosedError
from ._pg_common import PgTarget, close_connection, translate
from ._pg_io import idle_ok
from ._pg_schema import is_current, migrate, restore_marker, with_check

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

    Conn = psycopg.Connection[tuple[Any, ...]]


def _idle_status(conn: Conn) -> bool:
    """Whether ``conn`` is outside any transaction (rolling back one left open, if it can)."""
    # pgconn's status, not conn.info's: ``info`` builds an object on every access, a few
    # microseconds of each append's client time.
    if conn.pgconn.transaction_status == _IDLE:
        return True
    with contextlib.suppress(Exception):
        conn.rollback()
    return bool(conn.pgconn.transaction_status == _IDLE)


_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE (an IntEnum; psycopg is imported lazily)

#: How the schema check fails (another version or no marker: undefined_function; no schema:
#: invalid_schema_name), and no SQLSTATE at all: the statement may not have run.
_CHECK_FAILED = frozenset({"42883", "3F000", None})


class PgConnections:
    """The connections of one store to its database (see the module's rules)."""

    def __init__(self, target: PgTarget, *, pool_size: int, synchronous: bool) -> None:
        self.target = target
        self.where = target.where
        #: The store's statements, rendered once.
        self.sql = target.statements()
        #: Set when the store closes: nothing more is lent, the own connection closes on return.
        self.closed = False
        self._synchronous = synchronous
        self._mutex = threading.RLock()
        #: Whether the schema was found current (or migrated): see the module's rules.
        self.checked = False
        #: The connections the store holds that are not lent out, the own one (made by
        #: :meth:`connect`) and those taken from the pool (a list: pop and append are atomic
        #: across threads), and which one is the own connection (closed, never given to the
        #: pool).
        self._idle: list[Conn] = []
        self._own: Conn | None = None
        #: Guards ``_idle`` and ``_waiting``, the threads waiting on the pool for a connection.
        self._idle_lock = threading.Lock()
        self._waiting = 0
        self._pool_size = max(1, pool_size)
        #: Made when first needed (a store used by one thread at a time never makes it: the
        #: pool object alone cost a new store a tenth of its client time, and it and this
        #: object referred to each other, left for the cyclic garbage collector).
        self._pool: psycopg_pool.ConnectionPool[Conn] | None = None
        self.pool_open = False
        self._pid = os.getpid()
        self._parents_pools: list[Any] = []
        #: The connections each thread holds, newest last (see :meth:`held_connection`).
        self._held = threading.local()
        #: The thread each lent connection was lent to (by the connection's id).
        self._lent: dict[int, int] = {}

    def connect(self) -> None:
        """Make the own connection (once, as the store's last step: see ``PostgresStore``)."""
        conn = self.target.connect()
        try:
            self.configure(conn)
        except Exception as exc:
            conn.close()
            raise translate(exc, self.where, "connect") from exc
        self._own = conn
        self._idle.append(conn)

    def configure(self, conn: Conn) -> None:
        """Set up a new connection (``durability="none"``: commits without waiting on the WAL
        flush)."""
        if not self._synchronous:
            conn.execute("SET synchronous_commit TO off")
            conn.commit()

    def _new_pool(self) -> psycopg_pool.ConnectionPool[Conn]:
        """The pool lent from when the own connection is busy (opened on first use)."""
        import psycopg_pool

        return psycopg_pool.ConnectionPool(
            self.target.dsn,
            kwargs=self.target.connect_kwargs(),
            min_size=0,
            max_size=max(1, self._pool_size - 1),
            open=False,
            timeout=max(self.target.connect_timeout, 1.0) * 2,
            configure=self.configure,
            name=f"sessionlog-{self.target.schema}",
        )

    def check(self, conn: Conn) -> None:
        """Check the schema on ``conn`` (one query when current), migrating an older one.

        Raises:
            SchemaVersionError: the schema is newer than this code knows (nothing changed).
        """
        if not is_current(conn, self.target.schema):
            migrate(conn, self.target.schema, self.where)
        self.checked = True

    def ensure_checked(self) -> None:
        """Check the schema now unless it was (for work on a connection not lent here)."""
        if not self.checked:
            self.putconn(self.getconn())

    def _checked_run(
        self,
        conn: Conn,
        cur: psycopg.Cursor[tuple[Any, ...]],
        query: bytes,
        args: Any,
        binary: bool,
    ) -> None:
        """Run the store's first statement with the schema check in it: one statement, one
        round trip.

        The check (a CTE naming this version's marker function, see ``check_prefix``) fails
        at parse time on any schema but this code's, so the statement never runs; the schema
        is then looked at on its own: migrated (and the statement run) when older,
        :class:`SchemaVersionError` when newer, run when another process made it current in
        between. A statement that failed by itself (the schema current) raises its own error.
        """
        import psycopg

        try:
            cur.execute(
                with_check(self.sql.check_prefix, query), args, prepare=False, binary=binary
            )
        except psycopg.Error as error:
            if isinstance(error, psycopg.OperationalError) or not _idle_status(conn):
                raise  # the connection, a timeout: nothing known of the schema, check later
            if is_current(conn, self.target.schema):
                self.checked = True
                if error.sqlstate not in _CHECK_FAILED:
                    raise  # the statement's own error
                # The check's own failure, and the schema current now: another process
                # created or migrated it in between (two first uses at once), or its marker
                # was dropped (made again here, for the next stores). Run it.
                if error.sqlstate == "42883":
                    restore_marker(conn, self.target.schema)
            else:
                migrate(conn, self.target.schema, self.where)
                self.checked = True
            cur.execute(query, args, prepare=False, binary=binary)
            return
        self.checked = True

    def forked(self) -> None:
        """In a forked child, before anything else: a fresh lock (the parent's may be held),
        and no connection held by any thread (the forking thread's held ones are the parent's:
        a lazy read must not run on their sockets)."""
        self._mutex = threading.RLock()
        self._idle_lock = threading.Lock()
        self._waiting = 0
        self._held = threading.local()
        self._lent = {}

    def _after_fork(self) -> None:
        """In a forked child: a pool of this process's own, and no own connection (the
        parent's are kept, unused and unclosed: closing them would end the parent's sessions
        on the shared sockets)."""
        with self._mutex:
            if self._pid == os.getpid():
                return
            self._parents_pools.append((self._pool, self._own, self._idle))
            self._idle, self._own = [], None
            self._pool = None
            self.pool_open = False
            self._pid = os.getpid()

    def held_connection(self) -> Conn | None:
        """The connection this thread holds, if any (see the module's rules)."""
        held: list[Conn] | None = getattr(self._held, "conns", None)
        me = threading.get_ident()
        while held:
            conn = held[-1]
            if self._lent.get(id(conn)) == me:
                return conn
            held.pop()  # given back by another thread: no longer this one's to use
        return None

    def getconn(self, *, check: bool = True) -> Conn:
        """A connection for this thread: the own one when idle, else one from the pool.

        ``check``: check the schema first unless it was (False: the caller does, see
        :meth:`reading`)."""
        conn = self._lend()
        held = getattr(self._held, "conns", None)
        if held is None:
            held = self._held.conns = []
        held.append(conn)
        self._lent[id(conn)] = threading.get_ident()
        if check and not self.checked:
            try:
                self.check(conn)
            except Exception as exc:
                self.putconn(conn)
                raise translate(exc, self.where, "migrate") from exc
        return conn

    def _lend(self) -> Conn:
        if self.closed:
            raise StoreClosedError("the store is closed")
        if self._pid != os.getpid():
            self._after_fork()
        while True:
            with self._idle_lock:
                if not self._idle:
                    # From here until the pool lends one, connections given back go to the
                    # pool (a thread waiting there is never passed over for the idle list).
                    self._waiting += 1
                    break
                conn = self._idle.pop()
            if idle_ok(conn):
                return conn
            # The server ended it while it was idle: nothing was sent on it, so drop it.
            self._drop(conn)
        try:
            return self._from_pool()
        finally:
            with self._idle_lock:
                self._waiting -= 1

    def _from_pool(self) -> Conn:
        try:
            pool = self._pool
            if pool is None or not self.pool_open:
                with self._mutex:
                    if self.closed:  # close() ran since this lend began: open nothing now
                        raise StoreClosedError("the store is closed")
                    if self._pool is None:
                        self._pool = self._new_pool()
                    pool = self._pool
                    if not self.pool_open:
                        pool.open()
                        self.pool_open = True
            for _ in range(4):
                conn = pool.getconn()
                if idle_ok(conn):
                    return conn
                # The server ended this session while it sat in the pool: nothing was sent
                # on it yet, so drop it and take another.
                with contextlib.suppress(Exception):
                    conn.close()
                self.putconn(conn)
            return pool.getconn()
        except Exception as exc:
            if self.closed:
                raise StoreClosedError("the store is closed") from exc
            raise translate(exc, self.where, "connect") from exc

    def putconn(self, conn: Conn) -> None:
        """Give back a connection :meth:`getconn` lent."""
        lent = self._lent.pop(id(conn), None)
        held = getattr(self._held, "conns", None)
        if held:
            for i in range(len(held) - 1, -1, -1):
                if held[i] is conn:
                    del held[i]
                    break
        if lent is None and (self._pid != os.getpid() or self._parents_pools):
            return  # a parent's connection given back in a forked child: not ours to touch
        if not self.closed and not conn.closed and not conn.broken and _idle_status(conn):
            with self._idle_lock:
                # closed looked at again under the lock: close() may have emptied the list
                if not self.closed and (
                    not self._waiting or (conn is self._own and not self.pool_open)
                ):
                    self._idle.append(conn)
                    return
            if conn is self._own:
                self._retire_own()
                return
            # Another thread waits on the pool: the pool lends it this one.
        self._drop(conn)  # store closed, lost or left mid-transaction, or wanted by the pool

    def _retire_own(self) -> None:
        """The own connection came back while a thread waits on the open pool: close it and
        let the pool hold one more instead, which it connects at once and gives to the first
        thread waiting (in their order). Lent from the idle list, the own connection never
        reached a thread blocked in the pool's ``getconn``: it waited for the pool's timeout
        and failed while the own connection sat idle."""
        with self._mutex:
            own = self._own
            if own is None:
                return
            self._drop(own)
            pool = self._pool
            if pool is not None and self.pool_open and not self.closed:
                with contextlib.suppress(Exception):
                    pool.resize(pool.min_size + 1, pool.max_size + 1)

    def _drop(self, conn: Conn) -> None:
        """Stop holding ``conn``: the own connection is closed, a pooled one goes back to the
        pool (which closes it when it is broken, or when the pool is closed)."""
        if conn is self._own:
            self._own = None
            close_connection(conn)
            return
        pool = self._pool
        if pool is not None:
            with contextlib.suppress(Exception):
                pool.putconn(conn)

    @contextlib.contextmanager
    def connection(self, action: str) -> Iterator[Conn]:
        """A connection inside one transaction (for work of several statements)."""
        conn = self.getconn()
        try:
            with conn.transaction():
                yield conn
        except Exception as exc:
            raise translate(exc, self.where, action) from exc
        finally:
            self.putconn(conn)

    def reading(self, action: str, *, via_run: bool = False) -> _Reading:
        """A connection for one statement (autocommit: no BEGIN/COMMIT round trips), as a
        context manager.

        ``via_run``: the block's first statement goes through ``run``, which then sends the
        schema check when it is still to be made in the same round trip (see the rules)."""
        return _Reading(self, action, via_run)

    def close(self) -> None:
        """Close the own connection (when lent out: when it comes back) and the pool; in a
        forked child, nothing of the parent's."""
        with self._mutex:  # a lend making the pool now makes it before this, or not at all
            self.closed = True
            pool, pool_open = self._pool, self.pool_open
        if self._pid != os.getpid():
            return
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            self._drop(conn)
        if pool is not None and pool_open:
            pool.close(timeout=5.0)


class _Reading:
    """The block of :meth:`PgConnections.reading`: the connection lent for it, given back at
    its end; an error in it becomes the library's (``translate``). A class, not a generator:
    every read (a listing, an open, a state) goes through it."""

    __slots__ = ("_action", "_conn", "_db", "_pending", "_via_run")

    def __init__(self, db: PgConnections, action: str, via_run: bool) -> None:
        self._db = db
        self._action = action
        self._via_run = via_run

    def __enter__(self) -> Conn:
        db = self._db
        conn = self._conn = db.getconn(check=not self._via_run)
        pending = self._pending = self._via_run and not db.checked
        if pending:
            try:
                conn._sessionledger_check = db._checked_run  # type: ignore[attr-defined]
            except AttributeError:  # a connection class that takes no attributes
                self._pending = False
                try:
                    db.check(conn)
                except Exception as exc:
                    db.putconn(conn)
                    raise translate(exc, db.where, self._action) from exc
        return conn

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        conn = self._conn
        if self._pending:
            conn._sessionledger_check = None  # type: ignore[attr-defined]
        self._db.putconn(conn)
        if isinstance(exc, Exception):
            raise translate(exc, self._db.where, self._action) from exc
