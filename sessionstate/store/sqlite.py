"""The SQLite store: the embedded backend of the shared SQL layer (``sql_store.SqlStore``).

One ``SqliteStore`` owns one DBAPI connection for the life of a gateway. The schema comes from
SQLModel (``schema.py``); every statement is a constant string (``statements.py`` and the
few here that only SQLite runs) that ``sqlite3`` prepares once and keeps in its statement
cache, so the hot path (append, head, cursor decision) never goes through an ORM session. Positions cross this boundary as plain ``(last_seen, notified,
material)`` tuples: the store knows nothing of the protocol's states.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import URL, make_url

from ..errors import InvalidDatabaseUrl, StorageError, StorageUnavailable, UnknownSession, UnsupportedBackend
from . import bootstrap, schema, tables  # noqa: F401  (tables registers every table module)
from .dialect import SQLITE
from .failures import DRIVER_ERRORS, storage_error, translated
from .event_rows import EventRowCache
from .records import EventRow, PruneObserver, VacuumReport
from .runs import SqlRunTable
from .serving import SqlServingTable
from .session_meta import SqlMetadataTable
from .sql_store import SYNCHRONOUS_LEVELS, SqlStore
from .sqlite_checkpoint import BACKSTOP_PAGES, DEFAULT_AUTOCHECKPOINT_PAGES, WalCheckpointer
from .sqlite_feed import SqliteChangeFeed
from .statements import EVENT_COLUMNS, CoreStatements
from .transcripts import SqlTranscriptTable
from .upstream_links import SqlUpstreamLinkTable

# Durability: WAL with synchronous=NORMAL survives any crash of the process (SIGKILL
# included); after a power loss or OS crash the last transactions may roll back. FULL
# trades a fsync per commit for surviving those too.
DEFAULT_SYNCHRONOUS = "NORMAL"
BUSY_TIMEOUT_MS = 10_000
PRUNE_CHUNK_ROWS = 2_000
# Free pages handed back to the file system per transaction after pruning. Moving a page
# rewrites it and its parent's pointer: 256 pages is a few ms, less than one prune chunk
# (docs/operations.md has the measurement), so reclaiming never holds the write lock longer.
RECLAIM_STEP_PAGES = 256
AUTO_VACUUM_INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL
CHECKPOINT_MODES = ("PASSIVE", "FULL", "RESTART", "TRUNCATE")

# The write lock (BEGIN IMMEDIATE) is held: the sequence is AUTOINCREMENT's next value, and
# the head's bump proves the session exists (no row bumped: UnknownSession, rolled back).
APPEND_SQL = f"INSERT INTO session_state_events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING sequence"
BUMP_HEAD_SQL = "UPDATE session_state_heads SET last_sequence = ?, updated_at = ? WHERE session_key = ? AND agent_id = ?"


def parse_sqlite_url(url: str) -> URL:
    """The parsed ``sqlite://`` URL, or ``InvalidDatabaseUrl``/``UnsupportedBackend``."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidDatabaseUrl("the database URL is empty; give a sqlite:/// URL or a file path")
    try:
        parsed = make_url(url)
        backend = parsed.get_backend_name()
    except DRIVER_ERRORS + (ValueError,) as exc:
        raise InvalidDatabaseUrl(f"{url!r} is not a database URL ({exc}); give a sqlite:/// URL or a file path") from None
    if backend != "sqlite":
        raise UnsupportedBackend(f"{url!r}: backend {backend!r} is not supported yet; use a sqlite:/// URL")
    if parsed.username or parsed.password or parsed.host or parsed.port:
        raise InvalidDatabaseUrl(f"{url!r}: a sqlite URL names no host; use sqlite:///relative or sqlite:////absolute")
    return parsed


def _uri_mode(parsed: URL) -> tuple[bool, str | None]:
    uri = str(parsed.query.get("uri", "")).lower() in ("true", "1")
    mode = parsed.query.get("mode") if uri else None
    return uri, mode if isinstance(mode, str) else None


def sqlite_path(url: str) -> Path | None:
    """The file behind a ``sqlite:///`` URL (``None`` for an in-memory database)."""
    parsed = parse_sqlite_url(url)
    database = parsed.database or ""
    uri, mode = _uri_mode(parsed)
    if uri:
        database = database[len("file:"):] if database.startswith("file:") else database
        if mode == "memory":
            return None
    if not database or database == ":memory:":
        return None
    return Path(os.path.abspath(database))


