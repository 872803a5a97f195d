"""What a storage backend must provide, independent of any database: the store contract.

The services (the ``sessionstate.services`` package) talk to a ``Store`` and nothing else.
``SqliteStore`` and ``PostgresStore`` implement it, both on the shared SQL layer
(``sql_store.SqlStore``); another backend is another class satisfying these protocols (mypy
checks it structurally where ``store.factory`` returns it). Several spec rules are carried by
the backend's queries rather than by the runtime; each is stated below where it applies, so a
new backend implements them on purpose instead of rediscovering them:

- **Effective positions (R7).** Every cursor read returns the *effective* material position:
  for a pending cursor (``notified > last_seen``) the larger of the stored ``material`` and
  the newest sequence on the target after ``notified`` whose kind notifies and whose
  ``actor_id`` is not the watcher (a ``NULL`` actor is nobody, so it counts). Caught-up
  cursors return their stored positions.
- **Per-session commit order = sequence order.** Sequences are allocated from one counter for
  the whole log, never reused (not even after pruning), and allocated under the write lock of
  the transaction that appends, so two committed events of one session are ordered by sequence
  exactly as they committed. A session's head (``last_sequence``) is bumped in the same
  transaction as its event.
- **Prune writes the watermark first (R7, R13).** Before deleting any event of a target,
  pruning writes the effective material position into that target's pending cursors, and
  raises the target's ``pruned_max_sequence`` to the largest sequence about to go; all three
  in the same transaction as the delete. Heads are never pruned.
- **Dedupe (R10).** A dedupe key already in the log returns the existing sequence, allocates
  no sequence and bumps no head.
- **Unit of work (R9).** ``transaction()`` is the only way to group writes: it holds the
  store's lock, begins a transaction (a savepoint when nested), commits at the outermost exit
  or rolls back (the savepoint only, when nested) on an exception. Callbacks registered with
  ``after_commit`` run after the outermost commit, in order, still under the lock; those
  registered inside a transaction or savepoint that rolls back are dropped. Outside any
  transaction ``after_commit`` runs its callback at once.
  ``observe_transactions`` registers an observer told of every level's begin, of the
  outermost commit just before it happens and of every level's end (the protocol trace).
- **Errors.** Every failure of the driver, the database or the file system leaves the
  backend as a ``sessionstate.errors.StorageError`` (or a subclass); a rolled-back
  transaction has changed nothing. Refusals that are the caller's fault are
  ``SessionStateError`` subclasses as elsewhere (``UnknownSession`` from ``append_event``).
- **Deletes cascade.** Deleting a session's registry row removes its metadata row, its
  transcript, the runs whose child it is and its upstream link, inside the same transaction
  (``SqliteStore`` uses triggers), so the core delete needs no knowledge of feature tables.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from .records import (
    CaughtUpRow,
    ChangeSet,
    ChangesPage,
    CursorRecord,
    EventRecord,
    EventRow,
    Head,
    MessageRecord,
    MetaRecord,
    PendingCursor,
    PositionsTuple,
    PruneObserver,
    RecordedAlone,
    RunRecord,
    SessionRecord,
    UpstreamLink,
    VacuumReport,
)

# (sequence, kind, actor_type, occurred, summary, actor_id, run_id, payload): ``occurred`` is
# the event's instant either as whole microseconds (an int, rounded by the database as
# timefmt.iso_millis rounds, where that is cheaper than in Python) or as epoch seconds (a
# float, which Python rounds), one or the other for every row of a page.
EventPageRow = tuple[Any, ...]


class TransactionObserver(Protocol):
    """Told of the unit of work's steps (the protocol trace, ``services/trace.py``)."""

    def begun(self, outermost: bool) -> None:
        """A level began (the lock is held; ``after_commit`` registers in this level)."""
        ...

    def committing(self) -> None:
        """The outermost level is about to commit, still under the write lock. Raising
        rolls the transaction back instead."""
        ...

    def ended(self, committed: bool, outermost: bool) -> None:
        """A level ended: committed (a savepoint: released) or rolled back; the lock is
        still held, and a commit's after-commit callbacks run after this."""
        ...


