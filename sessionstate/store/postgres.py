"""The PostgreSQL store: the server backend of the shared SQL layer (``sql_store.SqlStore``).

The statements are the shared ones (``statements.py``, ``Dialect.sql`` gives them psycopg's
parameter style); this module holds what a server with several writers needs beyond them.
Several gateway processes may share one database, so it adds what SQLite's single writer
gave for free (the ordering argument is written out in spec/notice-protocol.md,
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
  keeps the schema version and runs the migrations).
- R22: what other servers must learn of a transaction goes as ``NOTIFY`` in the same round
  trip as its ``COMMIT`` (the unit of work's ``_commit`` hook).
- Driver errors leave as ``StorageError`` subclasses with the driver's error as the cause;
  a connection that broke is replaced at the start of the next transaction.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Iterable, Sequence

import psycopg
from psycopg import errors as pg_errors
from sqlalchemy import create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool
from sqlmodel import SQLModel

from ..errors import (
    CommitOutcomeUnknown,
    InvalidDatabaseUrl,
    StorageConflict,
    StorageError,
    StorageFull,
    StorageUnavailable,
    UnknownSession,
    UnsupportedBackend,
)
from . import commit_outcome, postgres_schema, tables  # noqa: F401  (tables registers every table module)
from .dialect import POSTGRES
from .postgres_feed import NotifiedEvent, PostgresChangeFeed, channel_for, encode_changes, notify_prefix, notify_statement
from .records import CursorRecord, EventRow, PositionsTuple, PruneObserver, VacuumReport
from .runs import SqlRunTable
from .serving import SqlServingTable
from .session_meta import SqlMetadataTable
from .sql_store import SYNCHRONOUS_LEVELS, SqlStore, Target, last_changes
from .statements import (
    CAUGHT_UP_CURSOR,
    CURSOR_ORDER,
    EVENT_COLUMNS,
    HELD_BY,
    PUT_CURSOR,
    CoreStatements,
    cursor_record,
)
from .transcripts import SqlTranscriptTable
from .upstream_links import SqlUpstreamLinkTable

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

LOCK_HEAD_SQL = (
    "SELECT last_sequence FROM session_state_heads"
    " WHERE session_key = %s AND agent_id = %s FOR UPDATE"
)
# The head bump both append statements end with.
_BUMP_HEAD = (
    " UPDATE session_state_heads h SET last_sequence = inserted.sequence, updated_at = %s"
    " FROM inserted WHERE h.session_key = %s AND h.agent_id = %s RETURNING inserted.sequence"
)
# Runs after LOCK_HEAD_SQL in the same transaction: the sequence is taken under the head's
# lock. ON CONFLICT covers a dedupe key committed by a transaction on another session after
# the dedupe check (no row comes back; the caller reads the winner's sequence).
APPEND_SQL = (
    f"WITH inserted AS (INSERT INTO session_state_events ({EVENT_COLUMNS})"
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
    f" inserted AS (INSERT INTO session_state_events ({EVENT_COLUMNS})"
    " SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s::float8, %s::float8, %s FROM locked"
    " RETURNING sequence)" + _BUMP_HEAD
)
# The heads of several targets, locked in key order (one order everywhere: no deadlock
# between two such statements).
LOCK_HEADS_SQL = (
    "SELECT session_key, agent_id FROM session_state_heads"
    " WHERE (session_key, agent_id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
    " ORDER BY session_key, agent_id FOR UPDATE"
)
# The caught-up cursors of several targets in one statement (a group commit's decisions,
# after the heads are locked): the event path's read, for every target of the batch at once.
CAUGHT_UP_OF_SQL = (
    "SELECT target_session_key, target_agent_id, watcher_session_key,"
    " last_seen_sequence, notified_sequence, material_sequence FROM session_watch_cursors"
    " WHERE (target_session_key, target_agent_id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
    f" AND {CAUGHT_UP_CURSOR}"
)
# Cursor upserts of any number of pairs (several targets) in one statement, from one array
# per column: a group commit's cursor changes in one round trip.
PUT_PAIRS_SQL = PUT_CURSOR.format(
    rows="SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[], %s::bigint[],"
    " %s::bigint[], %s::float8[])"
)
# Several events in one statement, one round trip for a group commit's appends, their heads
# already locked (``lock_targets``, key order). One array per column, in input order; a dedupe
# key already in the log is found, not inserted (no sequence is consumed for it); the others
# take their sequences in input order (the ORDER BY before nextval), so one session's events
# keep their order; each session's head moves to its largest new sequence. A dedupe key that
# another session's transaction committed meanwhile conflicts and comes back not inserted.
APPEND_MANY_SQL = (
    "WITH src AS MATERIALIZED (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[],"
    " %s::text[], %s::text[], %s::text[], %s::text[], %s::float8[], %s::float8[], %s::text[])"
    f" WITH ORDINALITY AS s({EVENT_COLUMNS}, ord)),"
    " existing AS MATERIALIZED (SELECT s.ord, e.sequence FROM src s"
    " JOIN session_state_events e ON e.dedupe_key = s.dedupe_key),"
    " numbered AS MATERIALIZED (SELECT n.*, nextval('session_state_events_sequence_seq') AS sequence"
    " FROM (SELECT * FROM src WHERE ord NOT IN (SELECT ord FROM existing) ORDER BY ord) n),"
    f" inserted AS (INSERT INTO session_state_events (sequence, {EVENT_COLUMNS})"
    f" SELECT sequence, {EVENT_COLUMNS} FROM numbered ORDER BY ord"
    " ON CONFLICT (dedupe_key) DO NOTHING RETURNING sequence),"
    " bumped AS (UPDATE session_state_heads h SET last_sequence = m.last, updated_at = m.at"
    " FROM (SELECT n.session_key, n.agent_id, max(n.sequence) AS last, max(n.recorded_at) AS at"
    " FROM numbered n JOIN inserted i ON i.sequence = n.sequence GROUP BY n.session_key, n.agent_id) m"
    " WHERE h.session_key = m.session_key AND h.agent_id = m.agent_id)"
    " SELECT n.ord, n.sequence, i.sequence IS NOT NULL, true FROM numbered n"
    " LEFT JOIN inserted i ON i.sequence = n.sequence"
    " UNION ALL SELECT ord, sequence, false, false FROM existing"
)
# Up to this many cursor upserts go in one statement, one round trip with its plan prepared
# once per row count: three rows take ~100 µs that way against ~145 µs through executemany's
# pipeline. A larger freeze (rare) uses executemany, so the statement texts stay few.
PUT_CURSORS_MAX_ROWS = 16


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


class PostgresStore(SqlStore):
    """Durable signal log, heads, cursors and session registry in a PostgreSQL database."""

    path = None  # no file behind it
    DRIVER_ERRORS = (psycopg.Error,)
    PRUNE_CHUNK_ROWS = PRUNE_CHUNK_ROWS

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
        self._start_units_of_work()
        self._locked: set[Target] = set()  # head rows this transaction holds
        self._notifying_kinds = frozenset(notifying_kinds)
        self._sql = CoreStatements(POSTGRES, sorted(self._notifying_kinds))
        self._put_rows_sql = {n: self._sql.put_cursors(n) for n in range(2, PUT_CURSORS_MAX_ROWS + 1)}
        self._run = self._execute
        self._run_many = self._execute_many
        # R22: what this transaction must tell the other servers, sent with its commit.
        self._changed_watchers: list[str] = []
        self._notified_events: list[NotifiedEvent] = []
        # R29: how the commits whose answer was lost were resolved (diagnostics, tests).
        self.commit_resolutions: dict[str, int] = {
            commit_outcome.COMMITTED: 0, commit_outcome.ABORTED: 0, commit_outcome.UNKNOWN: 0
        }
        try:
            self._create_schema(create)
            self._connect()
        except DBAPIError as exc:
            self._engine.dispose()
            raise _translate(exc.orig or exc) from exc
        except psycopg.Error as exc:
            self._engine.dispose()
            raise _translate(exc) from exc
        self.db = PostgresConnection(self)
        self.meta = SqlMetadataTable(self.db, POSTGRES, self.storage_error)
        self.runs = SqlRunTable(self.db, POSTGRES, self.storage_error)
        self.transcripts = SqlTranscriptTable(self.db, POSTGRES, self.storage_error)
        self.links = SqlUpstreamLinkTable(self.db, POSTGRES, self.transaction, self.storage_error)
        self.serving = PostgresServingTable(self, self.db, self.storage_error)
        self.channel = channel_for(str(self._scalar("SELECT current_schema()", ())))
        self._notify_prefix = notify_prefix(self.channel)

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
        pg.autocommit = True  # transactions are explicit: see transaction()
        pg.execute("SET standard_conforming_strings = on")  # the NOTIFY literals rely on it
        pg.execute(f"SET synchronous_commit = {self._synchronous_commit}")
        self._pg: psycopg.Connection[Any] = pg
        self._cur = pg.cursor()
        # R29: the timeline this connection's transactions begin on (once per connection).
        row = pg.execute(commit_outcome.TIMELINE_SQL).fetchone()
        self._timeline: str | None = row[0] if row else None

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
        """One statement (prepared on the server): reconnects first when idle, translates errors."""
        if self._depth == 0:
            self._reconnect_if_broken()
        try:
            return self._cur.execute(sql, args, prepare=True)
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    def _execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        try:
            self._cur.executemany(sql, rows)
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    def _scalar(self, sql: str, args: Sequence[Any]) -> Any:
        row = self._execute(sql, args).fetchone()
        return None if row is None else row[0]

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

    # -- lifecycle and the unit of work's statements ----------------------------------------

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

    def _begin(self) -> None:
        self._reconnect_if_broken()
        self._control("BEGIN")

    def _control(self, sql: str, *, committing: bool = False) -> None:
        try:
            self._cur.execute(sql)  # the store's cursor: Connection.execute would make one per call
        except psycopg.Error as exc:
            raise _translate(exc, committing=committing) from exc

    def _commit(self) -> None:
        # R22: the notification goes with the commit, in the same round trip.
        self._locked.clear()
        # R29: the transaction's id, learned before COMMIT is sent (None: it wrote nothing).
        try:
            txid = self._cur.execute(commit_outcome.TXID_SQL).fetchone()[0]  # type: ignore[index]
        except psycopg.Error as exc:
            raise _translate(exc) from exc  # before COMMIT: the server rolls it back
        began_on = self._timeline
        try:
            self._control(self._take_notifications() + "COMMIT", committing=True)
        except CommitOutcomeUnknown:
            outcome = commit_outcome.COMMITTED if txid is None else commit_outcome.resolve(
                self._resolving_connection, txid, began_on
            )
            self.commit_resolutions[outcome] += 1
            if outcome == commit_outcome.COMMITTED:
                return  # as if the answer had arrived
            if outcome == commit_outcome.ABORTED:
                raise StorageUnavailable(
                    f"PostgreSQL connection lost during commit; transaction {txid} rolled back",
                    retry_safe=True,
                ) from None
            raise

    def _resolving_connection(self) -> "psycopg.Connection[Any]":
        self._reconnect_if_broken()
        return self._pg

    def _rollback(self) -> None:
        try:
            self._pg.execute("ROLLBACK")
        except psycopg.Error:
            pass  # a broken connection: the server rolled back; the next use reconnects

    def _rollback_to(self, name: str) -> None:
        try:
            self._pg.execute(f"ROLLBACK TO {name}")
            self._pg.execute(f"RELEASE {name}")
        except psycopg.Error:
            pass  # the connection is gone; the outer transaction fails and rolls back

    # Row locks taken inside a savepoint that rolls back are released by the server, so the
    # record of held head locks is restored with it, and so are its notifications.

    def _level_mark(self) -> Any:
        return len(self._after_commit), set(self._locked), len(self._changed_watchers), len(self._notified_events)

    def _restore_level(self, mark: Any) -> None:
        callbacks, self._locked, watchers, events = mark
        del self._after_commit[callbacks:]
        del self._changed_watchers[watchers:]
        del self._notified_events[events:]

    def _forget_transaction(self) -> None:
        self._after_commit = []
        self._locked.clear()
        self._changed_watchers, self._notified_events = [], []

    # -- the signal log ---------------------------------------------------------------------

    def _append(self, row: EventRow) -> tuple[int, bool]:
        """The head row is locked first (its absence raises ``UnknownSession``), then the
        dedupe key is looked up, then the row is inserted with a sequence taken under that
        lock. Without a dedupe key the first append to a session in a transaction locks and
        inserts in one statement (``LOCK_AND_APPEND_SQL``)."""
        cur = self._cur
        key, agent_id, kind = row[0], row[1], row[2]
        actor_id, recorded_at, dedupe_key = row[4], row[9], row[10]
        target = (key, agent_id)
        append_args = row + (recorded_at, key, agent_id)
        if target not in self._locked and dedupe_key is None:
            first = cur.execute(LOCK_AND_APPEND_SQL, target + append_args, prepare=True).fetchone()
            if first is None:
                raise UnknownSession(f"unknown session {key!r} (agent {agent_id!r})")
            self._locked.add(target)
            return self._appended(key, agent_id, kind, actor_id, int(first[0]))
        if target not in self._locked:
            if cur.execute(LOCK_HEAD_SQL, target, prepare=True).fetchone() is None:
                raise UnknownSession(f"unknown session {key!r} (agent {agent_id!r})")
            self._locked.add(target)
        if dedupe_key is not None:
            existing = cur.execute(self._sql.dedupe, (dedupe_key,), prepare=True).fetchone()
            if existing is not None:
                return int(existing[0]), False
        inserted = cur.execute(APPEND_SQL, append_args, prepare=True).fetchone()
        if inserted is None:  # the dedupe key was committed meanwhile by a writer on another session
            winner = None if dedupe_key is None else cur.execute(self._sql.dedupe, (dedupe_key,), prepare=True).fetchone()
            if winner is None:  # no head row to bump (the caller rolls the insert back)
                raise UnknownSession(f"unknown session {key!r} (agent {agent_id!r})")
            return int(winner[0]), False
        return self._appended(key, agent_id, kind, actor_id, int(inserted[0]))

    def append_events(self, rows: Sequence[EventRow]) -> list[tuple[int, bool]]:
        """Several appends in one statement (``APPEND_MANY_SQL``): the batch's one round trip
        to the log; a dedupe key repeated within ``rows`` finds its first row's sequence."""
        if len(rows) < 2:
            return [self._append(row) for row in rows]
        headless = self._lock_heads([(r[0], r[1]) for r in rows])
        if headless:
            key, agent_id = min(headless)
            raise UnknownSession(f"unknown session {key!r} (agent {agent_id!r})")
        first_of: dict[str, int] = {}  # a dedupe key's first row in the batch
        sent: list[EventRow] = []
        sent_from: list[int] = []  # the position in ``rows`` of each row sent
        sent_index: list[int] = []  # each row's index into ``sent`` (a repeated key: its first's)
        for position, row in enumerate(rows):
            dedupe_key = row[10]
            if dedupe_key is not None and dedupe_key in first_of:
                sent_index.append(first_of[dedupe_key])
                continue
            if dedupe_key is not None:
                first_of[dedupe_key] = len(sent)
            sent_index.append(len(sent))
            sent_from.append(position)
            sent.append(row)
        columns = [list(column) for column in zip(*sent)]
        outcome: dict[int, tuple[int, bool]] = {}
        for ord_, sequence, inserted, new in self._cur.execute(APPEND_MANY_SQL, columns, prepare=True).fetchall():
            if new and not inserted:  # its dedupe key was committed meanwhile on another session
                winner = self._cur.execute(self._sql.dedupe, (sent[ord_ - 1][10],), prepare=True).fetchone()
                if winner is None:  # as append_event: nothing to find, nothing to bump
                    raise UnknownSession(f"unknown session {sent[ord_ - 1][0]!r} (agent {sent[ord_ - 1][1]!r})")
                sequence = winner[0]
            outcome[int(ord_) - 1] = (int(sequence), bool(inserted))
        results: list[tuple[int, bool]] = []
        for position, index in enumerate(sent_index):
            sequence, inserted = outcome[index]
            row = rows[position]
            if inserted and sent_from[index] == position:
                results.append(self._appended(row[0], row[1], row[2], row[4], sequence))
            else:  # found by its dedupe key (in the log, or earlier in this batch)
                results.append((sequence, False))
        return results

    def _appended(self, key: str, agent_id: str, kind: str, actor_id: str | None, sequence: int) -> tuple[int, bool]:
        if kind in self._notifying_kinds:
            self._notified_events.append((key, agent_id, actor_id, sequence))
        return sequence, True

    # -- cursors and head locks -------------------------------------------------------------

    def _lock_for_decision(self, targets: Sequence[Target]) -> None:
        if self._depth:
            self._lock_heads(targets)

    def _cursors(
        self,
        condition: str,
        args: tuple[Any, ...],
        order: str = CURSOR_ORDER,
        also_lock: Sequence[Target] = (),
        extend: bool = True,
    ) -> list[CursorRecord]:
        """The cursors matching ``condition``; inside a transaction their targets' heads (and
        ``also_lock``) are locked first, in key order. A cursor that started to match between
        the lock and the read (on a target not locked yet) has its head locked too, and the
        read runs again (``extend``; else it is left out)."""
        read_sql = self._sql.cursors(condition, order)
        if not self._depth:
            return [cursor_record(r) for r in self._execute(read_sql, args).fetchall()]
        targets = self._execute(self._sql.cursor_targets(condition), args).fetchall()
        headless = self._lock_heads([(t[0], t[1]) for t in targets] + list(also_lock))
        while True:
            records = [cursor_record(r) for r in self._execute(read_sql, args).fetchall()]
            missing = {(r.target_key, r.target_agent_id) for r in records} - self._locked - headless
            if not missing:
                return records
            if not extend:
                return [r for r in records if (r.target_key, r.target_agent_id) not in missing]
            headless |= self._lock_heads(sorted(missing))

    def _put_cursor_rows(self, upserts: list[tuple[Any, ...]]) -> None:
        if len(upserts) > PUT_CURSORS_MAX_ROWS:
            self._cur.executemany(self._sql.put_cursor, upserts)
            return
        if len({u[0] for u in upserts}) < len(upserts):  # one statement may not upsert a row twice
            upserts = list({u[0]: u for u in upserts}.values())  # the last write wins, as in order
        if len(upserts) == 1:
            self._cur.execute(self._sql.put_cursor, upserts[0], prepare=True)
        else:
            self._cur.execute(self._put_rows_sql[len(upserts)], [v for u in upserts for v in u], prepare=True)

    def caught_up_watchers_of(self, targets: Sequence[Target]) -> dict[Target, list[tuple[str, PositionsTuple]]]:
        """One statement for every target (``CAUGHT_UP_OF_SQL``); their heads are locked."""
        if len(targets) == 1:
            return super().caught_up_watchers_of(targets)
        keys, agents = [t[0] for t in targets], [t[1] for t in targets]
        found: dict[Target, list[tuple[str, PositionsTuple]]] = {}
        rows = self._execute(CAUGHT_UP_OF_SQL, (keys, agents)).fetchall()
        for key, agent, watcher, last_seen, notified, material in rows:
            found.setdefault((key, agent), []).append((watcher, (last_seen, notified, material)))
        return found

    def put_pair_cursors(self, changes: Sequence[tuple[str, Target, PositionsTuple | None]], now: float) -> None:
        """The upserts in one statement (``PUT_PAIRS_SQL``), whatever their number."""
        upserts, deletes = last_changes(changes, now)
        if len(upserts) == 1:
            self._execute(self._sql.put_cursor, upserts[0])
        elif upserts:
            self._execute(PUT_PAIRS_SQL, [list(column) for column in zip(*upserts)])
        if deletes:
            self._execute_many(self._sql.delete_cursor, deletes)

    def lock_watcher_targets(self, watcher: str) -> None:
        """Lock, in key order, the heads of every target ``watcher`` holds a cursor on (a drain
        is about to read and acknowledge its pending cursors)."""
        targets = self._execute(self._sql.cursor_targets(HELD_BY), (watcher,)).fetchall()
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

    def _prune_chunk(self, column: str, compare: str, bound: float, on_chunk: PruneObserver | None) -> int:
        """One chunk: it locks the heads of the sessions it touches (key order), raises their
        pruned watermark (R13), writes the effective material watermark of their pending
        cursors (R7), and only then deletes their rows in the range. Events of a session that
        only became visible after the heads were locked are left for the next chunk, so the
        watermark always covers what a chunk deletes."""
        where = f"{column} {compare} %s"
        with self.transaction():
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
            self._write_watermarks(affected)
            deleted = int(self._execute(
                f"DELETE FROM session_state_events WHERE {where} AND {in_sessions}",
                (bound, keys, agents),
            ).rowcount)
            self._report_chunk(affected, deleted, on_chunk)
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

    def trace_statements(self) -> AbstractContextManager[list[str]]:
        """Inside the block, every statement this store's connection sends to the server is
        appended to the list it yields (its text; a statement prepared before the block by its
        server-side text too), as libpq's protocol trace records them: how tests count the
        round trips a path makes, without reaching into the connection."""
        return _traced(self._pg)

    # -- inspection -------------------------------------------------------------------------

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
            return CommitOutcomeUnknown(
                f"PostgreSQL connection lost during commit; the outcome is unknown ({detail})"
            )
        return StorageUnavailable(f"PostgreSQL unavailable: {detail}", retry_safe=True)
    return StorageError(f"PostgreSQL error: {detail}")