def _access_hint(path: Path | None) -> str | None:
    """Why SQLite may have been unable to open ``path``, in words (its own message is
    "unable to open database file" for all of these)."""
    if path is None:
        return None
    try:
        if path.exists() and not os.access(path, os.R_OK):
            return "the file is not readable"
        if not os.access(path.parent, os.W_OK):
            return "its directory is not writable: SQLite needs to create the -wal and -shm files beside it"
    except OSError:  # the path cannot even be looked at (a name too long): the error says so
        return None
    return None


def _check_location(path: Path, create: bool) -> None:
    """Refuse, with the cause in words, a path SQLite could only fail on obscurely; make the
    parent directories of a new file only when ``create``."""
    try:
        _check_path(path, create)
    except OSError as exc:  # a name too long for the file system, and the like
        raise StorageUnavailable(f"{path}: {exc.strerror or exc}") from exc


def _check_path(path: Path, create: bool) -> None:
    if path.is_dir():
        raise StorageUnavailable(f"{path}: is a directory, not a database file")
    if path.exists():
        return
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise StorageUnavailable(f"{path}: {ancestor} is a file, not a directory")
    if not create:
        raise StorageUnavailable(f"{path}: no database file there (nothing was created)")
    path.parent.mkdir(parents=True, exist_ok=True)