class Transactions(Protocol):
    """The unit of work every write goes through (see the module docstring)."""

    lock: threading.RLock  # serialises use of the store; the runtime holds it across a call

    def transaction(self) -> AbstractContextManager[None]: ...

    def after_commit(self, callback: Callable[[], object]) -> None: ...

    def witness_commit(self) -> None:
        """R29: the open transaction's commit carries a witness, so a commit whose answer is
        lost is resolved whenever a server answers. A no-op where the commit is local."""
        ...

    def observe_transactions(self, observer: TransactionObserver) -> None:
        """Tell ``observer`` of every transaction from now on (``TransactionObserver``)."""
        ...

    def lock_targets(self, targets: Iterable[tuple[str, str]]) -> None:
        """Before a transaction touches several sessions: lock their heads in key order (a
        server backend; spec section 16). A no-op where the transaction holds one write lock."""
        ...

    def lock_watcher_targets(self, watcher: str) -> None:
        """Before a drain reads the watcher's pending cursors: lock their targets' heads in key
        order (a server backend; spec section 16). A no-op where one write lock is held."""
        ...

    @property
    def in_transaction(self) -> bool: ...

    @property
    def read_only(self) -> bool:
        """This connection cannot write: a read-only file, URL or ``query_only`` (SQLite), a
        read-only transaction default or a standby (PostgreSQL), or a write already refused
        as read-only. The startup sweep then holds owed notices in memory only (R11)."""
        ...


class SessionTable(Protocol):
    """The core registry: one row per (session key, agent id), with its head."""

    def insert_session(self, record: SessionRecord) -> bool:
        """Insert the row and its head (``last_sequence`` = ``pruned_max_sequence`` = 0);
        ``False``, inserting nothing, when the row exists already (spec 13: a create race)."""
        ...

    def get_session(self, key: str, agent_id: str) -> SessionRecord | None: ...

    def agents_with_session_key(self, key: str) -> list[str]:
        """Agent ids holding a session with this key, ascending."""
        ...

    def list_sessions(self) -> list[SessionRecord]:
        """Every session, ordered by creation time, then key."""
        ...

    def delete_session_data(self, key: str, agent_id: str) -> int:
        """Remove the session's events, head and registry row (cascading to the feature
        tables) and clear the parent link of its children; returns the events removed."""
        ...


class SignalLog(Protocol):
    """The durable, append-only log of material changes and the per-session heads."""

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
        """Append and bump the head in the caller's transaction: ``(sequence, inserted)``.

        Sequence order is commit order per session; a known dedupe key returns
        ``(existing, False)`` (R10); a session without a head raises ``UnknownSession``.
        """
        ...

    def append_events(self, rows: Sequence[EventRow]) -> list[tuple[int, bool]]:
        """``append_event`` for each row (its arguments, in order), in order, in the caller's
        transaction, with the same outcomes; a dedupe key repeated in ``rows`` finds its first
        row's sequence. For a group commit: a server backend sends the appends as one
        statement (one round trip), having locked the heads in key order."""
        ...

    def append_and_read(
        self, rows: Sequence[EventRow], watched: Sequence[tuple[str, str]]
    ) -> tuple[list[tuple[int, bool]], dict[tuple[str, str], list[CaughtUpRow]]]:
        """A group commit's start, in the caller's transaction: the rows' heads locked in key
        order, ``append_events(rows)``'s outcomes, and ``caught_up_watchers_of(watched)`` (the
        batch's notifying targets; ``{}`` when empty), read after the appends. A server backend
        sends the three in one round trip (a pipeline); raises ``UnknownSession`` as
        ``append_events`` does."""
        ...

    def record_alone(self, row: EventRow) -> RecordedAlone | None:
        """One event (``append_event``'s arguments) as its own transaction, decided in the
        database: the table's decision on the target's caught-up cursors runs there, generated
        from the effect data (``decision_sql``), and the append, the head, the cursors, the
        change feed's notification and the commit go in one round trip. ``None`` (nothing
        done) where the backend does not, or not now: inside a transaction, under a
        transaction observer, with a dedupe key; the caller then decides in Python. Raises
        ``UnknownSession`` and ``StorageError`` as an append in its own transaction."""
        ...

    def head(self, key: str, agent_id: str) -> Head | None: ...

    def events_after(self, key: str, agent_id: str, after: int, limit: int) -> list[EventRecord]: ...

    def changes_page(self, key: str, agent_id: str, after: int, limit: int) -> ChangesPage | None:
        """``changesSince``'s read: the head, the earliest sequence still held, and at most
        ``limit`` events after ``after`` with ``changesSince``'s columns, ascending by
        sequence; ``None`` for a session without a head. Two statements (the head with the
        earliest sequence, then the page); PostgreSQL reads the page once more, its instants
        in seconds, when one is beyond what its rounding in SQL covers."""
        ...

    def event_count(self) -> int: ...

    def sequence_high_water(self) -> int:
        """The largest sequence ever allocated (pruned or deleted ones included); 0 before any."""
        ...

    def prune_events(
        self, cutoff: float, max_rows: int, chunk_rows: int = ..., on_chunk: PruneObserver | None = None
    ) -> dict[str, int]:
        """R13: drop all but the newest ``max_rows`` events and those recorded before
        ``cutoff``, in short transactions; each writes the effective material watermark of
        the affected targets' pending cursors and raises their ``pruned_max_sequence`` before
        deleting (``on_chunk`` is told what each chunk wrote, inside it). Returns
        ``{"events": deleted, "chunks": transactions}``."""
        ...


