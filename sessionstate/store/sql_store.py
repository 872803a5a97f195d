"""The SQL layer both backends share: the core tables' methods and the unit of work.

``SqlStore`` holds every method whose SQL and whose logic are the same on SQLite and on
PostgreSQL, on the statements ``CoreStatements`` builds for the backend's dialect. A backend
subclass supplies how a statement runs (``_run``, ``_run_many``), what its transactions say
(``_begin``, ``_commit``, ``_control``, ``_rollback``, ...) and the few decisions that truly
differ: appending (PostgreSQL locks the head row first), the locks a server backend takes
before reading cursors it is about to change (``_lock_for_decision``, ``_cursors``), a
pruning chunk, vacuuming.

``Transaction`` is the one unit of work (contract ``Transactions``): the store's lock,
``BEGIN``/``COMMIT`` at depth 0, a savepoint when nested, after-commit callbacks dropped with
the level that registered them, and the transaction observers (the protocol trace) told of
every level's begin, the outermost commit and every end.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..errors import StorageError
from .contract import TransactionObserver
from .records import (
    CaughtUpRow,
    ChangesPage,
    CursorRecord,
    EventRecord,
    EventRow,
    Head,
    PositionsTuple,
    PruneObserver,
    RecordedAlone,
    SessionRecord,
)
from .statements import (
    BEHIND,
    EVERY,
    EXPIRED,
    HELD_BY,
    HELD_PENDING,
    NAMING,
    PENDING,
    TARGET_ORDER,
    CURSOR_ORDER,
    CoreStatements,
    cursor_record,
    first_value,
)

log = logging.getLogger("sessionstate")

Target = tuple[str, str]
# The durability levels a store is opened with (SQLite's PRAGMA synchronous names them;
# PostgreSQL maps them onto synchronous_commit).
SYNCHRONOUS_LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")


class SqlStore:
    """The shared methods; a backend subclass supplies the hooks (module docstring)."""

    DRIVER_ERRORS: tuple[type[BaseException], ...] = ()
    _sql: CoreStatements
    _run: Callable[..., Any]  # (sql, args=()) -> a cursor: fetchone, fetchall, rowcount
    _run_many: Callable[[str, Sequence[Sequence[Any]]], Any]

    def _start_units_of_work(self) -> None:
        self._depth = 0
        # after_commit callbacks of the open transaction, in registration order; each
        # savepoint remembers where its own start (a rollback drops only those).
        self._after_commit: list[Callable[[], object]] = []
        self._observers: list[TransactionObserver] = []
        # The gateway's runner threads share this one connection: the lock serialises them.
        self.lock = threading.RLock()

    # -- the unit of work -------------------------------------------------------------------

    def transaction(self) -> "Transaction":
        """The unit of work: holds ``lock``; ``BEGIN``/``COMMIT`` at depth 0, a savepoint when
        nested; rolls back (the savepoint only, when nested) and re-raises on error, a driver
        error as ``StorageError``."""
        return Transaction(self)

    def after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` after the outermost commit (at once outside a transaction);
        dropped if the transaction, or the savepoint it was registered in, rolls back."""
        if self._depth:
            self._after_commit.append(callback)
        else:
            callback()

    def witness_commit(self) -> None:
        """R29's commit witness: nothing to do where the commit is local (a server backend
        overrides it)."""

    def observe_transactions(self, observer: TransactionObserver) -> None:
        """Tell ``observer`` of every transaction from now on (contract ``Transactions``)."""
        self._observers.append(observer)

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

    # Hooks of the unit of work, each backend's own.

    def _begin(self) -> None:
        raise NotImplementedError

    def _commit(self) -> None:
        """COMMIT (with what must go along with it); raises ``StorageError``."""
        raise NotImplementedError

    def _control(self, sql: str) -> None:
        """A SAVEPOINT/RELEASE statement; raises ``StorageError``."""
        raise NotImplementedError

    def _rollback(self) -> None:
        """ROLLBACK; never raises (the error being raised says more)."""
        raise NotImplementedError

    def _rollback_to(self, name: str) -> None:
        raise NotImplementedError

    def _level_mark(self) -> Any:
        """What a savepoint restores when it rolls back (the bookkeeping made inside it)."""
        return len(self._after_commit)

    def _restore_level(self, mark: Any) -> None:
        del self._after_commit[mark:]

    def _forget_transaction(self) -> None:
        """The outermost level ended: drop its bookkeeping."""
        self._after_commit = []

    def storage_error(self, exc: BaseException) -> StorageError:
        raise NotImplementedError

    # -- sessions ---------------------------------------------------------------------------

    def insert_session(self, record: SessionRecord) -> bool:
        # A row already there (another process created it between the caller's look and this
        # write) inserts nothing: False, and the caller raises SessionExists.
        if self._run(self._sql.insert_session, record).rowcount == 0:
            return False
        self._run(self._sql.insert_head, (record.session_key, record.agent_id, record.created_at))
        return True

    def get_session(self, key: str, agent_id: str) -> SessionRecord | None:
        row = self._run(self._sql.get_session, (key, agent_id)).fetchone()
        return SessionRecord(*row) if row else None

    def agents_with_session_key(self, key: str) -> list[str]:
        return [r[0] for r in self._run(self._sql.agents_with_key, (key,)).fetchall()]

    def list_sessions(self) -> list[SessionRecord]:
        return [SessionRecord(*r) for r in self._run(self._sql.list_sessions).fetchall()]

    def delete_session_data(self, key: str, agent_id: str) -> int:
        """Remove a session's events, head and registry row, and unlink its children;
        returns the number of events removed."""
        args = (key, agent_id)
        self._lock_for_decision([args])
        removed = self._run(self._sql.delete_events, args).rowcount
        self._run(self._sql.delete_head, args)
        self._run(self._sql.delete_session, args)
        # Its children lose their parent link: a later session with the same key is not their
        # parent (left dangling, the link would re-bind to it and could close a cycle).
        self._run(self._sql.unlink_children, args)
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

        A dedupe key already in the log returns the existing sequence and bumps nothing.
        Must run inside ``transaction()``; raises ``UnknownSession`` (rolling back with it) when
        the session has no head row.
        """
        return self._append((key, agent_id, kind, actor_type, actor_id, run_id, summary, payload,
                             occurred_at, recorded_at, dedupe_key))

    def append_events(self, rows: Sequence[EventRow]) -> list[tuple[int, bool]]:
        """Append several events in the caller's transaction, in order: ``append_event``'s
        ``(sequence, inserted)`` per row (a dedupe key repeated in ``rows`` finds the first).
        Here ``append_event`` for one row after the other: an embedded database has no
        round trip to save."""
        append = self.append_event
        return [append(*row) for row in rows]

    def append_and_read(
        self, rows: Sequence[EventRow], watched: Sequence[Target]
    ) -> tuple[list[tuple[int, bool]], dict[Target, list[CaughtUpRow]]]:
        """A batch's start: its sessions' heads locked (key order), ``append_events(rows)``,
        then ``caught_up_watchers_of(watched)`` (nothing read when ``watched`` is empty)."""
        self.lock_targets({(row[0], row[1]) for row in rows})
        appended = self.append_events(rows)
        return appended, self.caught_up_watchers_of(list(dict.fromkeys(watched))) if watched else {}

    def record_alone(self, row: EventRow) -> "RecordedAlone | None":
        """A lone record decided in the database in one round trip (contract ``SignalLog``):
        ``None`` here, where a statement costs no round trip; the caller decides in Python."""
        return None

    def _append(self, row: EventRow) -> tuple[int, bool]:
        """``append_event`` for one row: the backend's own."""
        raise NotImplementedError

    def head(self, key: str, agent_id: str) -> Head | None:
        """The head; inside a transaction a server backend locks its row first (a seed reads it)."""
        self._lock_for_decision([(key, agent_id)])
        row = self._run(self._sql.head, (key, agent_id)).fetchone()
        return Head(int(row[0]), int(row[1])) if row else None

    def events_after(self, key: str, agent_id: str, after: int, limit: int) -> list[EventRecord]:
        rows = self._run(self._sql.events_after, (key, agent_id, after, limit)).fetchall()
        return [EventRecord(*r) for r in rows]

    def changes_page(self, key: str, agent_id: str, after: int, limit: int) -> ChangesPage | None:
        """``changesSince``'s read (contract ``SignalLog``): the head with the earliest held
        sequence, then the page as plain tuples (``contract.EventPageRow``)."""
        head = self._run(self._sql.head_and_earliest, (key, agent_id)).fetchone()
        if head is None:
            return None
        return ChangesPage(head[0], head[1], head[2], self._page_events(key, agent_id, after, limit, head[0]))

    def _page_events(self, key: str, agent_id: str, after: int, limit: int, last_sequence: int) -> list[Any]:
        """The page's rows (``contract.EventPageRow``) of a session whose newest sequence is
        ``last_sequence``; a backend may read them its own way."""
        return self._run(self._sql.event_page, (key, agent_id, after, limit)).fetchall()

    def sequence_high_water(self) -> int:
        """The largest sequence ever assigned (pruned or deleted ones included); 0 before any."""
        return int(first_value(self._run(self._sql.sequence_high_water).fetchone()) or 0)

    def event_count(self) -> int:
        return int(first_value(self._run(self._sql.event_count).fetchone()))

    # -- cursors ----------------------------------------------------------------------------

    def cursor(self, watcher: str, target_key: str, target_agent_id: str) -> CursorRecord | None:
        """A cursor with its effective positions; inside a transaction a server backend locks
        the target's head before the read (the caller is about to fire a transition on it)."""
        self._lock_for_decision([(target_key, target_agent_id)])
        row = self._run(self._sql.cursor, (watcher, target_key, target_agent_id)).fetchone()
        return cursor_record(row) if row else None

    def caught_up_watchers(self, target_key: str, target_agent_id: str) -> list[CaughtUpRow]:
        """Watchers of a target whose cursor is caught up (the partial index serves this);
        called after ``append_event`` locked the target's head."""
        rows = self._run(self._sql.caught_up_watchers, (target_key, target_agent_id)).fetchall()
        return [(r[0], (r[1], r[1], r[2]), r[3]) for r in rows]

    def caught_up_watchers_of(self, targets: Sequence[Target]) -> dict[Target, list[CaughtUpRow]]:
        """``caught_up_watchers`` of several targets (a group commit's notifying events),
        each target's rows in the order its own read returns them; a target without any is
        left out. Here one read per target: an embedded database has no round trip to save."""
        read = self._sql.caught_up_watchers
        found = {}
        for target in targets:
            rows = self._run(read, target).fetchall()
            if rows:
                found[target] = [(r[0], (r[1], r[1], r[2]), r[3]) for r in rows]
        return found

    def cursors_behind(self) -> list[CursorRecord]:
        """Cursors with a notice owed whose watcher exists. Inside a transaction (the sweep)
        on a server backend, those whose target was not locked first are left out instead of
        locked out of key order: they became owed after the lock, and their notice was queued
        where they froze."""
        return self._cursors(BEHIND, (), extend=False)

    def cursors_held_by(self, watcher: str) -> list[CursorRecord]:
        return self._cursors(HELD_BY, (watcher,), order=TARGET_ORDER)

    def pending_cursors_held_by(self, watcher: str) -> list[CursorRecord]:
        return self._cursors(HELD_PENDING, (watcher,), order=TARGET_ORDER)

    def cursors_naming(self, key: str, agent_id: str) -> list[CursorRecord]:
        # The session's own head joins the ordered lock: delete_session_data removes it.
        return self._cursors(NAMING, (key, key, agent_id), also_lock=[(key, agent_id)])

    def all_cursors(self) -> list[CursorRecord]:
        return self._cursors(EVERY, ())

    def expired_cursors(self, cutoff: float) -> list[CursorRecord]:
        """Cursors whose row and whose target's head were both last updated before cutoff."""
        return self._cursors(EXPIRED, (cutoff, cutoff))

    def _cursors(
        self,
        condition: str,
        args: tuple[Any, ...],
        order: str = CURSOR_ORDER,
        also_lock: Sequence[Target] = (),
        extend: bool = True,
    ) -> list[CursorRecord]:
        """The cursors matching ``condition`` (a server backend locks their targets first)."""
        return [cursor_record(r) for r in self._run(self._sql.cursors(condition, order), args).fetchall()]

    def put_cursors(
        self,
        target_key: str,
        target_agent_id: str,
        changes: Sequence[tuple[str, PositionsTuple | None]],
        now: float,
        *,
        with_commit: bool = False,
    ) -> None:
        """Write new positions (insert or update) or delete (``None``) for watchers of a
        target; ``with_commit`` as ``put_pair_cursors``'."""
        upserts = [
            (watcher, target_key, target_agent_id, p[0], p[1], p[2], now)
            for watcher, p in changes
            if p is not None
        ]
        if with_commit and upserts and len(upserts) == len(changes) and self._write_with_commit(upserts):
            return
        if len(upserts) == 1:
            self._run(self._sql.put_cursor, upserts[0])
        elif upserts:
            self._put_cursor_rows(upserts)
        if len(upserts) < len(changes):
            self._run_many(self._sql.delete_cursor, [(w, target_key, target_agent_id) for w, p in changes if p is None])

    def put_pair_cursors(
        self, changes: Sequence[tuple[str, Target, PositionsTuple | None]], now: float, *, with_commit: bool = False
    ) -> None:
        """``put_cursors`` for pairs of several targets: ``(watcher, target, positions)``, a
        pair named twice ends at its last positions. Here the rows one after the other, at
        once whatever ``with_commit`` says (no round trip to save)."""
        upserts, deletes = last_changes(changes, now)
        if upserts:
            self._run_many(self._sql.put_cursor, upserts)
        if deletes:
            self._run_many(self._sql.delete_cursor, deletes)

    def _write_with_commit(self, upserts: list[tuple[Any, ...]]) -> bool:
        """Hold ``upserts`` back for the outermost ``COMMIT``'s own message; ``False`` (write
        them now) where a statement costs no round trip, or not in the outermost level."""
        return False

    def pending_for_drain(self, watcher: str) -> list[CursorRecord]:
        """A drain's start (contract ``CursorTable``): the heads of the watcher's targets
        locked, then its pending cursors read with their effective positions."""
        self.lock_watcher_targets(watcher)
        return self._cursors(HELD_PENDING, (watcher,), order=TARGET_ORDER)

    def lock_watcher_targets(self, watcher: str) -> None:
        """Lock the heads of the targets ``watcher`` holds cursors on (the backend's own)."""
        raise NotImplementedError

    def _put_cursor_rows(self, upserts: list[tuple[Any, ...]]) -> None:
        """Several cursor upserts (a backend may send them as one statement)."""
        self._run_many(self._sql.put_cursor, upserts)

    def has_watchers(self, target_key: str, target_agent_id: str) -> bool:
        """R24: whether any cursor targets the session (the target index serves this)."""
        return self._run(self._sql.has_watchers, (target_key, target_agent_id)).fetchone() is not None

    def set_provenance(
        self, watcher: str, target_key: str, target_agent_id: str, provenance: str, *, promote_only: bool
    ) -> bool:
        """R25: the cursor's provenance; ``promote_only`` writes only over ``ambient``. Runs in
        the seed's transaction, which already locked the target's head."""
        sql = self._sql.promote_provenance if promote_only else self._sql.set_provenance
        return int(self._run(sql, (provenance, watcher, target_key, target_agent_id)).rowcount) > 0

    def cursor_provenance(self, watcher: str, target_key: str, target_agent_id: str) -> str | None:
        """R26: the pair's provenance (``None``: no cursor), read where a wake is decided."""
        row = self._run(self._sql.provenance, (watcher, target_key, target_agent_id)).fetchone()
        return None if row is None else str(row[0])

    def lock_targets(self, targets: Iterable[Target]) -> None:
        """Lock the targets' heads in key order (the backend's own; contract ``Store``)."""
        raise NotImplementedError

    def _lock_for_decision(self, targets: Sequence[Target]) -> None:
        """Inside a transaction, before reading what a transition will change: a server
        backend locks the targets' heads in key order. Nothing where one write lock is held."""

    # -- retention --------------------------------------------------------------------------

    def prune_events(
        self,
        cutoff: float,
        max_rows: int,
        chunk_rows: int | None = None,
        on_chunk: PruneObserver | None = None,
    ) -> dict[str, int]:
        """Delete events beyond the newest ``max_rows`` and those recorded before ``cutoff``.

        Two passes, each in chunks of about ``chunk_rows`` rows (the backend's
        ``PRUNE_CHUNK_ROWS`` by default), each chunk one short transaction: first the row cap
        as a range of the primary key (every sequence up to a bound goes), then the retention
        window as a range of ``ix_events_recorded_at``. Both keep every statement on an index
        range, so a chunk's write lock stays short. Inside a chunk, before any row goes, the
        effective material watermark of the affected targets' pending cursors is written into
        their rows (R7) and the affected sessions' pruned watermark is raised (R13).
        """
        rows = self.PRUNE_CHUNK_ROWS if chunk_rows is None else chunk_rows  # type: ignore[attr-defined]
        sql = self._sql
        # Every sequence <= beyond is over the row cap (None: the cap is not reached).
        beyond = first_value(self._run(sql.prune_beyond, (max_rows,)).fetchone())
        deleted = chunks = 0
        while beyond is not None:
            bound = first_value(self._run(sql.prune_sequence_bound, (beyond, rows - 1)).fetchone())
            count = self._prune_chunk("sequence", "<=", beyond if bound is None else bound, on_chunk)
            if not count:
                break
            deleted, chunks = deleted + count, chunks + 1
        while True:
            bound = first_value(self._run(sql.prune_time_bound, (cutoff, rows - 1)).fetchone())
            if bound is None:
                count = self._prune_chunk("recorded_at", "<", cutoff, on_chunk)
            else:
                count = self._prune_chunk("recorded_at", "<=", bound, on_chunk)
            if not count:
                break
            deleted, chunks = deleted + count, chunks + 1
        return {"events": deleted, "chunks": chunks}

    def _prune_chunk(self, column: str, compare: str, bound: float, on_chunk: PruneObserver | None) -> int:
        """One chunk (its own transaction): the events with ``column compare bound``."""
        raise NotImplementedError

    def _write_watermarks(self, affected: Sequence[tuple[str, str, int]]) -> None:
        """R13 and R7 for a chunk's ``(key, agent, largest sequence going)`` sessions."""
        self._run_many(self._sql.raise_pruned, [(m, k, a) for k, a, m in affected])
        self._run_many(self._sql.write_back, [(k, a) for k, a, _ in affected])

    def _report_chunk(
        self, affected: Sequence[tuple[str, str, int]], deleted: int, on_chunk: PruneObserver | None
    ) -> None:
        """Tell ``on_chunk`` (the trace) what the chunk wrote, inside its transaction."""
        if on_chunk is None:
            return
        sql = self._sql
        heads = [
            (k, a, int(first_value(self._run(sql.pruned_watermark, (k, a)).fetchone()) or 0))
            for k, a, _ in affected
        ]
        cursors = [
            (r[0], r[1], r[2], (int(r[3]), int(r[4]), int(r[5])))
            for k, a, _ in affected
            for r in self._run(sql.pending_on_target, (k, a)).fetchall()
        ]
        on_chunk(heads, cursors, deleted)

    # -- inspection -------------------------------------------------------------------------

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every core table, in a stable order (tests compare before and after)."""
        tables = {
            "sessions": "session_key, agent_id",
            "session_state_events": "sequence",
            "session_state_heads": "session_key, agent_id",
            "session_watch_cursors": "watcher_session_key, target_session_key, target_agent_id",
        }
        return {name: list(self._run(f"SELECT * FROM {name} ORDER BY {order}").fetchall()) for name, order in tables.items()}


def last_changes(
    changes: Sequence[tuple[str, Target, PositionsTuple | None]], now: float
) -> tuple[list[tuple[Any, ...]], list[tuple[str, str, str]]]:
    """``put_pair_cursors``' changes as the upsert rows and the deletes they come to, each
    pair once at its last positions (one statement may not write a row twice)."""
    last = {(w, t): p for w, t, p in changes}
    upserts = [(w, t[0], t[1], p[0], p[1], p[2], now) for (w, t), p in last.items() if p is not None]
    deletes = [(w, t[0], t[1]) for (w, t), p in last.items() if p is None]
    return upserts, deletes


class Transaction:
    """``BEGIN``/``COMMIT`` at depth 0, ``SAVEPOINT``/``RELEASE`` when nested, under the
    store's lock; a driver error leaves as ``StorageError``. What a level registered (its
    after-commit callbacks, a server backend's record of held row locks and pending
    notifications) is dropped when that level rolls back.

    A class rather than a generator context manager: it is entered on every event, and this
    costs about a microsecond less per use.
    """

    __slots__ = ("_store", "_name", "_mark")

    def __init__(self, store: SqlStore) -> None:
        self._store = store
        self._name = ""
        self._mark: Any = None

    # Driver errors become StorageError here, for every statement run inside the transaction:
    # a try block costs nothing until something is raised, so the hot path pays nothing.

    def __enter__(self) -> None:
        store = self._store
        store.lock.acquire()
        try:
            if store._depth == 0:
                store._begin()
            else:
                self._name = f"sp{store._depth}"
                self._mark = store._level_mark()
                store._control(f"SAVEPOINT {self._name}")
        except BaseException:
            store.lock.release()
            raise
        store._depth += 1
        if store._observers:
            for observer in store._observers:
                observer.begun(not self._name)

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        store = self._store
        store._depth -= 1
        try:
            if exc_type is None:
                self._end(store)
                return
            self._roll_back(store)
        finally:
            store.lock.release()
        if isinstance(exc, store.DRIVER_ERRORS):
            raise store.storage_error(exc) from exc

    def _end(self, store: SqlStore) -> None:
        """Release the savepoint, or commit and run the callbacks; a failure rolls the level
        back (a failed COMMIT may leave the transaction open) and raises."""
        if self._name:
            try:
                store._control("RELEASE " + self._name)
            except BaseException:
                self._roll_back(store)
                raise
            self._tell_ended(store, True)
            return
        callbacks = store._after_commit
        try:
            if store._observers:
                for observer in store._observers:
                    observer.committing()
            store._commit()
        except BaseException:
            self._roll_back(store)
            raise
        store._forget_transaction()
        self._tell_ended(store, True)
        for callback in callbacks:
            try:
                callback()
            except Exception:  # the data is committed: one bad callback must not hide it
                log.exception("an after-commit callback failed")

    def _roll_back(self, store: SqlStore) -> None:
        # What was registered inside this level is dropped with it (R9).
        if self._name:
            store._restore_level(self._mark)
            store._rollback_to(self._name)
        else:
            store._forget_transaction()
            store._rollback()
        self._tell_ended(store, False)

    def _tell_ended(self, store: SqlStore, committed: bool) -> None:
        if store._observers:
            for observer in store._observers:
                observer.ended(committed, not self._name)

