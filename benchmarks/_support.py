"""Shared pieces of the benchmark suite: sizes, fixed clock, data builders, raw baseline.

The raw baseline (``RawLog``) is a plain ``sqlite3`` connection on a file whose schema was
created by the project's own ``SqliteStore`` (so tables, indexes and the partial index are
identical), with the same pragmas (WAL, synchronous=NORMAL, busy_timeout), autocommit
isolation with explicit ``BEGIN IMMEDIATE``/``COMMIT`` at the same boundaries as the project,
and constant statement strings that ``sqlite3`` prepares once and keeps in its cache.
It does the SQL work of each path and nothing else: no validation, no ORM, no protocol
machine, no in-memory notice queue.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from sessionstate import Gateway
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SqliteStore
from sessionstate.store.dialect import SQLITE
from sessionstate.store.sqlite import (
    AUTO_VACUUM_INCREMENTAL,
    BUSY_TIMEOUT_MS,
    PRUNE_CHUNK_ROWS,
    RECLAIM_STEP_PAGES,
)
from sessionstate.store.statements import CoreStatements

_STORE_SQL = CoreStatements(SQLITE, sorted(NOTIFYING_KINDS))
EVENT_PAGE_SQL = _STORE_SQL.event_page  # the store's own page read
HEAD_AND_EARLIEST_SQL = _STORE_SQL.head_and_earliest  # and its head read for changesSince

SMOKE = os.environ.get("SESSIONSTATE_BENCH_SMOKE", "") not in ("", "0")

REPO = Path(__file__).resolve().parent.parent
CACHE_DIR = REPO / ".benchmarks" / "cache"

# A fixed "now": every row is recent, so pruning only ever applies the row cap.
NOW = 1_800_000_000.0
KIND = "human_direct_message"  # notifying (R1)
TARGET = "agent:main:subagent:c1"
AGENT = "main"


def scaled(full: Any, smoke: Any) -> Any:
    """``full`` normally, ``smoke`` when SESSIONSTATE_BENCH_SMOKE=1."""
    return smoke if SMOKE else full


def rounds(full: int) -> int:
    return 2 if SMOKE else full


def clock() -> float:
    return NOW


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def watcher_key(i: int) -> str:
    return f"agent:main:subagent:w{i}"


def session_key(i: int) -> str:
    return f"agent:main:subagent:s{i}"


# -- building databases --------------------------------------------------------------------


def create_schema(path: Path) -> None:
    """Create an empty database with the project's own store (identical DDL and pragmas)."""
    store = SqliteStore(url_of(path), notifying_kinds=NOTIFYING_KINDS)
    store.close()