class CursorTable(Protocol):
    """Watcher cursors; every read returns effective positions (R7)."""

    def cursor(self, watcher: str, target_key: str, target_agent_id: str) -> CursorRecord | None: ...

    def caught_up_watchers(self, target_key: str, target_agent_id: str) -> list[CaughtUpRow]:
        """The event hot path: only cursors with ``notified == last_seen`` (stored positions,
        which are effective for them), without reading the pending ones; each row with the
        pair's provenance (R25), so the wake a notice asks for is decided without a read (R26)."""
        ...

    def caught_up_watchers_of(
        self, targets: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], list[CaughtUpRow]]:
        """``caught_up_watchers`` of several targets at once (a group commit's notifying
        events, inside its transaction after the heads are locked): per target its rows, in
        the order its own read returns them; a target without any is left out. One statement
        on a server backend."""
        ...

    def cursors_behind(self) -> list[CursorRecord]:
        """Pending cursors (``notified > last_seen``) whose watcher session exists, ordered
        by watcher, target key, target agent (R11's sweep)."""
        ...

    def cursors_held_by(self, watcher: str) -> list[CursorRecord]: ...

    def pending_cursors_held_by(self, watcher: str) -> list[CursorRecord]:
        """The watcher's pending cursors (``notified > last_seen``) with their effective
        positions, in target order: the drain's one read per drain (inside its transaction,
        after ``lock_watcher_targets``)."""
        ...

    def pending_for_drain(self, watcher: str) -> list[CursorRecord]:
        """``lock_watcher_targets`` then ``pending_cursors_held_by``, in the caller's
        transaction: a drain's start. A server backend runs the two as one call, sent with
        the transaction's ``BEGIN`` (one round trip), the read still starting after the locks
        are held; a cursor on a target it could not lock is left out."""
        ...

    def cursors_naming(self, key: str, agent_id: str) -> list[CursorRecord]:
        """Cursors with ``key`` as watcher or (key, agent) as target (R14's delete)."""
        ...

    def all_cursors(self) -> list[CursorRecord]: ...

    def expired_cursors(self, cutoff: float) -> list[CursorRecord]:
        """Cursors whose row and whose target's head were both updated before ``cutoff``."""
        ...

    def put_cursors(
        self,
        target_key: str,
        target_agent_id: str,
        changes: Sequence[tuple[str, PositionsTuple | None]],
        now: float,
        *,
        with_commit: bool = False,
    ) -> None:
        """Upsert the given positions (stamping ``updated_at``) or delete (``None``). A new
        row is ``explicit`` until ``set_provenance`` says otherwise; an update keeps it.
        ``with_commit``: as ``put_pair_cursors``' (upserts only)."""
        ...

    def put_pair_cursors(
        self, changes: Sequence[tuple[str, tuple[str, str], PositionsTuple | None]], now: float, *,
        with_commit: bool = False,
    ) -> None:
        """``put_cursors`` for pairs on several targets, ``(watcher, target, positions)``; a
        pair named twice ends at its last positions. One statement on a server backend, which
        with ``with_commit`` (the caller's last statement before the commit of a transaction
        it opened itself) may hold it back and send it in the ``COMMIT``'s own message: the
        transaction reads nothing after it."""
        ...

    def has_watchers(self, target_key: str, target_agent_id: str) -> bool:
        """Whether at least one cursor (any provenance) targets the session (R24)."""
        ...

    def set_provenance(
        self, watcher: str, target_key: str, target_agent_id: str, provenance: str, *, promote_only: bool
    ) -> bool:
        """R25: write the cursor's provenance; with ``promote_only`` only over ``ambient``
        (a registration of an existing pair never demotes). ``True`` when the row changed."""
        ...

    def cursor_provenance(self, watcher: str, target_key: str, target_agent_id: str) -> str | None:
        """R25: the pair's provenance, ``None`` when it has no cursor (R26's wake decision)."""
        ...


