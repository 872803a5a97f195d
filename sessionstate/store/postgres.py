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
- Driver errors leave as ``StorageError`` subclasses with the driver's error as the cause
  (``postgres_errors.py``); a connection that broke is replaced at the start of the next
  transaction (``postgres_connection.py``, which the store is built on).

Beside it: ``postgres_statements.py`` (the statements only this backend runs: head locks and
the ``unnest`` batch forms), ``postgres_trace.py`` (the statements sent, from libpq's trace),
``postgres_feed.py`` (R22's listening side), ``postgres_schema.py``, ``postgres_batch.py`` (a
group commit's append) and ``postgres_record.py`` (a lone record in one round trip).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from contextlib import AbstractContextManager
from typing import Any, Iterable, Sequence

import psycopg
from sqlalchemy import create_engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool
from sqlmodel import SQLModel

from ..errors import CommitOutcomeUnknown, StorageError, StorageUnavailable, UnknownSession, UnsupportedBackend
from . import commit_outcome, postgres_record, postgres_schema, tables  # noqa: F401  (tables registers every table module)
from .dialect import POSTGRES
from .postgres_connection import (
    CONNECT_TIMEOUT_SECONDS,
    SCHEMES,
    SYNCHRONOUS_COMMIT,
    PostgresConnected,
    PostgresConnection,
    postgres_url,
)
from .postgres_batch import BatchPlan
from .decision_sql import Decisions
from .postgres_drain import DrainReads, drain_function_ddl, drain_function_name
from .postgres_errors import translate
from .postgres_feed import NotifiedEvent, PostgresChangeFeed, channel_for, encode_changes, notify_prefix, notify_statement
from .postgres_statements import (
    APPEND_MANY_SQL,
    APPEND_SQL,
    CAUGHT_UP_OF_SQL,
    LOCK_AND_APPEND_SQL,
    LOCK_HEAD_SQL,
    LOCK_HEADS_SQL,
    PUT_CURSORS_MAX_ROWS,
    PUT_PAIRS_SQL,
    put_cursors_literal,
)
from .postgres_trace import traced, traced_round_trips
from .records import CaughtUpRow, CursorRecord, EventRow, PositionsTuple, PruneObserver, VacuumReport
from .runs import SqlRunTable
from .serving import SqlServingTable
from .session_meta import SqlMetadataTable
from .sql_store import SYNCHRONOUS_LEVELS, SqlStore, Target, last_changes
from .statements import CURSOR_ORDER, HELD_BY, CoreStatements, caught_up_rows_by_target, cursor_record
from .transcripts import SqlTranscriptTable
from .upstream_links import SqlUpstreamLinkTable

__all__ = ["PRUNE_CHUNK_ROWS", "SCHEMES", "PostgresServingTable", "PostgresStore", "postgres_url"]

# Smaller than SQLite's 2,000: a chunk's transaction holds the row locks of the heads it
# touches until it commits, and a server-side delete maintains four indexes per row.
PRUNE_CHUNK_ROWS = 250


class PostgresStore(postgres_record.RecordsAlone, DrainReads, PostgresConnected, SqlStore):
    """Durable signal log, heads, cursors and session registry in a PostgreSQL database."""

    path = None  # no file behind it
    DRIVER_ERRORS = (psycopg.Error,)
    PRUNE_CHUNK_ROWS = PRUNE_CHUNK_ROWS

    def __init__(
        self, url: str, *, notifying_kinds: Iterable[str], synchronous: str = "NORMAL", create: bool = True,
        decisions: Decisions | None = None,
    ) -> None:
        """Connect to the database at ``url``; create the missing tables only when ``create``
        (without it, a database without them raises ``StorageUnavailable``). With
        ``decisions`` (the table's, as plain data) a lone record is decided on the server in
        one round trip (``postgres_record``)."""
        if not isinstance(synchronous, str) or synchronous.upper() not in SYNCHRONOUS_LEVELS:
            raise UnsupportedBackend(f"synchronous must be one of {SYNCHRONOUS_LEVELS}")
        parsed = postgres_url(url)
        self.url = url
        self.where = parsed.render_as_string(hide_password=True)
        self.closed = False
        self._synchronous_commit = SYNCHRONOUS_COMMIT[synchronous.upper()]
        connect_args: dict[str, Any] = {}
        if "application_name" not in parsed.query:  # the URL's own passes to libpq as given
            connect_args["application_name"] = "sessionstate"
        if "connect_timeout" not in parsed.query:
            connect_args["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
        self._engine = create_engine(parsed, poolclass=NullPool, connect_args=connect_args)
        self._start_units_of_work()
        self._locked: set[Target] = set()  # head rows this transaction holds
        self._txid: str | None = None  # R29: this transaction's id, once an append returned it
        self._appended_rows: list[commit_outcome.AppendedRow] = []  # R29: a record's witness
        self.witness = commit_outcome.CommitWitness()  # R29: read when an id's status is unknown
        self._notifying_kinds = frozenset(notifying_kinds)
        self._sql = CoreStatements(POSTGRES, sorted(self._notifying_kinds))
        self._decisions = decisions
        self.record_function = None if decisions is None else postgres_record.function_name(decisions)
        self._drain_read = "SELECT * FROM " + drain_function_name(self._sql) + "("
        self._put_rows_sql = {n: self._sql.put_cursors(n) for n in range(2, PUT_CURSORS_MAX_ROWS + 1)}
        self._run = self._execute
        self._run_many = self._execute_many
        # R22: what this transaction must tell the other servers, sent with its commit.
        self._changed_watchers: list[str] = []
        self._notified_events: list[NotifiedEvent] = []
        self._with_commit: list[str] = []  # a transaction's last writes, sent with its COMMIT
        # R29: how the commits whose answer was lost were resolved (diagnostics, tests).
        self.commit_resolutions = dict.fromkeys(commit_outcome.OUTCOMES, 0)
        try:
            self._create_schema(create)
            self._connect()
        except DBAPIError as exc:
            self._engine.dispose()
            raise translate(exc.orig or exc) from exc
        except psycopg.Error as exc:
            self._engine.dispose()
            raise translate(exc) from exc
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
            if conn.exec_driver_sql("SELECT current_setting('transaction_read_only')").scalar() != "on":
                # The one-round-trip functions; each name hashes its body.
                conn.exec_driver_sql(drain_function_ddl(self._sql))
                if self._decisions is not None:
                    conn.exec_driver_sql(postgres_record.function_ddl(self._decisions))

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

    def open_change_feed(self, kinds: tuple[str, ...]) -> PostgresChangeFeed:
        """R22: a listening connection of its own on this schema's channel."""
        try:
            return PostgresChangeFeed(self._listening_connection, self.channel, self.serving, self.storage_error)
        except DBAPIError as exc:
            raise translate(exc.orig or exc) from exc

    def storage_error(self, exc: BaseException) -> StorageError:
        """The ``StorageError`` for a driver failure on this database (the feature stores'
        translation calls it)."""
        if self.closed:
            return StorageUnavailable(f"{self.where}: the store is closed")
        if isinstance(exc, StorageError):
            return exc
        return translate(exc)

    # -- lifecycle and the unit of work's statements ----------------------------------------

    def _begin(self) -> None:
        self._reconnect_if_broken()
        # Sent before the transaction's first statement, or in its pipeline (``_send_begin``).
        self._begin_unsent = True

    def _control(self, sql: str, *, committing: bool = False) -> None:
        try:
            # The store's cursor: Connection.execute would make one per call.
            self._send(self._cur, sql, None, prepare=False)
        except psycopg.Error as exc:
            raise translate(exc, committing=committing) from exc

    def _commit(self) -> None:
        # R22: the notification goes with the commit, in the same round trip.
        self._locked.clear()
        if self._begin_unsent:  # nothing was sent: nothing to commit
            self._begin_unsent = False
            notify = self._take_notifications()
            if notify:
                self._control(notify[:-2])
            return
        # R29: the transaction's id, learned before COMMIT is sent (None: it wrote nothing);
        # an append already returned it, else it is read now.
        txid, self._txid = self._txid, None
        if txid is None:
            try:
                txid = self._send(self._cur, commit_outcome.TXID_SQL, None, prepare=False).fetchone()[0]  # type: ignore[index]
            except psycopg.Error as exc:
                raise translate(exc) from exc  # before COMMIT: the server rolls it back
        began_on, appended, self._appended_rows = self._timeline, self._appended_rows, []
        witness = self.witness.statement(txid)
        writes, self._with_commit = self._with_commit, []
        try:
            self._control("".join(w + "; " for w in writes) + witness + self._take_notifications() + "COMMIT",
                          committing=True)
        except CommitOutcomeUnknown:
            outcome = commit_outcome.settle(
                self._resolving_connection, txid, began_on, self.witness if witness else None, appended)
            self.commit_resolutions[outcome] += 1
            if outcome == commit_outcome.COMMITTED:
                return  # as if the answer had arrived
            if outcome == commit_outcome.ABORTED:
                raise StorageUnavailable(
                    f"PostgreSQL connection lost during commit; transaction {txid} rolled back",
                    retry_safe=True,
                ) from None
            raise

    def witness_commit(self) -> None:
        """R29: this transaction's commit carries a witness (contract ``Transactions``)."""
        self.witness.wanted = True

    def _resolving_connection(self) -> "psycopg.Connection[Any]":
        self._reconnect_if_broken()
        return self._pg

    def _rollback(self) -> None:
        if self._begin_unsent:  # nothing was sent
            self._begin_unsent = False
            return
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
        return (len(self._after_commit), set(self._locked), len(self._changed_watchers), len(self._notified_events),
                len(self._appended_rows))

    def _restore_level(self, mark: Any) -> None:
        callbacks, self._locked, watchers, events, appended = mark
        del self._after_commit[callbacks:]
        del self._changed_watchers[watchers:]
        del self._notified_events[events:]
        del self._appended_rows[appended:]

    def _forget_transaction(self) -> None:
        self._txid, self._appended_rows = None, []
        self.witness.wanted = False
        self._after_commit = []
        self._locked.clear()
        self._changed_watchers, self._notified_events = [], []
        self._with_commit = []

    # -- the signal log ---------------------------------------------------------------------

    def _page_events(self, key: str, agent_id: str, after: int, limit: int, last_sequence: int) -> list[Any]:
        """Each instant rounded to whole microseconds by the server; a page holding an instant
        beyond +-10**12 s (NULL there: the bigint could overflow) is read again with every
        instant in epoch seconds, for Python to round."""
        events = super()._page_events(key, agent_id, after, limit, last_sequence)
        if None in map(itemgetter(3), events):
            events = self._run(self._sql.event_page_in_seconds, (key, agent_id, after, limit)).fetchall()
        return events

    def _append(self, row: EventRow) -> tuple[int, bool]:
        """The head row is locked first (its absence raises ``UnknownSession``), then the
        dedupe key is looked up, then the row is inserted with a sequence taken under that
        lock. Without a dedupe key the first append to a session in a transaction locks and
        inserts in one statement (``LOCK_AND_APPEND_SQL``)."""
        cur = self._cur
        key, agent_id, recorded_at, dedupe_key = row[0], row[1], row[9], row[10]
        target = (key, agent_id)
        append_args = row + (recorded_at, key, agent_id)
        if target not in self._locked and dedupe_key is None:
            first = self._send(cur, LOCK_AND_APPEND_SQL, target + append_args).fetchone()
            if first is None:
                raise UnknownSession(f"unknown session {key!r} (agent {agent_id!r})")
            self._locked.add(target)
            self._txid = first[1]
            return self._appended(row, int(first[0]))
        if target not in self._locked:
            if self._send(cur, LOCK_HEAD_SQL, target).fetchone() is None:
                raise UnknownSession(f"unknown session {key!r} (agent {agent_id!r})")
            self._locked.add(target)
        if dedupe_key is not None:
            existing = self._send(cur, self._sql.dedupe, (dedupe_key,)).fetchone()
            if existing is not None:
                return int(existing[0]), False
        inserted = self._send(cur, APPEND_SQL, append_args).fetchone()
        if inserted is None:  # the dedupe key was committed meanwhile by a writer on another session
            winner = None if dedupe_key is None else cur.execute(self._sql.dedupe, (dedupe_key,), prepare=True).fetchone()
            if winner is None:  # no head row to bump (the caller rolls the insert back)
                raise UnknownSession(f"unknown session {key!r} (agent {agent_id!r})")
            return int(winner[0]), False
        self._txid = inserted[1]
        return self._appended(row, int(inserted[0]))

    def append_events(self, rows: Sequence[EventRow]) -> list[tuple[int, bool]]:
        """Several appends in one statement (``APPEND_MANY_SQL``): the batch's one round trip
        to the log; a dedupe key repeated within ``rows`` finds its first row's sequence."""
        if len(rows) < 2:
            return [self._append(row) for row in rows]
        return self.append_and_read(rows, ())[0]

    def append_and_read(
        self, rows: Sequence[EventRow], watched: Sequence[Target]
    ) -> tuple[list[tuple[int, bool]], dict[Target, list[CaughtUpRow]]]:
        """The heads' lock, the appends (``APPEND_MANY_SQL``) and the caught-up read of
        ``watched`` in one pipeline: none needs another's answer to be sent, and the server
        runs them in order, so the append and the read run under the lock as before."""
        if len(rows) < 2:  # the lone append locks its head itself
            appended = [self._append(row) for row in rows]
            return appended, self.caught_up_watchers_of(list(dict.fromkeys(watched))) if watched else {}
        plan = BatchPlan(rows)
        wanted = sorted({(r[0], r[1]) for r in rows} - self._locked)
        watched = list(dict.fromkeys(watched))
        lock, read = self._pg.cursor(), self._pg.cursor()
        with self._pg.pipeline():
            self._send_begin()
            if wanted:
                lock.execute(LOCK_HEADS_SQL, ([t[0] for t in wanted], [t[1] for t in wanted]), prepare=True)
            self._cur.execute(APPEND_MANY_SQL, plan.columns, prepare=True)
            if len(watched) == 1:
                read.execute(self._sql.caught_up_watchers, watched[0], prepare=True)
            elif watched:
                read.execute(CAUGHT_UP_OF_SQL, ([t[0] for t in watched], [t[1] for t in watched]), prepare=True)
        appended = self._cur.fetchall()
        if wanted:
            locked = {(r[0], r[1]) for r in lock.fetchall()}
            self._locked |= locked
            if len(locked) < len(wanted):  # the transaction rolls the append back
                key, agent_id = min(set(wanted) - locked)
                raise UnknownSession(f"unknown session {key!r} (agent {agent_id!r})")
        if appended:
            self._txid = str(appended[0][-1])  # R29: the transaction id, each row's last column
        results = plan.outcome(appended, self._dedupe_winner, self._appended)
        found: dict[Target, list[CaughtUpRow]] = {}
        if len(watched) == 1:
            rows_read = read.fetchall()
            if rows_read:
                found[watched[0]] = [(r[0], (r[1], r[1], r[2]), r[3]) for r in rows_read]
        elif watched:
            found = caught_up_rows_by_target(read.fetchall())
        return results, found

    def _dedupe_winner(self, row: EventRow) -> int:
        """The sequence of the event that took ``row``'s dedupe key (committed meanwhile by a
        transaction on another session)."""
        winner = None if row[10] is None else self._send(self._cur, self._sql.dedupe, (row[10],)).fetchone()
        if winner is None:  # as append_event: nothing to find, nothing to bump
            raise UnknownSession(f"unknown session {row[0]!r} (agent {row[1]!r})")
        return int(winner[0])

    def _appended(self, row: EventRow, sequence: int) -> tuple[int, bool]:
        if row[2] in self._notifying_kinds:
            self._notified_events.append((row[0], row[1], row[4], sequence))
        self._appended_rows.append((sequence, row[0], row[9]))
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
            self._execute_many(self._sql.put_cursor, upserts)
            return
        if len({u[0] for u in upserts}) < len(upserts):  # one statement may not upsert a row twice
            upserts = list({u[0]: u for u in upserts}.values())  # the last write wins, as in order
        if len(upserts) == 1:
            self._cur.execute(self._sql.put_cursor, upserts[0], prepare=True)
        else:
            self._cur.execute(self._put_rows_sql[len(upserts)], [v for u in upserts for v in u], prepare=True)

    def caught_up_watchers_of(self, targets: Sequence[Target]) -> dict[Target, list[CaughtUpRow]]:
        """One statement for every target (``CAUGHT_UP_OF_SQL``); their heads are locked."""
        if len(targets) == 1:
            return super().caught_up_watchers_of(targets)
        keys, agents = [t[0] for t in targets], [t[1] for t in targets]
        return caught_up_rows_by_target(self._execute(CAUGHT_UP_OF_SQL, (keys, agents)).fetchall())

    def put_pair_cursors(
        self, changes: Sequence[tuple[str, Target, PositionsTuple | None]], now: float, *, with_commit: bool = False
    ) -> None:
        """The upserts in one statement (``PUT_PAIRS_SQL``), whatever their number; with
        ``with_commit`` in the outermost transaction, that statement goes in the ``COMMIT``'s
        own message (a batch's last write: one round trip fewer)."""
        upserts, deletes = last_changes(changes, now)
        if with_commit and upserts and not deletes and self._write_with_commit(upserts):
            return
        if len(upserts) == 1:
            self._execute(self._sql.put_cursor, upserts[0])
        elif upserts:
            self._execute(PUT_PAIRS_SQL, [list(column) for column in zip(*upserts)])
        if deletes:
            self._execute_many(self._sql.delete_cursor, deletes)

    def _write_with_commit(self, upserts: list[tuple[Any, ...]]) -> bool:
        if self._depth != 1:
            return False
        self._with_commit.append(put_cursors_literal(upserts))
        return True

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
            raise translate(exc) from exc
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
        return traced(self._pg)

    def trace_round_trips(self) -> AbstractContextManager[list[list[str]]]:
        """``trace_statements`` grouped by round trip: each a list of the statements sent
        before the client waited for the server's answers (a pipeline's several)."""
        return traced_round_trips(self._pg)

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


class PostgresServingTable(SqlServingTable):
    """The serving SQL (it runs on both backends); a cursor change is told to the other
    servers by the transaction's ``NOTIFY`` rather than a change-log row, which a reader
    could not order by commit here (see postgres_feed.py)."""

    def __init__(self, store: PostgresStore, db: Any, storage_error: Callable[[BaseException], StorageError]) -> None:
        super().__init__(db, POSTGRES, storage_error)
        self._store = store

    def note_cursor_changes(self, watchers: Iterable[str], now: float) -> None:
        self._store.note_changed_watchers(watchers)
