"""The PostgreSQL store: ``SqliteStore``'s methods and contract on a database server.

Several gateway processes may share one database, so this module adds what SQLite's single
writer gave for free (the ordering argument is written out in spec/notice-protocol.md,
"Concurrent writers"):

- **A session's head row is its lock.** An append locks the head row (``FOR UPDATE``) before
  the sequence is taken, so the appends to one session commit in sequence order and its head
  only grows (INV7). Every other write that decides from a cursor (seed, drain, sweep,
  expire, reset, delete) first locks the head rows of the targets involved, in key order,
  and only then reads the cursors, so a decision never rests on a cursor or a log that
  another transaction is about to change.
- Each statement runs on the raw psycopg connection; the hot ones are constant strings
  prepared on the server once per connection. SQLModel declares the tables (``create_all``
  through SQLAlchemy's ``postgresql+psycopg`` dialect, run by ``postgres_schema``, which also
  keeps the schema version and runs the migrations); the SQL that differs from SQLite's
  lives here and there.
- Driver errors leave as ``StorageError`` subclasses with the driver's error as the cause;
  a connection that broke is replaced at the start of the next transaction.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable
from typing import Any, Iterable, NamedTuple, Sequence, cast

import psycopg
from psycopg import errors as pg_errors
from sqlalchemy import create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool
from sqlmodel import SQLModel

from ..errors import (
    InvalidDatabaseUrl,
    StorageConflict,
    StorageError,
    StorageFull,
    StorageUnavailable,
    UnknownSession,
    UnsupportedBackend,
)
from . import postgres_schema, tables  # noqa: F401  (tables registers every table module)
from .runs import SqliteRunTable
from .postgres_feed import NotifiedEvent, PostgresChangeFeed, channel_for, encode_changes, notify_prefix, notify_statement
from .serving import SqliteServingTable
from .session_meta import SqliteMetadataTable
from .transcripts import SqliteTranscriptTable
from .upstream_links import SqliteUpstreamLinkTable
from .sqlite import (
    SYNCHRONOUS_LEVELS,
    PruneObserver,
    CursorRecord,
    EventRecord,
    Head,
    PositionsTuple,
    SessionRecord,
)
from .records import VacuumReport

log = logging.getLogger("sessionstate")

SCHEMES = ("postgresql+psycopg", "postgresql", "postgres")
# Smaller than SQLite's 2,000: a chunk's transaction holds the row locks of the heads it
# touches until it commits, and a server-side delete maintains four indexes per row.
PRUNE_CHUNK_ROWS = 250
CONNECT_TIMEOUT_SECONDS = 10
# Durability per ``synchronous`` level, set on every connection of the store. NORMAL (the
# default) is ``on`` too: a server tuned to ``synchronous_commit = off`` acknowledges a commit
# before its WAL is written, and an immediate restart then lost acknowledged events and
# reissued their sequences (issue 20). ``OFF`` is the faster mode, asked for by name.
_SYNCHRONOUS_COMMIT = {"OFF": "off", "NORMAL": "on", "FULL": "on", "EXTRA": "on"}

_EVENT_COLUMNS = (
    "session_key, agent_id, kind, actor_type, actor_id, run_id, summary, payload,"
    " occurred_at, recorded_at, dedupe_key"
)
LOCK_HEAD_SQL = (
    "SELECT last_sequence FROM session_state_heads"
    " WHERE session_key = %s AND agent_id = %s FOR UPDATE"
)
DEDUPE_SQL = "SELECT sequence FROM session_state_events WHERE dedupe_key = %s"
# The head bump both append statements end with.
_BUMP_HEAD = (
    " UPDATE session_state_heads h SET last_sequence = inserted.sequence, updated_at = %s"
    " FROM inserted WHERE h.session_key = %s AND h.agent_id = %s RETURNING inserted.sequence"
)
# Runs after LOCK_HEAD_SQL in the same transaction: the sequence is taken under the head's
# lock. ON CONFLICT covers a dedupe key committed by a transaction on another session after
# the DEDUPE_SQL check (no row comes back; the caller reads the winner's sequence).
APPEND_SQL = (
    f"WITH inserted AS (INSERT INTO session_state_events ({_EVENT_COLUMNS})"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (dedupe_key) DO NOTHING RETURNING sequence)" + _BUMP_HEAD
)
# The first append to a session in a transaction, without a dedupe key: the head lock and the
# append in one statement, one round trip fewer (spec section 16, C1). The inserted row is
# produced by the locked head row, so its sequence is taken after the lock is held; no head
# row means nothing is inserted and nothing comes back. Arguments: the head's key twice, then
# APPEND_SQL's.
LOCK_AND_APPEND_SQL = (
    "WITH locked AS (SELECT 1 FROM session_state_heads"
    " WHERE session_key = %s AND agent_id = %s FOR UPDATE),"
    f" inserted AS (INSERT INTO session_state_events ({_EVENT_COLUMNS})"
    " SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s::float8, %s::float8, %s FROM locked"
    " RETURNING sequence)" + _BUMP_HEAD
)
HEAD_SQL = (
    "SELECT last_sequence, pruned_max_sequence FROM session_state_heads"
    " WHERE session_key = %s AND agent_id = %s"
)
# The heads of several targets, locked in key order (one order everywhere: no deadlock
# between two such statements).
LOCK_HEADS_SQL = (
    "SELECT session_key, agent_id FROM session_state_heads"
    " WHERE (session_key, agent_id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
    " ORDER BY session_key, agent_id FOR UPDATE"
)
# The reconciliation page (contract.EventPageRow). The server rounds each occurred_at to whole
# microseconds as timefmt.iso_millis does (trunc is exact, the fraction times 10**6 is the same
# IEEE product, round(float8) is rint: half-even), so Python only formats text
# (timefmt.iso_micros). Beyond +-10**12 s the bigint product could overflow: those rows carry
# the raw float in the last column instead and Python rounds them.
_OCCURRED_IN_RANGE = "abs(occurred_at) < 1e12::float8"
EVENT_PAGE_SQL = (
    f"SELECT sequence, kind, actor_type, CASE WHEN {_OCCURRED_IN_RANGE}"
    " THEN trunc(occurred_at)::bigint * 1000000"
    " + round((occurred_at - trunc(occurred_at)) * 1000000::float8)::bigint END,"
    " summary, actor_id, run_id, payload,"
    f" CASE WHEN NOT {_OCCURRED_IN_RANGE} THEN occurred_at END"
    " FROM session_state_events WHERE session_key = %s AND agent_id = %s AND sequence > %s"
    " ORDER BY sequence LIMIT %s"
)
EARLIEST_SQL = (
    "SELECT min(sequence) FROM session_state_events WHERE session_key = %s AND agent_id = %s"
)
CAUGHT_UP_WATCHERS_SQL = (
    "SELECT watcher_session_key, last_seen_sequence, notified_sequence, material_sequence"
    " FROM session_watch_cursors WHERE target_session_key = %s AND target_agent_id = %s"
    " AND notified_sequence = last_seen_sequence"
)
PUT_CURSOR_SQL = (
    "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key,"
    " target_agent_id, last_seen_sequence, notified_sequence, material_sequence, updated_at)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (watcher_session_key, target_session_key, target_agent_id)"
    " DO UPDATE SET last_seen_sequence = excluded.last_seen_sequence,"
    " notified_sequence = excluded.notified_sequence,"
    " material_sequence = excluded.material_sequence, updated_at = excluded.updated_at"
)
# Up to this many cursor upserts go in one statement, one round trip with its plan prepared
# once per row count: three rows take ~100 µs that way against ~145 µs through executemany's
# pipeline. A larger freeze (rare) uses executemany, so the statement texts stay few.
PUT_CURSORS_MAX_ROWS = 16
_CURSOR_ROW = "(%s, %s, %s, %s, %s, %s, %s)"


@functools.lru_cache(maxsize=PUT_CURSORS_MAX_ROWS)
def put_cursors_sql(rows: int) -> str:
    """``PUT_CURSOR_SQL`` for ``rows`` rows at once (their watchers distinct)."""
    return PUT_CURSOR_SQL.replace("VALUES " + _CURSOR_ROW, "VALUES " + ", ".join([_CURSOR_ROW] * rows), 1)


HAS_WATCHERS_SQL = (
    "SELECT 1 FROM session_watch_cursors WHERE target_session_key = %s AND target_agent_id = %s LIMIT 1"
)
# Cursor provenance (spec R25, R26): written by seeds, read where a wake is decided.
SET_PROVENANCE_SQL = (
    "UPDATE session_watch_cursors SET provenance = %s WHERE watcher_session_key = %s"
    " AND target_session_key = %s AND target_agent_id = %s"
)
PROMOTE_ONLY_CONDITION = " AND provenance = 'ambient'"
PROVENANCE_SQL = (
    "SELECT provenance FROM session_watch_cursors WHERE watcher_session_key = %s"
    " AND target_session_key = %s AND target_agent_id = %s"
)
DELETE_CURSOR_SQL = (
    "DELETE FROM session_watch_cursors WHERE watcher_session_key = %s"
    " AND target_session_key = %s AND target_agent_id = %s"
)
_SESSION_COLUMNS = "session_key, agent_id, kind, parent_key, parent_agent_id, label, created_at, updated_at"

# Which cursors each list read returns (with %s arguments); the same condition names the
# heads to lock first when the read serves a transition.
_HELD_BY = "c.watcher_session_key = %s"
_NAMING = "(c.watcher_session_key = %s OR (c.target_session_key = %s AND c.target_agent_id = %s))"
_BEHIND = (
    "c.notified_sequence > c.last_seen_sequence"
    " AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_key = c.watcher_session_key)"
)
_EXPIRED = (
    "c.updated_at < %s AND coalesce((SELECT h.updated_at FROM session_state_heads h"
    " WHERE h.session_key = c.target_session_key AND h.agent_id = c.target_agent_id), 0) < %s"
)
_ORDER = " ORDER BY c.watcher_session_key, c.target_session_key, c.target_agent_id"

Target = tuple[str, str]


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


class PostgresStore:
    """Durable signal log, heads, cursors and session registry in a PostgreSQL database."""

    path = None  # no file behind it

    def __init__(
        self, url: str, *, notifying_kinds: Iterable[str], synchronous: str = "NORMAL", create: bool = True
    ) -> None:
        """Connect to the database at ``url``; create the missing tables only when ``create``
        (without it, a database without them raises ``StorageUnavailable``)."""
        if not isinstance(synchronous, str) or synchronous.upper() not in SYNCHRONOUS_LEVELS:
            raise UnsupportedBackend(f"synchronous must be one of {SYNCHRONOUS_LEVELS}")
        parsed = postgres_url(url)
        self.url = url
        self.where = parsed.render_as_string(hide_password=True)
        self.closed = False
        self._synchronous_commit = _SYNCHRONOUS_COMMIT[synchronous.upper()]
        connect_args: dict[str, Any] = {}
        if "application_name" not in parsed.query:  # the URL's own passes to libpq as given
            connect_args["application_name"] = "sessionstate"
        if "connect_timeout" not in parsed.query:
            connect_args["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
        self._engine = create_engine(parsed, poolclass=NullPool, connect_args=connect_args)
        self._depth = 0
        self._locked: set[Target] = set()  # head rows this transaction holds
        self._notifying_kinds = frozenset(notifying_kinds)
        self._build_statements(sorted(self._notifying_kinds))
        # R22: what this transaction must tell the other servers, sent with its commit.
        self._changed_watchers: list[str] = []
        self._notified_events: list[NotifiedEvent] = []
        try:
            self._create_schema(create)
            self._connect()
        except DBAPIError as exc:
            self._engine.dispose()
            raise _translate(exc.orig or exc) from exc
        except psycopg.Error as exc:
            self._engine.dispose()
            raise _translate(exc) from exc
        self.db = QmarkConnection(self)
        self._after_commit: list[Callable[[], object]] = []
        # Runner threads share this one connection: the lock serialises them.
        self.lock = threading.RLock()
        # The feature tables' SQL runs on both backends (QmarkConnection translates the rest).
        db = cast(Any, self.db)
        self.meta = SqliteMetadataTable(db, self.storage_error)
        self.runs = SqliteRunTable(db, self.storage_error)
        self.transcripts = SqliteTranscriptTable(db, self.storage_error)
        self.links = SqliteUpstreamLinkTable(db, self.transaction, self.storage_error)
        self.serving = PostgresServingTable(self, db, self.storage_error)
        self.channel = channel_for(str(self._scalar("SELECT current_schema()", ())))
        self._notify_prefix = notify_prefix(self.channel)

    def _build_statements(self, notifying_kinds: Sequence[str]) -> None:
        kinds = ", ".join("'" + k.replace("'", "''") + "'" for k in notifying_kinds) or "NULL"
        # R7: a pending cursor's effective material watermark (see SqliteStore).
        self._effective_material = f"""
            CASE WHEN c.notified_sequence > c.last_seen_sequence THEN GREATEST(
                c.material_sequence,
                coalesce((SELECT max(e.sequence) FROM session_state_events e
                          WHERE e.session_key = c.target_session_key
                            AND e.agent_id = c.target_agent_id
                            AND e.sequence > c.notified_sequence
                            AND e.kind IN ({kinds})
                            AND (e.actor_id IS NULL OR e.actor_id <> c.watcher_session_key)),
                         0))
            ELSE c.material_sequence END"""
        columns = (
            "c.watcher_session_key, c.target_session_key, c.target_agent_id,"
            f" c.last_seen_sequence, c.notified_sequence, {self._effective_material}, c.updated_at,"
            " c.provenance"
        )
        self._cursor_sql = (
            f"SELECT {columns} FROM session_watch_cursors c WHERE c.watcher_session_key = %s"
            " AND c.target_session_key = %s AND c.target_agent_id = %s"
        )
        self._cursors_where = f"SELECT {columns} FROM session_watch_cursors c WHERE "
        self._targets_where = (
            "SELECT DISTINCT c.target_session_key, c.target_agent_id FROM session_watch_cursors c WHERE "
        )
        self._write_back_sql = (
            f"UPDATE session_watch_cursors AS c SET material_sequence = {self._effective_material}"
            " WHERE c.target_session_key = %s AND c.target_agent_id = %s"
            " AND c.notified_sequence > c.last_seen_sequence"
        )

    def _create_schema(self, create: bool) -> None:
        """Check, migrate and create the schema (``postgres_schema.prepare``) in one
        transaction under an advisory lock, so concurrent first opens do not collide."""
        with self._engine.begin() as conn:
            # The schema's commit is as durable as the store's (a server may default to off).
            conn.exec_driver_sql(f"SET LOCAL synchronous_commit = {self._synchronous_commit}")
            postgres_schema.prepare(conn, self.where, create=create)

    def _connect(self) -> None:
        self._proxy = self._engine.raw_connection()
        pg = self._proxy.driver_connection
        assert isinstance(pg, psycopg.Connection)
        pg.rollback()  # the dialect's first-connect queries may have opened one
        pg.autocommit = True  # transactions are explicit: see atomic()
        pg.execute("SET standard_conforming_strings = on")  # the NOTIFY literals rely on it
        pg.execute(f"SET synchronous_commit = {self._synchronous_commit}")
        self._pg: psycopg.Connection[Any] = pg
        self._cur = pg.cursor()

    def _reconnect_if_broken(self) -> None:
        if not (self._pg.broken or self._pg.closed):
            return
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
            raise _translate(exc.orig or exc) from exc
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        """One statement outside the hot path: reconnects first when idle, translates errors."""
        if self._depth == 0:
            self._reconnect_if_broken()
        try:
            return self._cur.execute(sql, args, prepare=True)
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    # -- R22: telling other servers ---------------------------------------------------------

    def note_changed_watchers(self, watchers: Iterable[str]) -> None:
        """Name ``watchers`` in this transaction's notification (at once outside one)."""
        self._changed_watchers.extend(watchers)
        if not self._depth and self._changed_watchers:
            notify = self._take_notifications()
            if notify:
                self._execute(notify)

    def _take_notifications(self) -> str:
        """The ``NOTIFY`` statements for this transaction's changes ('' when none); clears them."""
        if not (self._changed_watchers or self._notified_events):
            return ""
        payloads = encode_changes(self._changed_watchers, self._notified_events)
        self._changed_watchers, self._notified_events = [], []
        return "".join(notify_statement(self._notify_prefix, p) + "; " for p in payloads)

    def _listening_connection(self) -> "psycopg.Connection[Any]":
        proxy = self._engine.raw_connection()
        pg = proxy.driver_connection
        assert isinstance(pg, psycopg.Connection)
        proxy.detach()  # closed by the feed, not returned to SQLAlchemy
        pg.rollback()
        pg.autocommit = True
        return pg

    def open_change_feed(self, kinds: tuple[str, ...]) -> PostgresChangeFeed:
        """R22: a listening connection of its own on this schema's channel."""
        try:
            return PostgresChangeFeed(self._listening_connection, self.channel, self.serving, self.storage_error)
        except DBAPIError as exc:
            raise _translate(exc.orig or exc) from exc

    def storage_error(self, exc: BaseException) -> StorageError:
        """The ``StorageError`` for a driver failure on this database (the feature stores'
        translation calls it)."""
        if self.closed:
            return StorageUnavailable(f"{self.where}: the store is closed")
        if isinstance(exc, StorageError):
            return exc
        return _translate(exc)

    # -- lifecycle and transactions ---------------------------------------------------------

    def close(self) -> None:
        self.closed = True
        try:
            self._proxy.close()
        except psycopg.Error:
            pass  # closing a connection the server already dropped
        self._engine.dispose()

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

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

    def transaction(self) -> "_Transaction":
        """The unit of work: holds ``lock``; ``BEGIN``/``COMMIT`` at depth 0, a savepoint when
        nested; rolls back and re-raises on error, a driver error as ``StorageError``."""
        return _Transaction(self)

    atomic = transaction

    def after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` after the outermost commit (at once outside a transaction);
        dropped if the transaction, or the savepoint it was registered in, rolls back."""
        if self._depth:
            self._after_commit.append(callback)
        else:
            callback()

    # -- sessions ---------------------------------------------------------------------------

    def insert_session(self, record: SessionRecord) -> None:
        # A duplicate (another process created it first) fails on the primary key: the
        # transaction turns that into a StorageError, as on SQLite.
        self._cur.execute(
            f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            record, prepare=True,
        )
        self._cur.execute(
            "INSERT INTO session_state_heads (session_key, agent_id, last_sequence,"
            " pruned_max_sequence, updated_at) VALUES (%s, %s, 0, 0, %s)"
            " ON CONFLICT (session_key, agent_id) DO NOTHING",
            (record.session_key, record.agent_id, record.created_at), prepare=True,
        )

    def get_session(self, key: str, agent_id: str) -> SessionRecord | None:
        row = self._execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_key = %s AND agent_id = %s",
            (key, agent_id),
        ).fetchone()
        return SessionRecord(*row) if row else None

    def agents_with_session_key(self, key: str) -> list[str]:
        rows = self._execute(
            "SELECT agent_id FROM sessions WHERE session_key = %s ORDER BY agent_id", (key,)
        ).fetchall()
        return [r[0] for r in rows]

    def list_sessions(self) -> list[SessionRecord]:
        rows = self._execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions ORDER BY created_at, session_key"
        ).fetchall()
        return [SessionRecord(*r) for r in rows]

    def delete_session_data(self, key: str, agent_id: str) -> int:
        """Remove a session's events, head and registry row, and unlink its children;
        returns the number of events removed."""
        args = (key, agent_id)
        self._lock_heads([args])
        removed = self._execute(
            "DELETE FROM session_state_events WHERE session_key = %s AND agent_id = %s", args
        ).rowcount
        self._execute("DELETE FROM session_state_heads WHERE session_key = %s AND agent_id = %s", args)
        self._execute("DELETE FROM sessions WHERE session_key = %s AND agent_id = %s", args)
        self._execute(
            "UPDATE sessions SET parent_key = NULL, parent_agent_id = NULL"
            " WHERE parent_key = %s AND parent_agent_id = %s",
            args,
        )
        return int(removed)

    # -- the signal log ---------------------------------------------------------------------

    def append_event(
        self,
        key: str,
        agent_id: str,
        kind: str,
        actor_type: str,
        actor_id: str | None,
        run_id: str | None,
        summary: str,
        payload: str | None,
        occurred_at: float,
        recorded_at: float,
        dedupe_key: str | None,
    ) -> tuple[int, bool]:
        """Append one event and bump its head; ``(sequence, inserted)``.

        Must run inside ``atomic()``. The head row is locked first (its absence raises
        ``UnknownSession``), then the dedupe key is looked up, then the row is inserted with a
        sequence taken under that lock. Without a dedupe key the first append to a session in
        a transaction locks and inserts in one statement (``LOCK_AND_APPEND_SQL``).
        """
        cur = self._cur
        target = (key, agent_id)
        append_args = (key, agent_id, kind, actor_type, actor_id, run_id, summary, payload, occurred_at,
                       recorded_at, dedupe_key, recorded_at, key, agent_id)
        if target not in self._locked and dedupe_key is None:
            row = cur.execute(LOCK_AND_APPEND_SQL, target + append_args, prepare=True).fetchone()
            if row is None:
                raise UnknownSession(f"unknown session {key!r} (agent {agent_id!r})")
            self._locked.add(target)
            return self._appended(key, agent_id, kind, actor_id, int(row[0]))
        if target not in self._locked:
            if cur.execute(LOCK_HEAD_SQL, target, prepare=True).fetchone() is None:
                raise UnknownSession(f"unknown session {key!r} (agent {agent_id!r})")
            self._locked.add(target)
        if dedupe_key is not None:
            existing = cur.execute(DEDUPE_SQL, (dedupe_key,), prepare=True).fetchone()
            if existing is not None:
                return int(existing[0]), False
        row = cur.execute(APPEND_SQL, append_args, prepare=True).fetchone()
        if row is None:  # the dedupe key was committed meanwhile by a writer on another session
            winner = None if dedupe_key is None else cur.execute(DEDUPE_SQL, (dedupe_key,), prepare=True).fetchone()
            if winner is None:  # no head row to bump (the caller rolls the insert back)
                raise UnknownSession(f"unknown session {key!r} (agent {agent_id!r})")
            return int(winner[0]), False
        return self._appended(key, agent_id, kind, actor_id, int(row[0]))

    def _appended(self, key: str, agent_id: str, kind: str, actor_id: str | None, sequence: int) -> tuple[int, bool]:
        if kind in self._notifying_kinds:
            self._notified_events.append((key, agent_id, actor_id, sequence))
        return sequence, True

    def head(self, key: str, agent_id: str) -> Head | None:
        """The head; inside a transaction its row is locked first (a seed reads it)."""
        if self._depth:
            self._lock_heads([(key, agent_id)])
        row = self._execute(HEAD_SQL, (key, agent_id)).fetchone()
        return Head(int(row[0]), int(row[1])) if row else None

    def events_after(self, key: str, agent_id: str, after: int, limit: int) -> list[EventRecord]:
        rows = self._execute(
            f"SELECT sequence, {_EVENT_COLUMNS} FROM session_state_events"
            " WHERE session_key = %s AND agent_id = %s AND sequence > %s"
            " ORDER BY sequence LIMIT %s",
            (key, agent_id, after, limit),
        ).fetchall()
        return [EventRecord(*r) for r in rows]

    def event_page(self, key: str, agent_id: str, after: int, limit: int) -> list[tuple[Any, ...]]:
        """The reconciliation page (see ``SqliteStore.event_page``)."""
        return self._execute(EVENT_PAGE_SQL, (key, agent_id, after, limit)).fetchall()

    def earliest_sequence(self, key: str, agent_id: str) -> int | None:
        row = self._execute(EARLIEST_SQL, (key, agent_id)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def sequence_high_water(self) -> int:
        """The largest sequence ever assigned (pruned or deleted ones included); 0 before any."""
        return int(self._scalar(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM session_state_events_sequence_seq", ()
        ) or 0)

    def event_count(self) -> int:
        return int(self._scalar("SELECT count(*) FROM session_state_events", ()))

    # -- cursors ----------------------------------------------------------------------------

    def cursor(self, watcher: str, target_key: str, target_agent_id: str) -> CursorRecord | None:
        """A cursor with its effective positions; inside a transaction the target's head is
        locked before the read (the caller is about to fire a transition on it)."""
        if self._depth:
            self._lock_heads([(target_key, target_agent_id)])
        row = self._execute(self._cursor_sql, (watcher, target_key, target_agent_id)).fetchone()
        return _cursor_record(row) if row else None

    def caught_up_watchers(self, target_key: str, target_agent_id: str) -> list[tuple[str, PositionsTuple]]:
        """Watchers of a target whose cursor is caught up (the partial index serves this);
        called after ``append_event`` locked the target's head."""
        rows = self._cur.execute(CAUGHT_UP_WATCHERS_SQL, (target_key, target_agent_id), prepare=True).fetchall()
        return [(r[0], (int(r[1]), int(r[2]), int(r[3]))) for r in rows]

    def cursors_behind(self) -> list[CursorRecord]:
        """Cursors with a notice owed whose watcher exists. Inside a transaction (the sweep),
        those whose target was not locked first are left out instead of locked out of key
        order: they became owed after the lock, and their notice was queued where they froze."""
        return self._cursors(_BEHIND, (), extend=False)

    def cursors_held_by(self, watcher: str) -> list[CursorRecord]:
        return self._cursors(_HELD_BY, (watcher,))

    def pending_cursors_held_by(self, watcher: str) -> list[CursorRecord]:
        return self._cursors(_HELD_BY + " AND c.notified_sequence > c.last_seen_sequence", (watcher,))

    def cursors_naming(self, key: str, agent_id: str) -> list[CursorRecord]:
        # The session's own head joins the ordered lock: delete_session_data removes it.
        return self._cursors(_NAMING, (key, key, agent_id), also_lock=[(key, agent_id)])

    def all_cursors(self) -> list[CursorRecord]:
        return self._cursors("TRUE", ())

    def expired_cursors(self, cutoff: float) -> list[CursorRecord]:
        """Cursors whose row and whose target's head were both last updated before cutoff."""
        return self._cursors(_EXPIRED, (cutoff, cutoff))

    def _cursors(
        self, condition: str, args: tuple[Any, ...], also_lock: Sequence[Target] = (), extend: bool = True
    ) -> list[CursorRecord]:
        """The cursors matching ``condition``; inside a transaction their targets' heads (and
        ``also_lock``) are locked first, in key order. A cursor that started to match between
        the lock and the read (on a target not locked yet) has its head locked too, and the
        read runs again."""
        read_sql = self._cursors_where + condition + _ORDER
        if not self._depth:
            return [_cursor_record(r) for r in self._execute(read_sql, args).fetchall()]
        targets = self._execute(self._targets_where + condition, args).fetchall()
        headless = self._lock_heads([(t[0], t[1]) for t in targets] + list(also_lock))
        while True:
            records = [_cursor_record(r) for r in self._execute(read_sql, args).fetchall()]
            missing = {(r.target_key, r.target_agent_id) for r in records} - self._locked - headless
            if not missing:
                return records
            if not extend:
                return [r for r in records if (r.target_key, r.target_agent_id) not in missing]
            headless |= self._lock_heads(sorted(missing))

    def put_cursors(
        self,
        target_key: str,
        target_agent_id: str,
        changes: Sequence[tuple[str, PositionsTuple | None]],
        now: float,
    ) -> None:
        """Write new positions (insert or update) or delete (``None``) for watchers of a target."""
        cur = self._cur
        upserts = [
            (watcher, target_key, target_agent_id, p[0], p[1], p[2], now)
            for watcher, p in changes
            if p is not None
        ]
        deletes = [(w, target_key, target_agent_id) for w, p in changes if p is None]
        if len(upserts) == 1:
            cur.execute(PUT_CURSOR_SQL, upserts[0], prepare=True)
        elif 1 < len(upserts) <= PUT_CURSORS_MAX_ROWS:
            if len({u[0] for u in upserts}) < len(upserts):  # one statement may not upsert a row twice
                upserts = list({u[0]: u for u in upserts}.values())  # the last write wins, as in order
            cur.execute(put_cursors_sql(len(upserts)), [v for u in upserts for v in u], prepare=True)
        elif upserts:
            cur.executemany(PUT_CURSOR_SQL, upserts)
        if deletes:
            cur.executemany(DELETE_CURSOR_SQL, deletes)

    def has_watchers(self, target_key: str, target_agent_id: str) -> bool:
        """R24: whether any cursor targets the session (the target index serves this)."""
        return self._execute(HAS_WATCHERS_SQL, (target_key, target_agent_id)).fetchone() is not None

    def set_provenance(
        self, watcher: str, target_key: str, target_agent_id: str, provenance: str, *, promote_only: bool
    ) -> bool:
        """R25: the cursor's provenance; ``promote_only`` writes only over ``ambient``. Runs in
        the seed's transaction, which already locked the target's head."""
        sql = SET_PROVENANCE_SQL + (PROMOTE_ONLY_CONDITION if promote_only else "")
        return self._execute(sql, (provenance, watcher, target_key, target_agent_id)).rowcount > 0

    def cursor_provenance(self, watcher: str, target_key: str, target_agent_id: str) -> str | None:
        """R26: the pair's provenance (``None``: no cursor), read where a wake is decided."""
        row = self._execute(PROVENANCE_SQL, (watcher, target_key, target_agent_id)).fetchone()
        return None if row is None else str(row[0])

    def lock_watcher_targets(self, watcher: str) -> None:
        """Lock, in key order, the heads of every target ``watcher`` holds a cursor on (a drain
        is about to read and acknowledge its pending cursors)."""
        targets = self._execute(self._targets_where + _HELD_BY, (watcher,)).fetchall()
        self._lock_heads([(t[0], t[1]) for t in targets])

    def lock_targets(self, targets: Iterable[Target]) -> None:
        """Lock the head rows of ``targets`` in key order before a transaction that will touch
        several of them (one order everywhere: two such transactions cannot deadlock)."""
        self._lock_heads(list(targets))

    def _lock_heads(self, targets: Sequence[Target]) -> set[Target]:
        """Lock the head rows of ``targets`` (in key order) unless this transaction holds them;
        returns the targets that have no head row (nothing to lock: no such session)."""
        wanted = sorted(set(targets) - self._locked)
        if not wanted:
            return set()
        keys, agents = [t[0] for t in wanted], [t[1] for t in wanted]
        locked = {(r[0], r[1]) for r in self._execute(LOCK_HEADS_SQL, (keys, agents)).fetchall()}
        self._locked |= locked
        return set(wanted) - locked

    # -- retention --------------------------------------------------------------------------

    def prune_events(
        self, cutoff: float, max_rows: int, chunk_rows: int = PRUNE_CHUNK_ROWS, on_chunk: PruneObserver | None = None
    ) -> dict[str, int]:
        """Delete events beyond the newest ``max_rows`` and those recorded before ``cutoff``.

        The same two passes as ``SqliteStore.prune_events``, in chunks of ``chunk_rows``
        (250 here: see ``PRUNE_CHUNK_ROWS``). Each chunk is one
        transaction: it locks the heads of the sessions it touches (key order), raises their
        pruned watermark (R13), writes the effective material watermark of their pending
        cursors (R7), and only then deletes their rows in the range. Events of a session that
        only became visible after the heads were locked are left for the next chunk, so the
        watermark always covers what a chunk deletes.
        """
        beyond = self._scalar(
            "SELECT sequence FROM session_state_events ORDER BY sequence DESC LIMIT 1 OFFSET %s",
            (max_rows,),
        )
        deleted = chunks = 0
        while beyond is not None:
            bound = self._scalar(
                "SELECT sequence FROM session_state_events WHERE sequence <= %s"
                " ORDER BY sequence LIMIT 1 OFFSET %s",
                (beyond, chunk_rows - 1),
            )
            count = self._prune_chunk("sequence <= %s", beyond if bound is None else bound, on_chunk)
            if not count:
                break
            deleted, chunks = deleted + count, chunks + 1
        while True:
            bound = self._scalar(
                "SELECT recorded_at FROM session_state_events WHERE recorded_at < %s"
                " ORDER BY recorded_at LIMIT 1 OFFSET %s",
                (cutoff, chunk_rows - 1),
            )
            if bound is None:
                count = self._prune_chunk("recorded_at < %s", cutoff, on_chunk)
            else:
                count = self._prune_chunk("recorded_at <= %s", bound, on_chunk)
            if not count:
                break
            deleted, chunks = deleted + count, chunks + 1
        return {"events": deleted, "chunks": chunks}

    def _prune_chunk(self, where: str, bound: float, on_chunk: PruneObserver | None = None) -> int:
        with self.atomic():
            sessions = self._execute(
                f"SELECT DISTINCT session_key, agent_id FROM session_state_events WHERE {where}",
                (bound,),
            ).fetchall()
            if not sessions:
                return 0
            keys, agents = [s[0] for s in sessions], [s[1] for s in sessions]
            self._lock_heads([(s[0], s[1]) for s in sessions])
            # With the heads locked no append to these sessions is in flight: what matches now
            # is exactly what the DELETE below removes.
            in_sessions = "(session_key, agent_id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
            affected = self._execute(
                f"SELECT session_key, agent_id, max(sequence) FROM session_state_events"
                f" WHERE {where} AND {in_sessions} GROUP BY session_key, agent_id"
                " ORDER BY session_key, agent_id",
                (bound, keys, agents),
            ).fetchall()
            cur = self._cur
            cur.executemany(
                "UPDATE session_state_heads SET pruned_max_sequence = GREATEST(pruned_max_sequence, %s)"
                " WHERE session_key = %s AND agent_id = %s",
                [(m, k, a) for k, a, m in affected],
            )
            cur.executemany(self._write_back_sql, [(k, a) for k, a, _ in affected])
            deleted = int(self._execute(
                f"DELETE FROM session_state_events WHERE {where} AND {in_sessions}",
                (bound, keys, agents),
            ).rowcount)
            if on_chunk is not None:  # the trace's view of what this chunk wrote
                heads = [(k, a, int(self._scalar(
                    "SELECT pruned_max_sequence FROM session_state_heads WHERE session_key = %s AND agent_id = %s",
                    (k, a)) or 0)) for k, a, _ in affected]
                cursors = [
                    (r[0], r[1], r[2], (int(r[3]), int(r[4]), int(r[5])))
                    for k, a, _ in affected
                    for r in self._execute(
                        "SELECT watcher_session_key, target_session_key, target_agent_id,"
                        " last_seen_sequence, notified_sequence, material_sequence"
                        " FROM session_watch_cursors WHERE target_session_key = %s AND target_agent_id = %s"
                        " AND notified_sequence > last_seen_sequence ORDER BY watcher_session_key",
                        (k, a),
                    ).fetchall()
                ]
                on_chunk(heads, cursors, deleted)
            return deleted

    def reclaim_free_pages(self) -> int:
        """0: on PostgreSQL the server's autovacuum makes the space of deleted rows reusable
        (nothing to do here, and no exclusive lock is ever taken for it)."""
        return 0

    def vacuum(self) -> VacuumReport:
        """``VACUUM (FULL, ANALYZE)`` of this store's tables: each is rewritten compactly and
        its freed space given back to the file system, under an ``ACCESS EXCLUSIVE`` lock on
        that table for its rewrite (other processes' statements on it wait). Not needed in
        normal operation: the server's autovacuum makes deleted rows' space reusable; this is
        the operator's way to shrink the database after a large prune."""
        if self._depth:
            raise StorageUnavailable(f"{self.where}: vacuum cannot run inside a transaction")
        names = [table.name for table in SQLModel.metadata.sorted_tables]
        size_sql = "SELECT coalesce(sum(pg_total_relation_size(to_regclass(t))), 0) FROM unnest(%s::text[]) t"
        before = int(self._scalar(size_sql, (names,)))
        try:  # VACUUM runs outside a transaction block: the connection is in autocommit here
            self._pg.execute("VACUUM (FULL, ANALYZE) " + ", ".join(names))
        except psycopg.Error as exc:
            raise _translate(exc) from exc
        after = int(self._scalar(size_sql, (names,)))
        return VacuumReport(
            before, after,
            f"VACUUM (FULL, ANALYZE) of {len(names)} tables; the server's autovacuum keeps"
            " reusing the space of later deletions",
        )

    def _scalar(self, sql: str, args: Sequence[Any]) -> Any:
        row = self._execute(sql, args).fetchone()
        return None if row is None else row[0]

    # -- inspection -------------------------------------------------------------------------

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every core table, in a stable order (tests compare before and after)."""
        tables = {
            "sessions": "session_key, agent_id",
            "session_state_events": "sequence",
            "session_state_heads": "session_key, agent_id",
            "session_watch_cursors": "watcher_session_key, target_session_key, target_agent_id",
        }
        return {
            name: self._execute(f"SELECT * FROM {name} ORDER BY {order}").fetchall()
            for name, order in tables.items()
        }

    def integrity_check(self) -> str:
        """``ok``, or what is wrong: the server checks pages itself, so this checks the log
        against the heads (every event at or below its session's head, INV7)."""
        above = self._scalar(
            "SELECT count(*) FROM session_state_events e LEFT JOIN session_state_heads h"
            " ON h.session_key = e.session_key AND h.agent_id = e.agent_id"
            " WHERE h.session_key IS NULL OR e.sequence > h.last_sequence",
            (),
        )
        return "ok" if not above else f"{above} event(s) above their session's head or without one"


class _Transaction:
    """``BEGIN``/``COMMIT`` at depth 0, ``SAVEPOINT``/``RELEASE`` when nested, under the
    store's lock; driver errors leave as ``StorageError``. Row locks taken inside a savepoint
    that rolls back are released by the server, so the store's record of held head locks is
    restored with it, and so are the after-commit callbacks registered inside it."""

    __slots__ = ("_store", "_name", "_locked_before", "_mark", "_notify_marks")

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._name = ""
        self._locked_before: set[Target] = set()
        self._mark = 0
        self._notify_marks = (0, 0)

    def __enter__(self) -> None:
        store = self._store
        store.lock.acquire()
        try:
            if store._depth == 0:
                store._reconnect_if_broken()
                _run(store, "BEGIN")
            else:
                self._name = f"sp{store._depth}"
                self._locked_before = set(store._locked)
                self._mark = len(store._after_commit)
                self._notify_marks = (len(store._changed_watchers), len(store._notified_events))
                _run(store, f"SAVEPOINT {self._name}")
        except BaseException:
            store.lock.release()
            raise
        store._depth += 1

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        store = self._store
        store._depth -= 1
        try:
            if exc_type is None:
                if self._name:
                    _run(store, "RELEASE " + self._name)
                    return
                store._locked.clear()
                callbacks, store._after_commit = store._after_commit, []
                # R22: the notification goes with the commit, in the same round trip.
                notify = store._take_notifications()
                try:
                    _run(store, notify + "COMMIT", committing=True)
                except StorageError:
                    if notify:  # a failed NOTIFY leaves the transaction open and aborted
                        try:
                            store._pg.execute("ROLLBACK")
                        except psycopg.Error:
                            pass  # the connection is gone: the server rolled back
                    raise
                for callback in callbacks:
                    try:
                        callback()
                    except Exception:  # the data is committed: one bad callback must not hide it
                        log.exception("an after-commit callback failed")
                return
            if self._name:
                store._locked = self._locked_before
                del store._after_commit[self._mark:]
                del store._changed_watchers[self._notify_marks[0]:]
                del store._notified_events[self._notify_marks[1]:]
                try:
                    store._pg.execute(f"ROLLBACK TO {self._name}")
                    store._pg.execute(f"RELEASE {self._name}")
                except psycopg.Error:
                    pass  # the connection is gone; the outer transaction fails and rolls back
            else:
                store._locked.clear()
                store._after_commit = []
                store._changed_watchers, store._notified_events = [], []
                try:
                    store._pg.execute("ROLLBACK")
                except psycopg.Error:
                    pass  # a broken connection: the server rolled back; the next use reconnects
        finally:
            store.lock.release()
        if isinstance(exc, psycopg.Error):
            raise _translate(exc) from exc


def _run(store: PostgresStore, sql: str, *, committing: bool = False) -> None:
    try:
        store._cur.execute(sql)  # the store's cursor: Connection.execute would make one per call
    except psycopg.Error as exc:
        raise _translate(exc, committing=committing) from exc


# SQLSTATE classes and codes: 08 connection exception, 28 invalid authorization,
# 57P01-57P03 server shutting down or starting, 40001 serialization failure, 40P01 deadlock.
_UNAVAILABLE_STATES = ("57P01", "57P02", "57P03")
_LOGIN_REFUSED = re.compile(r"authentication failed|role \".*\" does not exist|no pg_hba\.conf entry")


def _translate(exc: BaseException, *, committing: bool = False) -> StorageError:
    """A driver error as the ``StorageError`` that says what happened."""
    state = getattr(exc, "sqlstate", None) or ""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)):
        return StorageConflict(f"PostgreSQL: concurrent transaction conflict ({detail})", retry_safe=True)
    # A login refused at connect time carries no SQLSTATE in psycopg: the server's FATAL says it.
    if state.startswith("28") or _LOGIN_REFUSED.search(str(exc)):
        return StorageUnavailable(f"PostgreSQL refused the login: {detail}")
    if state.startswith("53"):  # insufficient resources: disk full, out of memory, too many connections
        return StorageFull(f"PostgreSQL: storage full or out of resources: {detail}") if state == "53100" \
            else StorageUnavailable(f"PostgreSQL: out of resources: {detail}", retry_safe=True)
    # A client-side connection failure has no SQLSTATE; the server's says 08 or 57P0x.
    lost = (state.startswith("08") or state in _UNAVAILABLE_STATES
            or (isinstance(exc, psycopg.OperationalError) and not state))
    if lost:
        # A transaction whose connection broke before COMMIT was rolled back by the server;
        # one that broke during COMMIT may or may not have committed.
        if committing:
            return StorageUnavailable(
                f"PostgreSQL connection lost during commit; the outcome is unknown ({detail})"
            )
        return StorageUnavailable(f"PostgreSQL unavailable: {detail}", retry_safe=True)
    return StorageError(f"PostgreSQL error: {detail}")


def _cursor_record(row: Sequence[Any]) -> CursorRecord:
    return CursorRecord(row[0], row[1], row[2], (int(row[3]), int(row[4]), int(row[5])), float(row[6]), row[7])


class _QmarkCursor(NamedTuple):
    cursor: psycopg.Cursor[Any]

    def fetchone(self) -> Any:
        return self.cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self.cursor.fetchall()

    @property
    def rowcount(self) -> int:
        return self.cursor.rowcount


# The few SQLite-only pieces the feature-table modules' SQL uses, and what they are here:
# planner hints (PostgreSQL's planner takes none), the last inserted row id, and the events'
# AUTOINCREMENT counter (a serial column's sequence).
_SQLITE_ONLY: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\s+INDEXED BY \w+"), ""),
    (re.compile(r"last_insert_rowid\(\)"), "lastval()"),
    (re.compile(r"SELECT seq FROM sqlite_sequence WHERE name = 'session_state_events'"),
     "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM session_state_events_sequence_seq"),
)


class QmarkConnection:
    """The feature-table modules' view of the connection: ``execute(sql, params)`` with
    ``?`` placeholders as ``sqlite3`` takes them, run on the store's psycopg connection.

    Their SQL is written to run on both backends; the placeholder style and the few SQLite-only
    pieces in ``_SQLITE_ONLY`` are translated once per constant string (cached).
    """

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._translated: dict[str, str] = {}

    def _sql(self, sql: str) -> str:
        translated = self._translated.get(sql)
        if translated is None:
            translated = sql.replace("%", "%%").replace("?", "%s")
            for pattern, replacement in _SQLITE_ONLY:
                translated = pattern.sub(replacement, translated)
            self._translated[sql] = translated
        return translated

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _QmarkCursor:
        store = self._store
        if store._depth == 0:
            store._reconnect_if_broken()
        try:
            return _QmarkCursor(store._pg.execute(self._sql(sql), tuple(params), prepare=True))
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    def executemany(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        store = self._store
        try:
            store._pg.cursor().executemany(self._sql(sql), [tuple(p) for p in params])
        except psycopg.Error as exc:
            raise _translate(exc) from exc


class PostgresServingTable(SqliteServingTable):
    """The serving SQL (it runs on both backends); a cursor change is told to the other
    servers by the transaction's ``NOTIFY`` rather than a change-log row, which a reader
    could not order by commit here (see postgres_feed.py)."""

    def __init__(self, store: PostgresStore, db: Any, storage_error: Callable[[BaseException], StorageError]) -> None:
        super().__init__(db, storage_error)
        self._store = store

    def note_cursor_changes(self, watchers: Iterable[str], now: float) -> None:
        self._store.note_changed_watchers(watchers)