class MetadataTable(Protocol):
    """Per-session runtime metadata, at most one row per session."""

    def get(self, key: str, agent_id: str) -> MetaRecord | None: ...

    def by_session_id(self, session_id: str) -> MetaRecord | None: ...

    def all(self) -> dict[tuple[str, str], MetaRecord]: ...

    def insert(self, record: MetaRecord) -> None: ...

    def update(self, key: str, agent_id: str, **fields: Any) -> None:
        """Set the named columns; only ``UPDATABLE`` names are accepted (``ValueError``)."""
        ...

    def add_usage(self, key: str, agent_id: str, input_tokens: int, output_tokens: int) -> None: ...

    def dump(self) -> list[tuple[Any, ...]]: ...


class RunTable(Protocol):
    """Child runs; ``finish`` is the one terminal compare-and-set on ``status = running``."""

    def insert(self, record: RunRecord) -> None: ...

    def get(self, run_id: str) -> RunRecord | None: ...

    def by_child(self, key: str, agent_id: str) -> list[RunRecord]:
        """Newest first."""
        ...

    def by_requester(self, key: str, agent_id: str, limit: int) -> list[RunRecord]:
        """Newest first, at most ``limit``."""
        ...

    def active_by_requester(self, key: str, agent_id: str) -> list[RunRecord]:
        """Running ones, oldest first."""
        ...

    def active(self) -> list[RunRecord]: ...

    def finish(self, run_id: str, status: str, outcome: str | None, result_text: str | None, now: float) -> bool:
        """``True`` only for the call that moved the run out of ``running``."""
        ...

    def note_steered(self, run_id: str) -> bool: ...

    def dump(self) -> list[tuple[Any, ...]]: ...


class TranscriptTable(Protocol):
    """Messages per session; ids increase in append order."""

    def append(
        self,
        key: str,
        agent_id: str,
        role: str,
        text: str,
        *,
        actor_type: str,
        actor_id: str | None,
        provenance: dict[str, Any] | None,
        tool_calls: list[Any] | None,
        tool_result: Any,
        input_tokens: int,
        output_tokens: int,
        created_at: float,
    ) -> int: ...

    def recent(self, key: str, agent_id: str, limit: int, offset: int = 0) -> list[MessageRecord]:
        """The newest ``limit`` messages after skipping the ``offset`` newest, oldest first."""
        ...

    def recent_texts(self, key: str, agent_id: str, role: str, limit: int) -> list[str]: ...

    def first_text(self, key: str, agent_id: str, role: str) -> str | None: ...

    def stats(self, key: str, agent_id: str) -> tuple[int, float | None]:
        """(message count, newest ``created_at``)."""
        ...

    def dump(self) -> list[tuple[Any, ...]]: ...


class UpstreamLinkTable(Protocol):
    """Upstream links; every write after ``replace`` is a compare-and-set on
    (generation, version) and returns whether it wrote. Generations are never reused."""

    def get(self, session_key: str, agent_id: str) -> UpstreamLink | None: ...

    def by_thread(self, provider: str, thread_id: str) -> UpstreamLink | None: ...

    def all(self) -> list[UpstreamLink]: ...

    def watched(self) -> list[UpstreamLink]:
        """Links whose session is the target of at least one cursor."""
        ...

    def replace(
        self,
        session_key: str,
        agent_id: str,
        *,
        provider: str,
        host: str,
        thread_id: str,
        marker: str | None,
        primed: bool,
        now: float,
    ) -> int: ...

    def advance(self, link: UpstreamLink, marker: str | None, now: float, *, primed: bool = True) -> bool: ...

    def miss(self, link: UpstreamLink, now: float) -> bool: ...

    def note_error(self, link: UpstreamLink, now: float) -> bool: ...

    def drop(self, link: UpstreamLink) -> bool: ...


