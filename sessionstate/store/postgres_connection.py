"""The PostgreSQL store's connection: the URL, connecting with the store's durability setting,
replacing a connection that broke (at the start of the next transaction, never inside one),
running one statement with its errors translated, and the feature tables' view of the same
connection (``PostgresConnection``). ``postgres.PostgresStore`` is built on
``PostgresConnected``; nothing else here knows the store's tables or transactions."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Sequence

import psycopg
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import DBAPIError

from ..errors import InvalidDatabaseUrl, StorageUnavailable, UnsupportedBackend
from . import commit_outcome
from .postgres_errors import translate
from .postgres_record import BACKEND_SQL

if TYPE_CHECKING:
    from sqlalchemy.pool import PoolProxiedConnection

__all__ = ["CONNECT_TIMEOUT_SECONDS", "SCHEMES", "SYNCHRONOUS_COMMIT", "PostgresConnected", "PostgresConnection",
           "postgres_url"]

SCHEMES = ("postgresql+psycopg", "postgresql", "postgres")
CONNECT_TIMEOUT_SECONDS = 10
# Durability per ``synchronous`` level, set on every connection of the store. NORMAL (the
# default) is ``on`` too: a server tuned to ``synchronous_commit = off`` acknowledges a commit
# before its WAL is written, and an immediate restart then lost acknowledged events and
# reissued their sequences (issue 20). ``OFF`` is the faster mode, asked for by name.
SYNCHRONOUS_COMMIT = {"OFF": "off", "NORMAL": "on", "FULL": "on", "EXTRA": "on"}


def postgres_url(url: str) -> URL:
    """The SQLAlchemy URL for a PostgreSQL URL, with the psycopg 3 driver."""
    if "\x00" in url or any("\ud800" <= ch <= "\udfff" for ch in url):
        raise InvalidDatabaseUrl(f"{url!r}: a database URL holds no NUL and no lone surrogate")
    try:
        parsed = make_url(url)
    except Exception as exc:  # SQLAlchemy's ArgumentError, or ValueError from a bad port
        raise InvalidDatabaseUrl(f"{url!r} is not a database URL ({exc})") from None
    if parsed.drivername not in SCHEMES:
        raise UnsupportedBackend(
            f"{parsed.drivername!r} is not a PostgreSQL URL this store opens; use postgresql+psycopg://"
        )
    return parsed.set(drivername="postgresql+psycopg")


class PostgresConnected:
    """The store's one connection (``_pg``, its cursor ``_cur``): opened by ``_connect``,
    replaced by ``_reconnect_if_broken`` when idle, and the statement runners the store and
    its tables use. The store sets ``_engine`` and ``_synchronous_commit`` before
    connecting; ``_depth`` is its unit of work's nesting (a statement inside a transaction
    never reconnects: the transaction is gone with its connection).

    A transaction's ``BEGIN`` waits for its first statement (``_begin_unsent``): a batch's
    pipeline takes it along in its one round trip; any other statement sends it first, as
    its own round trip (two statements pipelined cost more here than the round trip they
    save, docs/performance-postgres.md)."""

    _engine: Engine
    _synchronous_commit: str
    _depth: int
    _proxy: "PoolProxiedConnection"
    closed: bool
    where: str

    def _connect(self) -> None:
        self._proxy = self._engine.raw_connection()
        pg = self._proxy.driver_connection
        assert isinstance(pg, psycopg.Connection)
        pg.rollback()  # the dialect's first-connect queries may have opened one
        pg.autocommit = True  # transactions are explicit: see transaction()
        pg.execute("SET standard_conforming_strings = on")  # the NOTIFY literals rely on it
        pg.execute(f"SET synchronous_commit = {self._synchronous_commit}")
        self._pg: psycopg.Connection[Any] = pg
        self._cur = pg.cursor()
        self._side = pg.cursor()  # sends the BEGIN held back by _begin (its result is never read)
        self._begin_unsent = False
        # R29: the timeline this connection's transactions begin on (once per connection).
        row = pg.execute(commit_outcome.TIMELINE_SQL).fetchone()
        self._timeline: str | None = row[0] if row else None
        # R29: this connection's server process (pid, start), which a lost lone record's
        # resolution ends if it still runs (``postgres_record.settle``).
        row = pg.execute(BACKEND_SQL).fetchone()
        self._backend: tuple[int, str] | None = (int(row[0]), str(row[1])) if row and row[1] else None

    def _reconnect_if_broken(self) -> None:
        if not (self._pg.broken or self._pg.closed):
            return
        self._refuse_if_closed()  # a store its owner closed stays closed
        try:
            # Invalidated, not closed: closing would first try to roll back on the dead
            # connection, and the pool logs that failure as an error with its traceback.
            if self._proxy.is_valid:  # not already invalidated by a reconnect that failed
                self._proxy.invalidate()
        except Exception:  # the old connection is already gone; nothing to release
            pass
        try:
            self._connect()
        except DBAPIError as exc:
            raise translate(exc.orig or exc) from exc
        except psycopg.Error as exc:
            raise translate(exc) from exc

    def _send_begin(self) -> None:
        """The transaction's ``BEGIN``, if still unsent (outside a pipeline: its own round
        trip; inside one: queued before what follows). Raises the driver's error."""
        if self._begin_unsent:
            self._begin_unsent = False
            self._side.execute("BEGIN", None, prepare=False)

    def _send(
        self, cur: psycopg.Cursor[Any], sql: str, args: Sequence[Any] | None = (), prepare: bool | None = True
    ) -> psycopg.Cursor[Any]:
        """``cur.execute``, after the transaction's ``BEGIN`` if that is still unsent."""
        if self._begin_unsent:
            self._send_begin()
        return cur.execute(sql, args, prepare=prepare)

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        """One statement (prepared on the server): reconnects first when idle, translates errors."""
        if self._depth == 0:
            self._reconnect_if_broken()
        try:
            return self._send(self._cur, sql, args)
        except psycopg.Error as exc:
            raise translate(exc) from exc

    def _execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        try:
            self._send_begin()
            self._cur.executemany(sql, rows)
        except psycopg.Error as exc:
            raise translate(exc) from exc

    def _scalar(self, sql: str, args: Sequence[Any]) -> Any:
        row = self._execute(sql, args).fetchone()
        return None if row is None else row[0]

    def _refuse_if_closed(self) -> None:
        if self.closed:
            raise StorageUnavailable(f"{self.where}: the store is closed")

    def _listening_connection(self) -> "psycopg.Connection[Any]":
        self._refuse_if_closed()
        proxy = self._engine.raw_connection()
        pg = proxy.driver_connection
        assert isinstance(pg, psycopg.Connection)
        proxy.detach()  # closed by the feed, not returned to SQLAlchemy
        pg.rollback()
        pg.autocommit = True
        return pg

    def close(self) -> None:
        self.closed = True
        try:
            self._proxy.close()
        except psycopg.Error:
            pass  # closing a connection the server already dropped
        self._engine.dispose()

    def backend_pid(self) -> int:
        """The server process of this store's main connection (diagnostics and fault tests:
        ``pg_terminate_backend``)."""
        return int(self._pg.info.backend_pid)

    def setting(self, name: str) -> str:
        """A server setting as this store's connection sees it (``current_setting``)."""
        return str(self._scalar("SELECT current_setting(%s)", (name,)))

    @property
    def read_only(self) -> bool:
        """A standby, or a role or database whose transactions default to read-only."""
        return self._scalar("SELECT current_setting('transaction_read_only')", ()) == "on"


class PostgresConnection:
    """The feature tables' view of the store's connection: ``execute``/``executemany`` as
    ``sqlite3`` offers them, on the store's psycopg connection. Their statements are already
    in psycopg's style (``Dialect.sql``); this reconnects when idle and translates errors."""

    def __init__(self, store: PostgresConnected) -> None:
        self._store = store

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        store = self._store
        if store._depth == 0:  # idle: a broken connection is replaced first
            store._reconnect_if_broken()
        try:
            # A cursor of its own: a feature table's read never clobbers the store's cursor.
            return store._send(store._pg.cursor(), sql, tuple(params))
        except psycopg.Error as exc:
            raise translate(exc) from exc

    def executemany(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        store = self._store
        try:
            store._send_begin()
            store._pg.cursor().executemany(sql, [tuple(p) for p in params])
        except psycopg.Error as exc:
            raise translate(exc) from exc
