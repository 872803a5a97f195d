"""The SQLite store: the only place that speaks SQL.

One ``SqliteStore`` owns one DBAPI connection for the life of a gateway. The schema comes from
SQLModel (``schema.py``); every statement below is a constant string that ``sqlite3`` prepares
once and keeps in its statement cache, so the hot path (append, head, cursor decision) never
goes through an ORM session. Positions cross this boundary as plain ``(last_seen, notified,
material)`` tuples: the store knows nothing of the protocol's states.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import URL, make_url

from ..errors import InvalidDatabaseUrl, StorageError, StorageUnavailable, UnknownSession, UnsupportedBackend
from . import bootstrap, schema, tables  # noqa: F401  (tables registers every table module)
from .failures import DRIVER_ERRORS, storage_error, translated
from .records import CursorRecord, EventRecord, Head, PositionsTuple, PruneObserver, SessionRecord, VacuumReport
from .runs import SqliteRunTable
from .serving import SqliteServingTable
from .sqlite_feed import SqliteChangeFeed
from .session_meta import SqliteMetadataTable
from .transcripts import SqliteTranscriptTable
from .upstream_links import SqliteUpstreamLinkTable

log = logging.getLogger("sessionstate")

# Durability: WAL with synchronous=NORMAL survives any crash of the process (SIGKILL
# included); after a power loss or OS crash the last transactions may roll back. FULL
# trades a fsync per commit for surviving those too.
SYNCHRONOUS_LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")
DEFAULT_SYNCHRONOUS = "NORMAL"
BUSY_TIMEOUT_MS = 10_000
PRUNE_CHUNK_ROWS = 2_000
# Free pages handed back to the file system per transaction after pruning. Moving a page
# rewrites it and its parent's pointer: 256 pages is a few ms, less than one prune chunk
# (docs/operations.md has the measurement), so reclaiming never holds the write lock longer.
RECLAIM_STEP_PAGES = 256
AUTO_VACUUM_INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL
_BY_RECORDED_AT = "INDEXED BY ix_events_recorded_at"

# The hot path's cursor read. INDEXED BY pins the partial index (the planner may otherwise
# tie-break to the plain target index, which also reads the pending cursors); SQLite refuses
# the statement outright if the index could not serve it.
CAUGHT_UP_WATCHERS_SQL = (
    "SELECT watcher_session_key, last_seen_sequence, notified_sequence, material_sequence"
    " FROM session_watch_cursors INDEXED BY ix_cursors_target_caught_up"
    " WHERE target_session_key = ? AND target_agent_id = ?"
    " AND notified_sequence = last_seen_sequence"
)
HAS_WATCHERS_SQL = (
    "SELECT 1 FROM session_watch_cursors INDEXED BY ix_cursors_target"
    " WHERE target_session_key = ? AND target_agent_id = ? LIMIT 1"
)
# Cursor provenance (spec R25, R26): written by seeds, read where a wake is decided.
SET_PROVENANCE_SQL = (
    "UPDATE session_watch_cursors SET provenance = ? WHERE watcher_session_key = ?"
    " AND target_session_key = ? AND target_agent_id = ?"
)
PROMOTE_ONLY_CONDITION = " AND provenance = 'ambient'"
PROVENANCE_SQL = (
    "SELECT provenance FROM session_watch_cursors WHERE watcher_session_key = ?"
    " AND target_session_key = ? AND target_agent_id = ?"
)
# The reconciliation page (contract.EventPageRow). SQLite has no half-even rounding, and the
# CASE expressions that would replace it cost more per row than the rounding in Python
# (timefmt.iso_millis), so the microseconds column stays NULL and the float goes last.
EVENT_PAGE_SQL = (
    "SELECT sequence, kind, actor_type, NULL, summary, actor_id, run_id, payload, occurred_at"
    " FROM session_state_events WHERE session_key = ? AND agent_id = ? AND sequence > ?"
    " ORDER BY sequence LIMIT ?"
)




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
class SqliteStore:
    """Durable signal log, heads, cursors and session registry on one SQLite file.

    One connection for the store's life, also for an in-memory database (``sqlite://``): the
    schema is created on it, so in-memory and file stores keep the same contract. Every
    public method raises a ``StorageError`` subclass, never a driver error; the ``HOT_PATH``
    methods run only inside ``transaction()``, which translates for them.
    """

    HOT_PATH = ("append_event", "caught_up_watchers", "put_cursors", "transaction", "after_commit")

    def __init__(
        self,
        url: str,
        *,
        notifying_kinds: Iterable[str],
        synchronous: str = DEFAULT_SYNCHRONOUS,
        create: bool = True,
    ) -> None:
        """Open the database at ``url``, creating it (and its directory) only when ``create``.

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
        self._depth = 0
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
        # after_commit callbacks of the open transaction, in registration order; each
        # savepoint remembers where its own start (a rollback drops only those).
        self._after_commit: list[Callable[[], object]] = []
        # The gateway's runner threads share this one connection: the lock serialises them.
        self.lock = threading.RLock()
        self.meta = SqliteMetadataTable(db, self.storage_error)
        self.runs = SqliteRunTable(db, self.storage_error)
        self.transcripts = SqliteTranscriptTable(db, self.storage_error)
        self.links = SqliteUpstreamLinkTable(db, self.transaction, self.storage_error)
        self.serving = SqliteServingTable(db, self.storage_error)
        self._build_statements(sorted(notifying_kinds))

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

    def _build_statements(self, notifying_kinds: Sequence[str]) -> None:
        kinds = ", ".join("'" + k.replace("'", "''") + "'" for k in notifying_kinds) or "NULL"
        # R7: a pending cursor's effective material watermark is the larger of the stored one
        # and the newest notifying event on its target after `notified` by another actor.
        self._effective_material = f"""
            CASE WHEN c.notified_sequence > c.last_seen_sequence THEN max(
                c.material_sequence,
                coalesce((SELECT max(e.sequence) FROM session_state_events e
                          WHERE e.session_key = c.target_session_key
                            AND e.agent_id = c.target_agent_id
                            AND e.sequence > c.notified_sequence
                            AND e.kind IN ({kinds})
                            AND (e.actor_id IS NULL OR e.actor_id != c.watcher_session_key)),
                         0))
            ELSE c.material_sequence END"""
        self._cursor_columns = f"""
            c.watcher_session_key, c.target_session_key, c.target_agent_id,
            c.last_seen_sequence, c.notified_sequence, {self._effective_material}, c.updated_at,
            c.provenance"""

    # -- lifecycle and transactions ---------------------------------------------------------

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._db.close()

    def lock_watcher_targets(self, watcher: str) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already holds the one write lock (PostgreSQL
        locks the heads of the watcher's targets here, in key order)."""

    def lock_targets(self, targets: Iterable[tuple[str, str]]) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already holds the one write lock (PostgreSQL
        locks the targets' head rows here, in key order)."""

    def transaction(self) -> "_Transaction":
        """The unit of work: holds ``lock``; ``BEGIN IMMEDIATE``/``COMMIT`` at depth 0, a
        savepoint when nested; rolls back (the savepoint only, when nested) and re-raises on
        error, a driver error as ``StorageError``."""
        return _Transaction(self)

    def after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` after the outermost commit (at once outside a transaction);
        dropped if the transaction, or the savepoint it was registered in, rolls back."""
        if self._depth:
            self._after_commit.append(callback)
        else:
            callback()

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

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

    # -- sessions ---------------------------------------------------------------------------

    def insert_session(self, record: SessionRecord) -> None:
        self._db.execute(
            "INSERT INTO sessions (session_key, agent_id, kind, parent_key, parent_agent_id,"
            " label, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            record,
        )
        self._db.execute(
            "INSERT INTO session_state_heads (session_key, agent_id, last_sequence,"
            " pruned_max_sequence, updated_at) VALUES (?, ?, 0, 0, ?)"
            " ON CONFLICT (session_key, agent_id) DO NOTHING",
            (record.session_key, record.agent_id, record.created_at),
        )

    def get_session(self, key: str, agent_id: str) -> SessionRecord | None:
        row = self._db.execute(
            "SELECT session_key, agent_id, kind, parent_key, parent_agent_id, label,"
            " created_at, updated_at FROM sessions WHERE session_key = ? AND agent_id = ?",
            (key, agent_id),
        ).fetchone()
        return SessionRecord(*row) if row else None

    def agents_with_session_key(self, key: str) -> list[str]:
        rows = self._db.execute(
            "SELECT agent_id FROM sessions WHERE session_key = ? ORDER BY agent_id", (key,)
        ).fetchall()
        return [r[0] for r in rows]

    def list_sessions(self) -> list[SessionRecord]:
        rows = self._db.execute(
            "SELECT session_key, agent_id, kind, parent_key, parent_agent_id, label,"
            " created_at, updated_at FROM sessions ORDER BY created_at, session_key"
        ).fetchall()
        return [SessionRecord(*r) for r in rows]

    def delete_session_data(self, key: str, agent_id: str) -> int:
        """Remove a session's events, head and registry row, and unlink its children;
        returns the number of events removed."""
        args = (key, agent_id)
        removed = self._db.execute(
            "DELETE FROM session_state_events WHERE session_key = ? AND agent_id = ?", args
        ).rowcount
        self._db.execute(
            "DELETE FROM session_state_heads WHERE session_key = ? AND agent_id = ?", args
        )
        self._db.execute("DELETE FROM sessions WHERE session_key = ? AND agent_id = ?", args)
        # Its children lose their parent link: a later session with the same key is not their
        # parent (left dangling, the link would re-bind to it and could close a cycle).
        self._db.execute(
            "UPDATE sessions SET parent_key = NULL, parent_agent_id = NULL"
            " WHERE parent_key = ? AND parent_agent_id = ?",
            args,
        )
        return removed

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

        A dedupe key already in the log returns the existing sequence and bumps nothing.
        Must run inside ``transaction()``; raises ``UnknownSession`` (rolling back with it) when
        the session has no head row.
        """
        db = self._db
        if dedupe_key is not None:
            # Looked up first, not left to ON CONFLICT: a conflicting INSERT would still
            # consume an AUTOINCREMENT value. The write lock (BEGIN IMMEDIATE) makes it safe.
            existing = _scalar(db.execute(
                "SELECT sequence FROM session_state_events WHERE dedupe_key = ?", (dedupe_key,)
            ))
            if existing is not None:
                return int(existing), False
        sequence = _scalar(db.execute(
            "INSERT INTO session_state_events (session_key, agent_id, kind, actor_type,"
            " actor_id, run_id, summary, payload, occurred_at, recorded_at, dedupe_key)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING sequence",
            (key, agent_id, kind, actor_type, actor_id, run_id, summary, payload,
             occurred_at, recorded_at, dedupe_key),
        ))
        bumped = db.execute(
            "UPDATE session_state_heads SET last_sequence = ?, updated_at = ?"
            " WHERE session_key = ? AND agent_id = ?",
            (sequence, recorded_at, key, agent_id),
        ).rowcount
        if bumped != 1:
            raise UnknownSession(f"unknown session {key!r} (agent {agent_id!r})")
        return sequence, True

    def head(self, key: str, agent_id: str) -> Head | None:
        row = self._db.execute(
            "SELECT last_sequence, pruned_max_sequence FROM session_state_heads"
            " WHERE session_key = ? AND agent_id = ?",
            (key, agent_id),
        ).fetchone()
        return Head(*row) if row else None

    def events_after(self, key: str, agent_id: str, after: int, limit: int) -> list[EventRecord]:
        rows = self._db.execute(
            "SELECT sequence, session_key, agent_id, kind, actor_type, actor_id, run_id,"
            " summary, payload, occurred_at, recorded_at, dedupe_key FROM session_state_events"
            " WHERE session_key = ? AND agent_id = ? AND sequence > ?"
            " ORDER BY sequence LIMIT ?",
            (key, agent_id, after, limit),
        ).fetchall()
        return [EventRecord(*r) for r in rows]

    def event_page(self, key: str, agent_id: str, after: int, limit: int) -> list[tuple[Any, ...]]:
        """The reconciliation page: only the columns ``changesSince`` shows, as plain tuples
        (``contract.EventPageRow``)."""
        return self._db.execute(EVENT_PAGE_SQL, (key, agent_id, after, limit)).fetchall()

    def earliest_sequence(self, key: str, agent_id: str) -> int | None:
        return _scalar(self._db.execute(
            "SELECT min(sequence) FROM session_state_events WHERE session_key = ? AND agent_id = ?",
            (key, agent_id),
        ))

    def sequence_high_water(self) -> int:
        """The largest sequence ever assigned (pruned or deleted ones included); 0 before any."""
        value = _scalar(self._db.execute(
            "SELECT seq FROM sqlite_sequence WHERE name = 'session_state_events'"
        ))
        return int(value or 0)

    def event_count(self) -> int:
        return int(_scalar(self._db.execute("SELECT count(*) FROM session_state_events")))

    # -- cursors ----------------------------------------------------------------------------

    def cursor(self, watcher: str, target_key: str, target_agent_id: str) -> CursorRecord | None:
        row = self._db.execute(
            f"SELECT {self._cursor_columns} FROM session_watch_cursors c"
            " WHERE c.watcher_session_key = ? AND c.target_session_key = ?"
            " AND c.target_agent_id = ?",
            (watcher, target_key, target_agent_id),
        ).fetchone()
        return _cursor_record(row) if row else None

    def caught_up_watchers(self, target_key: str, target_agent_id: str) -> list[tuple[str, PositionsTuple]]:
        """Watchers of a target whose cursor is caught up (the partial index serves this)."""
        rows = self._db.execute(CAUGHT_UP_WATCHERS_SQL, (target_key, target_agent_id)).fetchall()
        return [(r[0], (r[1], r[2], r[3])) for r in rows]

    def cursors_behind(self) -> list[CursorRecord]:
        """Cursors with a notice owed (effective material > last_seen) whose watcher exists."""
        rows = self._db.execute(
            f"SELECT {self._cursor_columns} FROM session_watch_cursors c"
            " WHERE c.notified_sequence > c.last_seen_sequence"
            " AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_key = c.watcher_session_key)"
            " ORDER BY c.watcher_session_key, c.target_session_key, c.target_agent_id"
        ).fetchall()
        return [_cursor_record(r) for r in rows]

    def cursors_held_by(self, watcher: str) -> list[CursorRecord]:
        rows = self._db.execute(
            f"SELECT {self._cursor_columns} FROM session_watch_cursors c"
            " WHERE c.watcher_session_key = ? ORDER BY c.target_session_key, c.target_agent_id",
            (watcher,),
        ).fetchall()
        return [_cursor_record(r) for r in rows]

    def pending_cursors_held_by(self, watcher: str) -> list[CursorRecord]:
        rows = self._db.execute(
            f"SELECT {self._cursor_columns} FROM session_watch_cursors c"
            " WHERE c.watcher_session_key = ? AND c.notified_sequence > c.last_seen_sequence"
            " ORDER BY c.target_session_key, c.target_agent_id",
            (watcher,),
        ).fetchall()
        return [_cursor_record(r) for r in rows]

    def cursors_naming(self, key: str, agent_id: str) -> list[CursorRecord]:
        rows = self._db.execute(
            f"SELECT {self._cursor_columns} FROM session_watch_cursors c"
            " WHERE c.watcher_session_key = ?"
            " OR (c.target_session_key = ? AND c.target_agent_id = ?)"
            " ORDER BY c.watcher_session_key, c.target_session_key",
            (key, key, agent_id),
        ).fetchall()
        return [_cursor_record(r) for r in rows]

    def all_cursors(self) -> list[CursorRecord]:
        rows = self._db.execute(
            f"SELECT {self._cursor_columns} FROM session_watch_cursors c"
            " ORDER BY c.watcher_session_key, c.target_session_key, c.target_agent_id"
        ).fetchall()
        return [_cursor_record(r) for r in rows]

    def expired_cursors(self, cutoff: float) -> list[CursorRecord]:
        """Cursors whose row and whose target's head were both last updated before cutoff."""
        rows = self._db.execute(
            f"SELECT {self._cursor_columns} FROM session_watch_cursors c"
            " LEFT JOIN session_state_heads h ON h.session_key = c.target_session_key"
            " AND h.agent_id = c.target_agent_id"
            " WHERE c.updated_at < ? AND coalesce(h.updated_at, 0) < ?",
            (cutoff, cutoff),
        ).fetchall()
        return [_cursor_record(r) for r in rows]

    def put_cursors(
        self,
        target_key: str,
        target_agent_id: str,
        changes: Sequence[tuple[str, PositionsTuple | None]],
        now: float,
    ) -> None:
        """Write new positions (insert or update) or delete (``None``) for watchers of a target."""
        upserts = [
            (watcher, target_key, target_agent_id, p[0], p[1], p[2], now)
            for watcher, p in changes
            if p is not None
        ]
        deletes = [(w, target_key, target_agent_id) for w, p in changes if p is None]
        if upserts:
            self._db.executemany(
                "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key,"
                " target_agent_id, last_seen_sequence, notified_sequence, material_sequence,"
                " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (watcher_session_key, target_session_key, target_agent_id)"
                " DO UPDATE SET last_seen_sequence = excluded.last_seen_sequence,"
                " notified_sequence = excluded.notified_sequence,"
                " material_sequence = excluded.material_sequence,"
                " updated_at = excluded.updated_at",
                upserts,
            )
        if deletes:
            self._db.executemany(
                "DELETE FROM session_watch_cursors WHERE watcher_session_key = ?"
                " AND target_session_key = ? AND target_agent_id = ?",
                deletes,
            )

    def has_watchers(self, target_key: str, target_agent_id: str) -> bool:
        """R24: whether any cursor targets the session (the target index serves this)."""
        return self._db.execute(HAS_WATCHERS_SQL, (target_key, target_agent_id)).fetchone() is not None

    def set_provenance(
        self, watcher: str, target_key: str, target_agent_id: str, provenance: str, *, promote_only: bool
    ) -> bool:
        """R25: the cursor's provenance; ``promote_only`` writes only over ``ambient``."""
        sql = SET_PROVENANCE_SQL + (PROMOTE_ONLY_CONDITION if promote_only else "")
        return self._db.execute(sql, (provenance, watcher, target_key, target_agent_id)).rowcount > 0

    def cursor_provenance(self, watcher: str, target_key: str, target_agent_id: str) -> str | None:
        """R26: the pair's provenance (``None``: no cursor), read where a wake is decided."""
        row = self._db.execute(PROVENANCE_SQL, (watcher, target_key, target_agent_id)).fetchone()
        return None if row is None else str(row[0])

    # -- retention --------------------------------------------------------------------------

    def prune_events(
        self,
        cutoff: float,
        max_rows: int,
        chunk_rows: int = PRUNE_CHUNK_ROWS,
        on_chunk: PruneObserver | None = None,
    ) -> dict[str, int]:
        """Delete events beyond the newest ``max_rows`` and those recorded before ``cutoff``.

        Two passes, each in chunks of about ``chunk_rows`` rows, each chunk one short
        transaction: first the row cap as a range of the primary key (every sequence up to a
        bound goes), then the retention window as a range of ``ix_events_recorded_at``. Both
        keep every statement on an index range, so a chunk's write lock stays short. Inside a
        chunk, before any row goes, the effective material watermark of the affected targets'
        pending cursors is written into their rows (R7) and the affected sessions' pruned
        watermark is raised (R13).
        """
        db = self._db
        # Every sequence <= beyond is over the row cap (None: the cap is not reached).
        beyond = _scalar(db.execute(
            "SELECT sequence FROM session_state_events ORDER BY sequence DESC LIMIT 1 OFFSET ?",
            (max_rows,),
        ))
        deleted = chunks = 0
        while beyond is not None:
            bound = _scalar(db.execute(
                "SELECT sequence FROM session_state_events WHERE sequence <= ?"
                " ORDER BY sequence LIMIT 1 OFFSET ?",
                (beyond, chunk_rows - 1),
            ))
            count = self._prune_chunk("NOT INDEXED", "sequence <= ?", (beyond if bound is None else bound,), on_chunk)
            if not count:
                break
            deleted, chunks = deleted + count, chunks + 1
        while True:
            bound = _scalar(db.execute(
                "SELECT recorded_at FROM session_state_events WHERE recorded_at < ?"
                " ORDER BY recorded_at LIMIT 1 OFFSET ?",
                (cutoff, chunk_rows - 1),
            ))
            if bound is None:
                count = self._prune_chunk(_BY_RECORDED_AT, "recorded_at < ?", (cutoff,), on_chunk)
            else:
                count = self._prune_chunk(_BY_RECORDED_AT, "recorded_at <= ?", (bound,), on_chunk)
            if not count:
                break
            deleted, chunks = deleted + count, chunks + 1
        return {"events": deleted, "chunks": chunks}

    def _prune_chunk(
        self, index_hint: str, where: str, args: tuple[Any, ...], on_chunk: PruneObserver | None = None
    ) -> int:
        # The hint keeps each chunk on its range: left alone, the planner prefers walking the
        # whole (session, sequence) index to serve the GROUP BY, which reads every row.
        db = self._db
        with self.transaction():
            affected = db.execute(
                f"SELECT session_key, agent_id, max(sequence) FROM session_state_events {index_hint}"
                f" WHERE {where} GROUP BY session_key, agent_id",
                args,
            ).fetchall()
            if not affected:
                return 0
            db.executemany(
                f"UPDATE session_watch_cursors AS c SET material_sequence = {self._effective_material}"
                " WHERE c.target_session_key = ? AND c.target_agent_id = ?"
                " AND c.notified_sequence > c.last_seen_sequence",
                [(k, a) for k, a, _ in affected],
            )
            db.executemany(
                "UPDATE session_state_heads SET pruned_max_sequence = max(pruned_max_sequence, ?)"
                " WHERE session_key = ? AND agent_id = ?",
                [(m, k, a) for k, a, m in affected],
            )
            deleted = int(
                db.execute(f"DELETE FROM session_state_events {index_hint} WHERE {where}", args).rowcount
            )
            if on_chunk is not None:
                heads = [
                    (k, a, int(_scalar(db.execute(
                        "SELECT pruned_max_sequence FROM session_state_heads WHERE session_key = ? AND agent_id = ?",
                        (k, a),
                    )) or 0))
                    for k, a, _ in affected
                ]
                cursors = [
                    (r[0], r[1], r[2], (int(r[3]), int(r[4]), int(r[5])))
                    for k, a, _ in affected
                    for r in db.execute(
                        "SELECT watcher_session_key, target_session_key, target_agent_id,"
                        " last_seen_sequence, notified_sequence, material_sequence"
                        " FROM session_watch_cursors WHERE target_session_key = ? AND target_agent_id = ?"
                        " AND notified_sequence > last_seen_sequence ORDER BY watcher_session_key",
                        (k, a),
                    ).fetchall()
                ]
                on_chunk(heads, cursors, deleted)
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
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
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
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        after = int(_scalar(db.execute("PRAGMA page_count")))
        return VacuumReport(
            before * page_size,
            after * page_size,
            f"{free_before} free pages returned; auto-vacuum is now incremental,"
            " so prune() gives freed pages back from now on",
        )

    def trace_statements(self) -> AbstractContextManager[list[str]]:
        """Inside the block, every statement this store's connection runs is appended to the
        list it yields (whitespace and a trailing ``;`` stripped): how tests check which
        transactions a maintenance step runs, without reaching into the connection."""
        return _traced(self._db)

    # -- inspection -------------------------------------------------------------------------

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table, in a stable order (tests compare before and after)."""
        tables = {
            "sessions": "session_key, agent_id",
            "session_state_events": "sequence",
            "session_state_heads": "session_key, agent_id",
            "session_watch_cursors": "watcher_session_key, target_session_key, target_agent_id",
        }
        return {
            name: self._db.execute(f"SELECT * FROM {name} ORDER BY {order}").fetchall()
            for name, order in tables.items()
        }

    def integrity_check(self) -> str:
        return str(_scalar(self._db.execute("PRAGMA integrity_check")))


class _Transaction:
    """``BEGIN IMMEDIATE``/``COMMIT`` at depth 0, ``SAVEPOINT``/``RELEASE`` when nested.

    A class rather than a generator context manager: it is entered on every event, and this
    costs about a microsecond less per use.
    """

    __slots__ = ("_store", "_name", "_mark")

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self._name = ""
        self._mark = 0

    # Driver errors become StorageError here, for every statement run inside the transaction:
    # a try block costs nothing until something is raised, so the hot path pays nothing.

    def __enter__(self) -> None:
        store = self._store
        store.lock.acquire()
        try:
            if store._depth == 0:
                store._db.execute("BEGIN IMMEDIATE")
            else:
                self._name = f"sp{store._depth}"
                self._mark = len(store._after_commit)
                store._db.execute(f"SAVEPOINT {self._name}")
        except BaseException as error:
            store.lock.release()
            if isinstance(error, DRIVER_ERRORS):
                raise store.storage_error(error) from error
            raise
        store._depth += 1

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        store = self._store
        store._depth -= 1
        db = store._db
        callbacks = store._after_commit
        try:
            if exc_type is None:
                try:
                    db.execute("RELEASE " + self._name if self._name else "COMMIT")
                except DRIVER_ERRORS as error:
                    # A failed COMMIT (disk full, busy) may leave the transaction open: end it.
                    self._roll_back(db, callbacks)
                    raise store.storage_error(error) from error
                if not self._name and callbacks:
                    store._after_commit = []
                    for callback in callbacks:
                        try:
                            callback()
                        except Exception:  # the data is committed: one bad callback must not hide it
                            log.exception("an after-commit callback failed")
                return
            self._roll_back(db, callbacks)
        finally:
            store.lock.release()
        if isinstance(exc, DRIVER_ERRORS):
            raise store.storage_error(exc) from exc

    def _roll_back(self, db: sqlite3.Connection, callbacks: list[Callable[[], object]]) -> None:
        # What was registered inside this level is dropped with it (R9).
        if self._name:
            del callbacks[self._mark:]
        else:
            callbacks.clear()
        # SQLite rolls the whole transaction back by itself after some errors (disk full,
        # I/O): then there is nothing left to undo here, and the outer level sees that too.
        if not db.in_transaction:
            return
        try:
            if self._name:
                db.execute(f"ROLLBACK TO {self._name}")
                db.execute(f"RELEASE {self._name}")
            else:
                db.execute("ROLLBACK")
        except DRIVER_ERRORS:
            pass  # the error being raised says more; a still-open transaction fails the next BEGIN


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


def _cursor_record(row: Sequence[Any]) -> CursorRecord:
    return CursorRecord(row[0], row[1], row[2], (int(row[3]), int(row[4]), int(row[5])), float(row[6]), row[7])