# In libpq's trace (REGRESS_MODE: no timestamps), the frontend's messages that run statements.
_TRACED_MESSAGE = re.compile(r'^F\t\d+\t(Query|Parse|Bind|Execute)\t "((?:[^"\\]|\\.)*)"(?: "((?:[^"\\]|\\.)*)")?')


@contextmanager
def _traced(pg: "psycopg.Connection[Any]") -> Iterator[list[str]]:
    statements: list[str] = []
    with tempfile.TemporaryFile("w+") as log:
        pg.pgconn.trace(log.fileno())
        pg.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        try:
            yield statements
        finally:
            pg.pgconn.untrace()
            log.seek(0)
            trace = log.read()
            prepared = dict(pg.execute("SELECT name, statement FROM pg_prepared_statements").fetchall())
            statements.extend(_sent_statements(trace, prepared))


def _sent_statements(trace: str, prepared: dict[str, str]) -> list[str]:
    """The statements a libpq trace shows sent: a simple query's text, or per Execute the
    text of the statement its Bind named (parsed in the trace, or prepared before it)."""
    parsed = dict(prepared)
    sent: list[str] = []
    bound = ""
    for line in trace.splitlines():
        match = _TRACED_MESSAGE.match(line)
        if match is None:
            continue
        message, first, second = match.groups()
        if message == "Query":
            sent.append(first)
        elif message == "Parse":
            parsed[first] = second or ""
        elif message == "Bind":
            bound = parsed.get(second or "", second or "")
        else:
            sent.append(bound)
    return sent


class PostgresConnection:
    """The feature tables' view of the store's connection: ``execute``/``executemany`` as
    ``sqlite3`` offers them, on the store's psycopg connection. Their statements are already
    in psycopg's style (``Dialect.sql``); this reconnects when idle and translates errors."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        store = self._store
        if not store.in_transaction:
            store._reconnect_if_broken()
        try:
            # A cursor of its own: a feature table's read never clobbers the store's cursor.
            return store._pg.execute(sql, tuple(params), prepare=True)
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    def executemany(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        try:
            self._store._pg.cursor().executemany(sql, [tuple(p) for p in params])
        except psycopg.Error as exc:
            raise _translate(exc) from exc


class PostgresServingTable(SqlServingTable):
    """The serving SQL (it runs on both backends); a cursor change is told to the other
    servers by the transaction's ``NOTIFY`` rather than a change-log row, which a reader
    could not order by commit here (see postgres_feed.py)."""

    def __init__(self, store: PostgresStore, db: Any, storage_error: Callable[[BaseException], StorageError]) -> None:
        super().__init__(db, POSTGRES, storage_error)
        self._store = store

    def note_cursor_changes(self, watchers: Iterable[str], now: float) -> None:
        self._store.note_changed_watchers(watchers)