def connect_raw(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    return db


class SideConnection:
    """The store's own connection for untimed setup writes between rounds, through the
    store's supported ``SqliteStore.run_sql`` (``execute``/``executemany`` as on a ``sqlite3``
    connection, so the setup helpers take either). Not a second connection: another
    connection's commit makes the store's connection drop its page cache, and every timed
    round would pay for that."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store

    def execute(self, sql: str, params: Any = ()) -> list[Any]:
        return self.store.run_sql(sql, params)

    def executemany(self, sql: str, rows: Any) -> None:
        self.store.run_sql(sql, rows, many=True)


def side_connection(gw: Gateway) -> SideConnection:
    store = gw.store
    if not isinstance(store, SqliteStore):
        raise TypeError("the side connection is the SQLite store's (the PostgreSQL benchmarks use their own)")
    return SideConnection(store)


def bulk_sessions(db: sqlite3.Connection, keys: list[str], agent: str = AGENT) -> None:
    db.execute("BEGIN IMMEDIATE")
    db.executemany(
        "INSERT INTO sessions (session_key, agent_id, kind, created_at, updated_at)"
        " VALUES (?, ?, 'subagent', ?, ?)",
        [(k, agent, NOW, NOW) for k in keys],
    )
    db.executemany(
        "INSERT INTO session_state_heads (session_key, agent_id, last_sequence,"
        " pruned_max_sequence, updated_at) VALUES (?, ?, 0, 0, ?)",
        [(k, agent, NOW) for k in keys],
    )
    db.execute("COMMIT")


def bulk_events(db: sqlite3.Connection, keys: list[str], rows: int, agent: str = AGENT, batch: int = 50_000) -> None:
    """Append ``rows`` events round-robin over ``keys`` (executemany) and set the heads."""
    done = 0
    while done < rows:
        n = min(batch, rows - done)
        db.execute("BEGIN IMMEDIATE")
        db.executemany(
            "INSERT INTO session_state_events (session_key, agent_id, kind, actor_type,"
            " summary, occurred_at, recorded_at) VALUES (?, ?, ?, 'human', 'bulk', ?, ?)",
            ((keys[(done + i) % len(keys)], agent, KIND if (done + i) % 4 == 0 else "run_completed", NOW, NOW)
             for i in range(n)),
        )
        db.execute("COMMIT")
        done += n
    db.execute("BEGIN IMMEDIATE")
    db.execute(
        "UPDATE session_state_heads SET last_sequence = coalesce((SELECT max(sequence)"
        " FROM session_state_events e WHERE e.session_key = session_state_heads.session_key"
        " AND e.agent_id = session_state_heads.agent_id), 0)"
    )
    db.execute("COMMIT")


def bulk_cursors(db: sqlite3.Connection, pairs: list[tuple[str, str]], positions: tuple[int, int, int], agent: str = AGENT) -> None:
    db.execute("BEGIN IMMEDIATE")
    db.executemany(
        "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key,"
        " target_agent_id, last_seen_sequence, notified_sequence, material_sequence, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(w, t, agent, *positions, NOW) for w, t in pairs],
    )
    db.execute("COMMIT")


def build_log_file(path: Path, *, rows: int, sessions: int, watchers: int = 3) -> None:
    """A database with ``sessions`` sessions, ``rows`` events, and ``watchers`` watcher
    sessions seeded caught-up on TARGET (which is session 0's neighbour TARGET)."""
    create_schema(path)
    db = connect_raw(path)
    keys = [TARGET] + [session_key(i) for i in range(1, sessions)]
    bulk_sessions(db, keys + [watcher_key(i) for i in range(watchers)])
    bulk_events(db, keys, rows)
    head = db.execute(
        "SELECT last_sequence FROM session_state_heads WHERE session_key = ?", (TARGET,)
    ).fetchone()[0]
    bulk_cursors(db, [(watcher_key(i), TARGET) for i in range(watchers)], (head, head, head))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def cached_log_file(tmp: Path, *, rows: int, sessions: int, watchers: int = 3) -> Path:
    """A private copy of a log file; files of 100k rows and more are built once and cached
    under .benchmarks/cache/ (keyed by size and by the schema the store creates)."""
    dest = tmp / f"log-{rows}-{sessions}-{watchers}.db"
    if rows < 100_000:
        build_log_file(dest, rows=rows, sessions=sessions, watchers=watchers)
        return dest
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    cached = CACHE_DIR / f"log-{rows}-{sessions}-{watchers}-{schema_fingerprint(tmp)}.db"
    if not cached.exists():
        partial = cached.with_suffix(".partial")
        for leftover in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
            leftover.unlink(missing_ok=True)
        build_log_file(partial, rows=rows, sessions=sessions, watchers=watchers)
        partial.rename(cached)
    shutil.copyfile(cached, dest)
    return dest


def schema_fingerprint(tmp: Path) -> str:
    import hashlib

    probe = tmp / "schema-probe.db"
    create_schema(probe)
    db = sqlite3.connect(probe)
    ddl = "\n".join(r[0] for r in db.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name"))
    db.close()
    return hashlib.sha256(ddl.encode()).hexdigest()[:12]


def open_gateway(path: Path, **kwargs: Any) -> Gateway:
    return Gateway.open(url_of(path), clock=clock, **kwargs)


def reset_caught_up(db: sqlite3.Connection | SideConnection, target: str = TARGET, watcher: str | None = None) -> None:
    """Put the cursors on ``target`` (only ``watcher``'s when given) back to caught up at the
    target's head, as a drain would leave them (untimed setup)."""
    db.execute(
        "UPDATE session_watch_cursors SET last_seen_sequence = h.last_sequence,"
        " notified_sequence = h.last_sequence, material_sequence = h.last_sequence"
        " FROM (SELECT last_sequence FROM session_state_heads WHERE session_key = ? AND agent_id = ?) AS h"
        " WHERE target_session_key = ? AND target_agent_id = ? AND (? IS NULL OR watcher_session_key = ?)",
        (target, AGENT, target, AGENT, watcher, watcher),
    )


def make_pending(db: sqlite3.Connection, target: str = TARGET, skip: str | None = None) -> None:
    """Give every cursor on ``target`` (but ``skip``'s) a pending notice: L < N = M."""
    db.execute(
        "UPDATE session_watch_cursors SET last_seen_sequence = 0,"
        " notified_sequence = h.last_sequence, material_sequence = h.last_sequence"
        " FROM (SELECT last_sequence FROM session_state_heads WHERE session_key = ? AND agent_id = ?) AS h"
        " WHERE target_session_key = ? AND target_agent_id = ? AND watcher_session_key IS NOT ?",
        (target, AGENT, target, AGENT, skip),
    )


def clear_queue(gw: Gateway) -> None:
    gw.ops.forget_queued()  # benchmark setup only: forget queued notices


# -- timing write locks from outside -------------------------------------------------------


class LockTimer:
    """Wraps ``store.transaction`` (instance attribute, benchmark only) and records how long each
    outermost transaction was open: from BEGIN IMMEDIATE to COMMIT."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.original = store.transaction
        self.durations: list[float] = []
        store.transaction = self.transaction  # type: ignore[method-assign]

    @contextmanager
    def transaction(self) -> Iterator[None]:
        outer = not self.store.in_transaction
        start = time.perf_counter()
        with self.original():
            yield
        if outer:
            self.durations.append(time.perf_counter() - start)


# -- the raw sqlite3 baseline --------------------------------------------------------------

_KINDS = ", ".join(f"'{k}'" for k in sorted(NOTIFYING_KINDS))

INSERT_EVENT = (
    "INSERT INTO session_state_events (session_key, agent_id, kind, actor_type, actor_id,"
    " run_id, summary, payload, occurred_at, recorded_at, dedupe_key)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (dedupe_key) DO NOTHING RETURNING sequence"
)
UPDATE_HEAD = (
    "UPDATE session_state_heads SET last_sequence = ?, updated_at = ?"
    " WHERE session_key = ? AND agent_id = ?"
)
SELECT_CAUGHT_UP = (
    "SELECT watcher_session_key, last_seen_sequence, material_sequence, provenance"
    " FROM session_watch_cursors INDEXED BY ix_cursors_target_caught_up"
    " WHERE target_session_key = ? AND target_agent_id = ? AND notified_sequence = last_seen_sequence"
)
UPSERT_CURSOR = (
    "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key, target_agent_id,"
    " last_seen_sequence, notified_sequence, material_sequence, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (watcher_session_key, target_session_key, target_agent_id) DO UPDATE SET"
    " last_seen_sequence = excluded.last_seen_sequence, notified_sequence = excluded.notified_sequence,"
    " material_sequence = excluded.material_sequence, updated_at = excluded.updated_at"
)
# The project's own page statement: the baseline reads exactly what the project reads.
SELECT_PAGE = EVENT_PAGE_SQL
SELECT_HEAD_AND_EARLIEST = HEAD_AND_EARLIEST_SQL
ACK_CURSOR = (
    "UPDATE session_watch_cursors SET last_seen_sequence = notified_sequence, updated_at = ?"
    " WHERE watcher_session_key = ? AND target_session_key = ? AND target_agent_id = ?"
)
EFFECTIVE_MATERIAL = f"""CASE WHEN c.notified_sequence > c.last_seen_sequence THEN max(c.material_sequence,
    coalesce((SELECT max(e.sequence) FROM session_state_events e WHERE e.session_key = c.target_session_key
      AND e.agent_id = c.target_agent_id AND e.sequence > c.notified_sequence AND e.kind IN ({_KINDS})
      AND (e.actor_id IS NULL OR e.actor_id != c.watcher_session_key)), 0))
    ELSE c.material_sequence END"""
SELECT_BEHIND = (
    "SELECT c.watcher_session_key, c.target_session_key, c.target_agent_id, c.last_seen_sequence,"
    f" c.notified_sequence, {EFFECTIVE_MATERIAL}, c.updated_at FROM session_watch_cursors c"
    " WHERE c.notified_sequence > c.last_seen_sequence"
    " AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_key = c.watcher_session_key)"
    " ORDER BY c.watcher_session_key, c.target_session_key, c.target_agent_id"
)
PRUNE_BEYOND = "SELECT sequence FROM session_state_events ORDER BY sequence DESC LIMIT 1 OFFSET ?"
# The same two passes as the project: the row cap as a primary-key range, then the retention
# window as a range of ix_events_recorded_at, each chunk pinned to its range.
PRUNE_CAP_BOUND = (
    "SELECT sequence FROM session_state_events WHERE sequence <= ? ORDER BY sequence LIMIT 1 OFFSET ?"
)
PRUNE_AGE_BOUND = (
    "SELECT recorded_at FROM session_state_events WHERE recorded_at < ? ORDER BY recorded_at LIMIT 1 OFFSET ?"
)
PRUNE_BY_SEQUENCE = ("NOT INDEXED", "sequence <= ?")
PRUNE_BY_AGE = ("INDEXED BY ix_events_recorded_at", "recorded_at < ?")
PRUNE_BY_AGE_BOUND = ("INDEXED BY ix_events_recorded_at", "recorded_at <= ?")
PRUNE_MATERIAL = (
    f"UPDATE session_watch_cursors AS c SET material_sequence = {EFFECTIVE_MATERIAL}"
    " WHERE c.target_session_key = ? AND c.target_agent_id = ? AND c.notified_sequence > c.last_seen_sequence"
)
PRUNE_WATERMARK = (
    "UPDATE session_state_heads SET pruned_max_sequence = max(pruned_max_sequence, ?)"
    " WHERE session_key = ? AND agent_id = ?"
)
SELECT_EXPIRED = (
    "SELECT c.watcher_session_key FROM session_watch_cursors c LEFT JOIN session_state_heads h"
    " ON h.session_key = c.target_session_key AND h.agent_id = c.target_agent_id"
    " WHERE c.updated_at < ? AND coalesce(h.updated_at, 0) < ?"
)


class RawLog:
    """The same SQL work as each project path, on a raw ``sqlite3`` connection."""

    def __init__(self, path: Path) -> None:
        self.db = connect_raw(path)
        self.chunk_durations: list[float] = []

    def close(self) -> None:
        self.db.close()

    def _append(self, key: str, kind: str, actor_id: str | None, now: float) -> None:
        db = self.db
        sequence = db.execute(
            INSERT_EVENT, (key, AGENT, kind, "human", actor_id, None, "hello", None, now, now, None)
        ).fetchone()[0]
        db.execute(UPDATE_HEAD, (sequence, now, key, AGENT))
        if kind in NOTIFYING_KINDS:
            # the cursor decision: caught-up watchers other than the actor freeze at the event
            changes = [
                (w, key, AGENT, last, sequence, sequence, now)
                for w, last, _, _ in db.execute(SELECT_CAUGHT_UP, (key, AGENT)).fetchall()
                if w != actor_id
            ]
            if changes:
                db.executemany(UPSERT_CURSOR, changes)

    def record(self, key: str = TARGET, kind: str = KIND, actor_id: str | None = None) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        self._append(key, kind, actor_id, NOW)
        db.execute("COMMIT")

    def record_batch(self, n: int, key: str = TARGET, savepoints: bool = False) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        for _ in range(n):
            if savepoints:
                db.execute("SAVEPOINT sp1")
            self._append(key, KIND, None, NOW)
            if savepoints:
                db.execute("RELEASE sp1")
        db.execute("COMMIT")

    def page(self, key: str, after: int, limit: int = 201) -> list[Any]:
        db = self.db
        head = db.execute(SELECT_HEAD_AND_EARLIEST, (key, AGENT)).fetchone()
        rows = db.execute(SELECT_PAGE, (key, AGENT, after, limit)).fetchall()
        return [head, rows]

    def ack(self, watcher: str, target: str = TARGET) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        db.execute(ACK_CURSOR, (NOW, watcher, target, AGENT))
        db.execute("COMMIT")

    def prune(self, max_rows: int, cutoff: float, chunk_rows: int = PRUNE_CHUNK_ROWS) -> int:
        db = self.db
        row = db.execute(PRUNE_BEYOND, (max_rows,)).fetchone()
        beyond = row[0] if row else 0
        deleted = 0
        while beyond:
            bound = db.execute(PRUNE_CAP_BOUND, (beyond, chunk_rows - 1)).fetchone()
            count = self._prune_chunk(PRUNE_BY_SEQUENCE, (bound[0] if bound else beyond,))
            if not count:
                break
            deleted += count
        while True:
            bound = db.execute(PRUNE_AGE_BOUND, (cutoff, chunk_rows - 1)).fetchone()
            if bound is None:
                count = self._prune_chunk(PRUNE_BY_AGE, (cutoff,))
            else:
                count = self._prune_chunk(PRUNE_BY_AGE_BOUND, (bound[0],))
            if not count:
                break
            deleted += count
        db.execute("BEGIN IMMEDIATE")
        db.execute(SELECT_EXPIRED, (cutoff, cutoff)).fetchall()
        db.execute("COMMIT")
        self._reclaim()
        return deleted

    def _reclaim(self) -> None:
        """The project's reclaim steps (same SQL): free pages back in steps of
        RECLAIM_STEP_PAGES, one transaction each (timed like a chunk), then a passive checkpoint."""
        db = self.db
        if db.execute("PRAGMA auto_vacuum").fetchone()[0] != AUTO_VACUUM_INCREMENTAL:
            return
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        reclaimed = 0
        while free:
            start = time.perf_counter()
            db.execute("BEGIN IMMEDIATE")
            for _ in range(min(free, RECLAIM_STEP_PAGES)):
                db.execute("PRAGMA incremental_vacuum(1)").close()
            db.execute("COMMIT")
            self.chunk_durations.append(time.perf_counter() - start)
            after = db.execute("PRAGMA freelist_count").fetchone()[0]
            if after >= free:
                break
            reclaimed, free = reclaimed + free - after, after
        if reclaimed:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _prune_chunk(self, range_: tuple[str, str], args: tuple[Any, ...]) -> int:
        db = self.db
        hint, where = range_
        start = time.perf_counter()
        db.execute("BEGIN IMMEDIATE")
        affected = db.execute(
            f"SELECT session_key, agent_id, max(sequence) FROM session_state_events {hint}"
            f" WHERE {where} GROUP BY session_key, agent_id", args,
        ).fetchall()
        count = 0
        if affected:
            db.executemany(PRUNE_MATERIAL, [(k, a) for k, a, _ in affected])
            db.executemany(PRUNE_WATERMARK, [(m, k, a) for k, a, m in affected])
            count = db.execute(f"DELETE FROM session_state_events {hint} WHERE {where}", args).rowcount
        db.execute("COMMIT")
        if count:
            self.chunk_durations.append(time.perf_counter() - start)
        return count

    def sweep(self) -> int:
        """Read every cursor that owes a notice and write the swept positions (L, M, M)."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        rows = db.execute(SELECT_BEHIND).fetchall()
        changes = [(w, t, a, last, m, m, NOW) for w, t, a, last, n, m, _ in rows if n != m]
        if changes:
            db.executemany(UPSERT_CURSOR, changes)
        db.execute("COMMIT")
        return len(rows)


def measure(
    benchmark: Any,
    fn: Callable[..., Any],
    *,
    key: str | None = None,
    setup: Callable[[], None] | None = None,
    rounds_full: int = 200,
    warmup: int = 10,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    **info: Any,
) -> Any:
    """Run ``fn`` under pytest-benchmark's pedantic mode (one call per round, ``setup`` untimed
    before each) and tag the result so ``report.py`` can pair it with its baseline."""
    kwargs = kwargs or {}
    if key is not None:
        benchmark.extra_info["key"] = key
    benchmark.extra_info.update(info)
    benchmark.extra_info["smoke"] = SMOKE
    if setup is None:
        return benchmark.pedantic(fn, args=args, kwargs=kwargs, rounds=rounds(rounds_full),
                                  warmup_rounds=0 if SMOKE else warmup)

    def wrapped() -> tuple[tuple[Any, ...], dict[str, Any]]:
        setup()
        return args, kwargs

    return benchmark.pedantic(fn, setup=wrapped, rounds=rounds(rounds_full),
                              warmup_rounds=0 if SMOKE else warmup)


def paired(benchmark: Any, project: Callable[..., Any], other: Callable[..., Any], *, key: str,
           rounds_full: int, setup_project: Callable[[], None] | None = None,
           setup_other: Callable[[], None] | None = None, args: tuple[Any, ...] = (),
           kwargs: dict[str, Any] | None = None, other_args: tuple[Any, ...] = (),
           other_name: str = "raw", warmup: int = 10, **info: Any) -> Any:
    """Time ``project`` under pytest-benchmark and ``other`` (the baseline) in the same rounds,
    alternately (each round: the baseline, then the project, each after its untimed setup),
    so that the slow and fast phases of a shared machine, which last seconds, move both sides
    alike; measured in separate benchmarks, one side could meet a slow phase the other
    missed, and a ratio moved by up to 2x between runs here. The baseline's median goes into
    ``extra_info[f"{other_name}_median"]``, which ``report.py`` reads as ``key#other_name``."""
    other_times: list[float] = []

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        if setup_other is not None:
            setup_other()
        began = time.perf_counter()
        other(*other_args)
        other_times.append(time.perf_counter() - began)
        if setup_project is not None:
            setup_project()
        return args, kwargs or {}

    benchmark.extra_info.update(key=key, smoke=SMOKE, **info)
    result = benchmark.pedantic(project, setup=setup, rounds=rounds(rounds_full),
                                warmup_rounds=0 if SMOKE else warmup)
    timed = sorted(other_times[len(other_times) - rounds(rounds_full):])  # the warm-up rounds left out
    benchmark.extra_info[f"{other_name}_median"] = timed[len(timed) // 2]
    return result