@translated
class SqliteStore(SqlStore):
    """Durable signal log, heads, cursors and session registry on one SQLite file.

    One connection for the store's life, also for an in-memory database (``sqlite://``): the
    schema is created on it, so in-memory and file stores keep the same contract. Every
    public method raises a ``StorageError`` subclass, never a driver error; the ``HOT_PATH``
    methods run only inside ``transaction()``, which translates for them.
    """

    HOT_PATH = (
        "append_event", "caught_up_watchers", "caught_up_watchers_of", "put_cursors", "put_pair_cursors",
        "transaction", "after_commit", "witness_commit", "pending_for_drain",
    )
    DRIVER_ERRORS = DRIVER_ERRORS
    PRUNE_CHUNK_ROWS = PRUNE_CHUNK_ROWS

    def __init__(
        self,
        url: str,
        *,
        notifying_kinds: Iterable[str],
        synchronous: str = DEFAULT_SYNCHRONOUS,
        create: bool = True,
        background_checkpoints: bool = True,
    ) -> None:
        """Open the database at ``url``, creating it (and its directory) only when ``create``.

        With ``background_checkpoints`` (a writable file), a thread of the store's own
        checkpoints the WAL after commits instead of the commit that fills it
        (``sqlite_checkpoint.py``); without it SQLite's own autocheckpoint does.

        Raises ``InvalidDatabaseUrl``, ``UnsupportedBackend``, ``StorageUnavailable``,
        ``SchemaVersionError`` or ``SchemaMismatch``; a refused file is left as it was.
        """
        if not isinstance(synchronous, str) or synchronous.upper() not in SYNCHRONOUS_LEVELS:
            raise UnsupportedBackend(f"synchronous must be one of {SYNCHRONOUS_LEVELS}")
        parsed = parse_sqlite_url(url)
        path = sqlite_path(url)
        self.url = url
        self.path = path
        self.where = str(path) if path is not None else "in-memory database"
        self.closed = False
        uri, mode = _uri_mode(parsed)
        self._opened_read_only = mode == "ro" or (uri and str(parsed.query.get("immutable", "")) == "1")
        self._refused_as_read_only = False
        db: sqlite3.Connection | None = None
        try:
            if path is not None:
                _check_location(path, create and mode not in ("ro", "rw"))
            args, params = SQLiteDialect_pysqlite().create_connect_args(parsed)
            params.setdefault("timeout", BUSY_TIMEOUT_MS / 1000)
            # The gateway's lock serialises every use; runner threads share the connection.
            params["check_same_thread"] = False
            db = sqlite3.connect(*args, **params)  # type: ignore[call-overload]  # keys from the URL
            db.isolation_level = None  # transactions are explicit: see transaction()
            bootstrap.prepare(db, self.where)
            if path is not None and _scalar(db.execute("PRAGMA journal_mode")) != "wal":
                db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            checkpoint_aside = background_checkpoints and path is not None and not self._opened_read_only
        except BaseException as exc:
            if db is not None:
                db.close()
            if isinstance(exc, ValueError):  # a NUL or a lone surrogate in the path
                raise InvalidDatabaseUrl(f"{url!r} names no usable file ({exc})") from None
            if isinstance(exc, DRIVER_ERRORS):
                error = storage_error(exc, self.where)
                hint = _access_hint(path)
                if hint:
                    error = type(error)(f"{error.message} ({hint})")
                raise error from exc
            raise
        self._db: sqlite3.Connection = db
        # The connection's own methods, not wrappers: the hot path pays no extra call.
        self._run = db.execute
        self._run_many = db.executemany
        self._start_units_of_work()
        # Commits ask a thread of its own to checkpoint the WAL (sqlite_checkpoint.py); none
        # for a file opened read-only or a database in memory.
        self.checkpointer: WalCheckpointer | None = WalCheckpointer(
            path, synchronous=synchronous.upper(), busy_timeout=BUSY_TIMEOUT_MS / 1000, write_turn=self.lock
        ) if checkpoint_aside and path is not None else None
        if self.checkpointer is not None:
            self._set_autocheckpoint(self.checkpointer)
        self._sql = CoreStatements(SQLITE, sorted(notifying_kinds))
        self.event_rows = EventRowCache()
        self.meta = SqlMetadataTable(db, SQLITE, self.storage_error)
        self.runs = SqlRunTable(db, SQLITE, self.storage_error)
        self.transcripts = SqlTranscriptTable(db, SQLITE, self.storage_error)
        self.links = SqlUpstreamLinkTable(db, SQLITE, self.transaction, self.storage_error)
        self.serving = SqlServingTable(db, SQLITE, self.storage_error)

    def _set_autocheckpoint(self, checkpointer: WalCheckpointer) -> None:
        """The writer's own autocheckpoint beside the thread: off where every checkpoint must
        hold the write lock (SQLite's WAL-reset race; ``sqlite_checkpoint.py``), else a
        backstop; SQLite's default where the thread could not connect."""
        checkpointer.started.wait()
        if not checkpointer.connected:
            pages = DEFAULT_AUTOCHECKPOINT_PAGES
        else:
            pages = 0 if checkpointer.guard else BACKSTOP_PAGES
        try:
            self._db.execute(f"PRAGMA wal_autocheckpoint = {pages}")
        except DRIVER_ERRORS as error:
            self.close()
            raise self.storage_error(error) from error

    def open_change_feed(self, kinds: tuple[str, ...]) -> SqliteChangeFeed:
        """R22: ``PRAGMA data_version`` on a connection of its own (file databases only)."""
        return SqliteChangeFeed(self.path, self.serving, kinds, busy_timeout=BUSY_TIMEOUT_MS / 1000)

    def storage_error(self, exc: BaseException) -> StorageError:
        """The ``StorageError`` for a driver failure on this database."""
        if self.closed:
            return StorageUnavailable(f"{self.where}: the store is closed")
        if str(getattr(exc, "sqlite_errorname", "")).startswith("SQLITE_READONLY"):
            self._refused_as_read_only = True  # an immutable file SQLite opened read-only, say
        return storage_error(exc, self.where)

    @property
    def read_only(self) -> bool:
        if self._refused_as_read_only or self._opened_read_only:
            return True
        return bool(self._db.execute("PRAGMA query_only").fetchone()[0])

    # -- lifecycle and the unit of work's statements ----------------------------------------

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.checkpointer is not None:
                self.checkpointer.close()  # first: the writer's connection, closing last, removes the WAL
            self._db.close()

    def lock_watcher_targets(self, watcher: str) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already holds the one write lock (PostgreSQL
        locks the heads of the watcher's targets here, in key order)."""

    def lock_targets(self, targets: Iterable[tuple[str, str]]) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already holds the one write lock (PostgreSQL
        locks the targets' head rows here, in key order)."""

    def _begin(self) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except DRIVER_ERRORS as error:
            raise self.storage_error(error) from error

    def _control(self, sql: str) -> None:
        try:
            self._db.execute(sql)
        except DRIVER_ERRORS as error:
            raise self.storage_error(error) from error

    def _commit(self) -> None:
        self._control("COMMIT")
        if self.checkpointer is not None:
            self.checkpointer.request()

    # SQLite rolls the whole transaction back by itself after some errors (disk full, I/O):
    # then there is nothing left to undo, and the outer level sees that too.

    def _rollback(self) -> None:
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except DRIVER_ERRORS:
                pass  # the error being raised says more; a still-open transaction fails the next BEGIN

    def _rollback_to(self, name: str) -> None:
        if self._db.in_transaction:
            try:
                self._db.execute(f"ROLLBACK TO {name}")
                self._db.execute(f"RELEASE {name}")
            except DRIVER_ERRORS:
                pass  # as above

    def pragma(self, name: str, value: int | None = None) -> Any:
        """A SQLite ``PRAGMA`` on this store's connection: its value, or with ``value`` set
        it first (SQLite-specific tuning and tests; not part of the store contract)."""
        if not name.isidentifier():
            raise ValueError(f"not a pragma name: {name!r}")
        statement = f"PRAGMA {name}" if value is None else f"PRAGMA {name} = {int(value)}"
        row = self._db.execute(statement).fetchone()
        return row if row is None or len(row) != 1 else row[0]  # one column: its value

    def run_sql(self, sql: str, params: Sequence[Any] = (), *, many: bool = False) -> list[Any]:
        """One SQL statement on this store's own connection, inside the caller's
        ``transaction()`` when one is open; with ``many``, ``params`` holds one parameter row
        per execution. It bypasses every rule of the store (no head bump, no cursor rule):
        for untimed setup in the benchmarks (the store's connection keeps its page cache,
        which another connection's commit would drop) and diagnostics, never for the
        gateway's own writes. Returns the statement's rows (none with ``many``)."""
        if many:
            self._db.executemany(sql, params)
            return []
        return self._db.execute(sql, params).fetchall()

    # -- the signal log ---------------------------------------------------------------------

    def _page_events(self, key: str, agent_id: str, after: int, limit: int, last_sequence: int) -> list[Any]:
        """The rows from ``event_rows`` when it holds every one of the page's sequences (read
        from the index), else read whole and kept; inside a transaction read whole and not
        kept (event_rows.py says why)."""
        if self.in_transaction:
            return super()._page_events(key, agent_id, after, limit, last_sequence)
        kept = self.event_rows
        # The session's newest event not kept (new since the last read, or a page that never
        # reached it): the index read would find a row missing; the page is read whole at once.
        if kept.holds(last_sequence):
            events = kept.rows(self._run(self._sql.page_sequences, (key, agent_id, after, limit)).fetchall())
            if events is not None:
                return events
        events = super()._page_events(key, agent_id, after, limit, last_sequence)
        kept.keep(events)
        return events

    def _append(self, row: EventRow) -> tuple[int, bool]:
        db = self._db
        dedupe_key = row[10]
        if dedupe_key is not None:
            # Looked up first, not left to ON CONFLICT: a conflicting INSERT would still
            # consume an AUTOINCREMENT value. The write lock (BEGIN IMMEDIATE) makes it safe.
            existing = _scalar(db.execute(self._sql.dedupe, (dedupe_key,)))
            if existing is not None:
                return int(existing), False
        sequence = _scalar(db.execute(APPEND_SQL, row))
        if db.execute(BUMP_HEAD_SQL, (sequence, row[9], row[0], row[1])).rowcount != 1:
            raise UnknownSession(f"unknown session {row[0]!r} (agent {row[1]!r})")
        return sequence, True

    # -- retention --------------------------------------------------------------------------

    def _prune_chunk(self, column: str, compare: str, bound: float, on_chunk: PruneObserver | None) -> int:
        # The hint keeps each chunk on its range: left alone, the planner prefers walking the
        # whole (session, sequence) index to serve the GROUP BY, which reads every row.
        hint = SQLITE.not_indexed() if column == "sequence" else SQLITE.indexed_by("ix_events_recorded_at")
        where = f"{column} {compare} ?"
        db = self._db
        with self.transaction():
            affected = db.execute(
                f"SELECT session_key, agent_id, max(sequence) FROM session_state_events{hint}"
                f" WHERE {where} GROUP BY session_key, agent_id",
                (bound,),
            ).fetchall()
            if not affected:
                return 0
            self._write_watermarks(affected)
            deleted = int(db.execute(f"DELETE FROM session_state_events{hint} WHERE {where}", (bound,)).rowcount)
            self._report_chunk(affected, deleted, on_chunk)
            return deleted

    def reclaim_free_pages(self, step_pages: int = RECLAIM_STEP_PAGES) -> int:
        """Return the free pages (left by pruning or deleting) to the file system; how many.

        Only a file with incremental auto-vacuum can (new files get it; an older file gets it
        from ``vacuum``): elsewhere this returns 0. Each step of at most ``step_pages`` pages
        is its own short write transaction, so a writer waits no longer than behind a prune
        chunk. In WAL mode the file shrinks when the WAL is checkpointed: a passive checkpoint
        (it never waits for the write lock) follows the steps.
        """
        db = self._db
        if self._depth or _scalar(db.execute("PRAGMA auto_vacuum")) != AUTO_VACUUM_INCREMENTAL:
            return 0
        reclaimed = 0
        free = int(_scalar(db.execute("PRAGMA freelist_count")))
        while free:
            with self.transaction():
                # The pragma frees one page per result row it steps to, and ``execute`` steps
                # once: so one page per statement (closing the cursor ends the statement).
                for _ in range(min(free, step_pages)):
                    db.execute("PRAGMA incremental_vacuum(1)").close()
            after = int(_scalar(db.execute("PRAGMA freelist_count")))
            if after >= free:
                break
            reclaimed, free = reclaimed + free - after, after
        if reclaimed and self.path is not None:
            self.checkpoint()
        return reclaimed

    def vacuum(self) -> VacuumReport:
        """Rewrite the whole file compactly and switch it to incremental auto-vacuum.

        The one-time step for a file created before incremental auto-vacuum (``sessionstate
        vacuum``): it holds an exclusive lock for the whole rewrite and needs free disk space
        about the size of the file.
        """
        db = self._db
        if self._depth:
            raise StorageUnavailable(f"{self.where}: vacuum cannot run inside a transaction")
        page_size = int(_scalar(db.execute("PRAGMA page_size")))
        before = int(_scalar(db.execute("PRAGMA page_count")))
        free_before = int(_scalar(db.execute("PRAGMA freelist_count")))
        db.execute(f"PRAGMA auto_vacuum = {AUTO_VACUUM_INCREMENTAL}")
        db.execute("VACUUM")
        if self.path is not None:
            self.checkpoint("TRUNCATE")
        after = int(_scalar(db.execute("PRAGMA page_count")))
        return VacuumReport(
            before * page_size,
            after * page_size,
            f"{free_before} free pages returned; auto-vacuum is now incremental,"
            " so prune() gives freed pages back from now on",
        )

    def checkpoint(self, mode: str = "PASSIVE") -> tuple[int, int, int]:
        """Checkpoint the WAL now on the store's own connection, never at the same time as
        the background thread's: SQLite's ``(busy, frames in the WAL, frames copied)``."""
        if mode not in CHECKPOINT_MODES:
            raise ValueError(f"checkpoint mode must be one of {CHECKPOINT_MODES}")
        checkpointer = self.checkpointer
        try:
            with checkpointer.turn if checkpointer is not None else nullcontext():
                # A passive checkpoint takes no write lock of its own: where the WAL-reset
                # race is open, the thread's second connection holds it meanwhile.
                guarded = mode == "PASSIVE" and checkpointer is not None and checkpointer.guard and checkpointer.connected
                # It waits for the lock as long as a write would.
                with checkpointer.write_locked(BUSY_TIMEOUT_MS / 1000) if guarded else nullcontext():  # type: ignore[union-attr]
                    busy, frames, copied = self._db.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        except DRIVER_ERRORS as error:
            raise self.storage_error(error) from error
        return int(busy), int(frames), int(copied)

    def trace_statements(self) -> AbstractContextManager[list[str]]:
        """Inside the block, every statement this store's connection runs is appended to the
        list it yields (whitespace and a trailing ``;`` stripped): how tests check which
        transactions a maintenance step runs, without reaching into the connection."""
        return _traced(self._db)

    # -- inspection -------------------------------------------------------------------------

    def integrity_check(self) -> str:
        return str(_scalar(self._db.execute("PRAGMA integrity_check")))


@contextmanager
def _traced(db: sqlite3.Connection) -> Iterator[list[str]]:
    statements: list[str] = []
    db.set_trace_callback(lambda sql: statements.append(sql.strip().rstrip(";")))
    try:
        yield statements
    finally:
        db.set_trace_callback(None)


def _scalar(cursor: sqlite3.Cursor) -> Any:
    """The one column of the one row a statement returns; ``None`` when it returns no row."""
    row = cursor.fetchone()
    if row is None:
        return None
    (value,) = row
    return value