class ServingTable(Protocol):
    """Several gateway processes on one database (spec section 6a): servers with heartbeats,
    claims (R20, last attach wins), the change log a pump reads (R22), shared wake slots
    (R23). Every claim change and every cursor change outside the event hot path notes its
    watcher in the change log, in the same transaction."""

    def note_cursor_changes(self, watchers: Iterable[str], now: float) -> None: ...

    def pending_held_by(self, watcher: str) -> list[PendingCursor]:
        """The watcher's pending cursors (effective positions are not needed: only L)."""
        ...

    def frozen_on_target(self, target_key: str, target_agent_id: str, after: int) -> list[PendingCursor]:
        """The target's pending cursors whose N is above ``after`` (turned pending since)."""
        ...

    def all_pending(self) -> list[PendingCursor]: ...

    def register_server(self, server_id: str, pid: int, host: str, now: float) -> None: ...

    def heartbeat(self, server_id: str, now: float) -> bool: ...

    def dead_servers(self, older_than: float) -> list[str]: ...

    def remove_server(self, server_id: str, now: float) -> list[str]: ...

    def claim(self, key: str, server_id: str, now: float) -> int: ...

    def unclaim(self, key: str, server_id: str, now: float) -> bool: ...

    def claimant(self, key: str) -> tuple[str, int] | None: ...

    def all_claims(self) -> dict[str, str]: ...

    def take_wake_slot(self, watcher: str, now: float, window: float) -> tuple[bool, float]:
        """Move the watcher's last wake to ``now`` if it is ``window`` old, in one atomic
        statement: ``(won, the slot's time)`` (R23)."""
        ...

    def wake_slots(self) -> dict[str, float]:
        """Every watcher's last wake time (R23), read only; no transaction needed."""
        ...


class ChangeFeed(Protocol):
    """How a server learns of commits made on other connections (R22); one per server.

    ``wait`` runs on the pump's thread without the store's lock; ``take``, ``sync`` and
    ``lost`` run with the store's lock held.
    """

    # The longest wait worth asking for while idle: a poll's interval, or for a feed that is
    # woken by the server how often its pump must still run (heartbeat, stop).
    longest_wait: float

    def wait(self, timeout: float) -> bool:
        """Block at most ``timeout`` seconds; ``True`` when changes may be waiting."""
        ...

    def take(self) -> ChangeSet:
        """The changes committed since the previous ``take`` (read now, in one snapshot)."""
        ...

    def sync(self) -> None:
        """Make the next ``take`` include everything committed before this call."""
        ...

    def lost(self) -> None:
        """The caller could not apply the last change set: the next one resynchronises."""
        ...

    def interrupt(self) -> None:
        """End the current and every later ``wait`` early (the pump is stopping); any thread."""
        ...

    def close(self) -> None: ...


class Store(Transactions, SessionTable, SignalLog, CursorTable, Protocol):
    """One backend: the core tables, the feature tables and the unit of work."""

    url: str
    where: str  # the database as messages name it (a path, or the URL without its password)

    @property
    def meta(self) -> MetadataTable: ...

    @property
    def runs(self) -> RunTable: ...

    @property
    def transcripts(self) -> TranscriptTable: ...

    @property
    def links(self) -> UpstreamLinkTable: ...

    @property
    def serving(self) -> ServingTable: ...

    def open_change_feed(self, kinds: tuple[str, ...]) -> ChangeFeed:
        """A feed of other connections' commits for one server (R22): its position starts
        now. ``kinds`` are the notifying kinds."""
        ...

    def close(self) -> None: ...

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every core table in a stable order (tests compare dumps)."""
        ...

    def reclaim_free_pages(self) -> int:
        """Give storage freed by pruning back to the system, in steps short enough not to
        hold the write lock long; returns how much (SQLite: pages), 0 when nothing to do."""
        ...

    def vacuum(self) -> VacuumReport:
        """The operator's compaction (``sessionstate vacuum``): rewrite the storage compactly
        and give the space freed by pruning back to the system, outside any transaction. It
        locks out writers for the rewrite (SQLite: the file; PostgreSQL: each table in turn)
        and needs free space about the size of what it rewrites."""
        ...

    def integrity_check(self) -> str:
        """``"ok"`` when the backend finds its storage consistent."""
        ...
