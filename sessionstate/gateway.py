"""The gateway runtime: records events, runs the notice protocol, queues notices.

Every change of a cursor goes through ``statemachine.fire`` (the dispatch table compiled from
the one machine); every byte that reaches the disk goes through ``store``. The order inside
each public call is always: validate (raise, nothing changed) -> one transaction in the store
-> after the commit, queue notices and send wakes (R9).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from collections.abc import Mapping, Sequence  # the ABCs: isinstance on typing's aliases is slow
from typing import Any, Callable, Iterable, Iterator, NamedTuple

from .agent_runtime import AgentRuntimeMixin
from .config import normalize_url
from .errors import InvalidArgument, SessionExists, StorageError, UnknownSession
from .keys import (
    DEFAULT_AGENT_ID,
    check_key,
    is_agent_qualified,
    is_main_style_watcher,
    resolve_agent_id,
)
from .locking import locked as _locked
from .notices import SystemEventQueue, notice_text, plan_drain
from .reconcile import events_json
from .statemachine import NOTIFYING_KINDS, Positions, derive_state, fire, fire_many
from .statemachine.machine import states_written_by
from .statemachine.table import (
    CAUGHT_UP,
    DELETE_SESSION,
    DRAIN,
    EXPIRE,
    LOG_ONLY_EVENT,
    MATERIAL_EVENT,
    PENDING_STATES,
    RESET_WATCHER,
    RESTART_SWEEP,
    SEED,
    SELF_EVENT,
    UNWATCH,
    UNWATCHED,
)
from .store import CursorRecord, SessionRecord, SqliteStore
from .store.sqlite import DEFAULT_SYNCHRONOUS
from .trace import Tracer, trace_path
from .validation import (
    MAX_LABEL_LENGTH,
    MAX_SUMMARY_LENGTH,
    MAX_SYSTEM_EVENT_CHARS,
    SESSION_KINDS,
    check_actor_type,
    check_changes_since,
    check_kind,
    check_line,
    check_optional_id,
    check_text,
    check_timestamp,
    encode_payload,
)
from .wake import WakeCoalescer
from .rewake import Rewaker
from .serving import SERVE_ALL, Serving
from .store import serving as serving_sql

log = logging.getLogger("sessionstate")

DAY_SECONDS = 86_400.0
OCCURRED_AT_WINDOW = DAY_SECONDS  # R16
CHANGES_PAGE = 200

Clock = Callable[[], float]
WakeHook = Callable[[str, str], None]
Target = tuple[str, str]  # (session key, agent id)


# The event hot path reads only caught-up cursors (through a partial index) and skips
# log-only kinds entirely. That is sound only while the table says so; if it changes, this
# import fails instead of the gateway silently missing transitions.
if (states_written_by(MATERIAL_EVENT) | states_written_by(SELF_EVENT)) - {CAUGHT_UP} or states_written_by(
    LOG_ONLY_EVENT
):
    raise ImportError("the transition table needs cursor writes the event hot path does not make")


class _PreparedEvent(NamedTuple):
    target: Target
    kind: str
    actor_type: str
    actor_id: str | None
    run_id: str | None
    summary: str
    payload: str | None
    occurred_at: float | None
    dedupe_key: str | None


class Gateway(AgentRuntimeMixin):
    """Session state awareness for one process that owns a state database."""

    def __init__(
        self,
        store: SqliteStore,
        *,
        clock: Clock | None = None,
        on_wake: WakeHook | None = None,
        retention_days: float = 30,
        max_rows: int = 50_000,
    ) -> None:
        if isinstance(retention_days, bool) or not isinstance(retention_days, (int, float)) or retention_days <= 0:
            raise InvalidArgument("retention_days must be a positive number")
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0:
            raise InvalidArgument("max_rows must be a non-negative integer")
        self.store = store
        self.clock: Clock = clock or time.time
        self.retention_days = retention_days
        self.max_rows = max_rows
        self.queue = SystemEventQueue()
        self._wakes = WakeCoalescer(on_wake, self.clock)
        self._lock = threading.RLock()
        self._transaction_depth = 0
        self._deferred_notices: list[tuple[str, Target, int]] = []
        self._deferred_rewakes: list[tuple[Target, str | None]] = []
        self.stats = {"append_failures": 0, "events_recorded": 0, "notices_enqueued": 0}
        self.closed = False
        self.serving = Serving(self, SERVE_ALL)  # section 6a: R19-R23
        self._wakes.take_slot = self.serving.take_wake_slot
        self.rewaker = Rewaker(self._wakes, self.queue.holds_notice)
        self._pump: Any = None
        self._trace: Tracer | None = None  # the protocol trace (spec section 15), when on
        self._init_agent_runtime()

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        clock: Clock | None = None,
        on_wake: WakeHook | None = None,
        retention_days: float = 30,
        max_rows: int = 50_000,
        synchronous: str = DEFAULT_SYNCHRONOUS,
        create: bool = True,
        serve: Sequence[str] = SERVE_ALL,
        pump: bool = False,
        trace: str | os.PathLike[str] | None = None,
    ) -> "Gateway":
        """Open the database at ``url`` and run the startup sweep.

        With ``create`` (the default) a missing file and its directories are created; without
        it a missing file raises ``StorageUnavailable`` and nothing is created. A file this
        release cannot use raises a ``StorageError`` subclass and is left unchanged.
        ``serve``: the session key patterns this process serves when unclaimed (R19);
        ``pump``: run the change pump, for a database shared with other gateway processes
        (R22; needed for ``attach``). ``trace`` (default ``$SESSIONSTATE_TRACE``) appends the
        protocol trace to that file (spec section 15).
        """
        store = SqliteStore(
            normalize_url(url), notifying_kinds=NOTIFYING_KINDS, synchronous=synchronous, create=create
        )
        try:
            gateway = cls(store, clock=clock, on_wake=on_wake, retention_days=retention_days, max_rows=max_rows)
            path = trace_path(trace)
            if path is not None:
                gateway._trace = Tracer(path, store, gateway.queue)
            gateway.serving.serve(serve)
            if pump:
                from .pump import start_pump

                start_pump(gateway)
            gateway.startup_sweep()
        except BaseException:
            store.close()
            raise
        return gateway

    def close(self) -> None:
        if self._pump is not None:  # joined outside the lock: its sweep takes the lock
            self._pump.stop()
        with self._lock:
            if not self.closed:
                self.closed = True
                self.serving.unregister()
                if self._trace is not None:
                    self._trace.close()
                self.store.close()

    # -- several processes (spec section 6a) ------------------------------------------------

    @_locked
    def attach(self, session_key: str) -> int:
        """R20: serve ``session_key`` from this process (the last attach wins); returns the
        claim's generation. Needs the change pump."""
        return self.serving.attach(session_key)

    @_locked
    def detach(self, session_key: str) -> bool:
        """R20: drop this process's claim on ``session_key``; ``True`` when it held one."""
        return self.serving.detach(session_key)

    @_locked
    def serves(self, session_key: str) -> bool:
        """R19: whether notices for ``session_key`` are queued (and wakes sent) here."""
        check_key(session_key)
        return self.serving.serves(session_key)

    @_locked
    def sweep_changes(self) -> int:
        """R22: one incremental sweep now (what the pump runs on a change); notices queued."""
        return self.serving.sweep()

    @contextmanager
    def locked(self) -> Iterator[SqliteStore]:
        """Hold the gateway's call lock: for extensions that read through the shared store."""
        with self._lock:
            yield self.store

    @contextmanager
    def transaction(self) -> Iterator[SqliteStore]:
        """One transaction around several gateway calls and an extension's own writes.

        Holds the call lock; ``record_event``/``record_events`` inside it join the transaction
        and their notices are queued only after the outermost commit (R9), or dropped with a
        rollback. Yields the store so that an extension's own table module can write in it.
        """
        with self._lock:
            outermost = self._transaction_depth == 0
            self._transaction_depth += 1
            try:
                with self.store.atomic():
                    yield self.store
            except BaseException:
                if outermost:
                    self._deferred_notices.clear()
                    self._deferred_rewakes.clear()
                raise
            finally:
                self._transaction_depth -= 1
            if outermost:
                notices, self._deferred_notices = self._deferred_notices, []
                self._queue_notices(notices)
                material, self._deferred_rewakes = self._deferred_rewakes, []
                self._rewake(material, self.clock())

    def __enter__(self) -> "Gateway":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions ---------------------------------------------------------------------------

    @_locked
    def create_session(
        self,
        key: str,
        *,
        agent_id: str | None = None,
        kind: str = "main",
        parent: str | None = None,
        label: str | None = None,
        run_id: str | None = None,
    ) -> None:
        """Register a session; with ``parent``, a spawn edge (child_spawned + seeded cursor)."""
        check_key(key)
        agent = resolve_agent_id(key, agent_id) or DEFAULT_AGENT_ID
        if not isinstance(kind, str) or kind not in SESSION_KINDS:
            raise InvalidArgument(f"unknown session kind {kind!r}; expected one of {list(SESSION_KINDS)}")
        if label is not None:
            check_line(label, "label", MAX_LABEL_LENGTH)
        run_id = check_optional_id(run_id, "run id")
        parent_target = self._resolve(parent, None) if parent is not None else None
        if self.store.get_session(key, agent) is not None:
            raise SessionExists(f"session {key!r} (agent {agent!r}) already exists")
        if parent_target == (key, agent):
            raise InvalidArgument("a session cannot be its own parent")
        now = self.clock()
        record = SessionRecord(
            key, agent, kind,
            parent_target[0] if parent_target else None,
            parent_target[1] if parent_target else None,
            label, now, now,
        )
        with self.store.atomic():
            self.store.insert_session(record)
            if parent_target is not None:
                sequence, inserted = self.store.append_event(
                    key, agent, "child_spawned", "agent", parent_target[0], run_id,
                    f"spawned by {parent_target[0]}"[:MAX_SUMMARY_LENGTH], None, now, now,
                    f"child-spawned:{run_id}" if run_id else None,
                )
                if inserted and self._trace is not None:
                    self._trace.event(sequence, (key, agent), "child_spawned", "agent", parent_target[0])
                # R3: only agent-qualified parents hold cursors; R4: seeded at the spawn.
                if is_agent_qualified(parent_target[0]):
                    self._fire_pairs([(parent_target[0], (key, agent), None)], SEED, sequence, now)
        if parent_target is not None:
            self.stats["events_recorded"] += 1

    @_locked
    def session_exists(self, key: str, agent_id: str | None = None) -> bool:
        try:
            self._resolve(key, agent_id)
        except UnknownSession:
            return False
        return True

    # -- the signal log ---------------------------------------------------------------------

    @_locked
    def record_event(
        self,
        session_key: str,
        kind: str,
        *,
        actor_type: str,
        summary: str,
        actor_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        payload: dict[str, Any] | None = None,
        dedupe_key: str | None = None,
        occurred_at: float | None = None,
    ) -> int | None:
        """Append one event; returns its sequence, or ``None`` if storage failed (R15)."""
        event = self._prepare_event(
            session_key, kind, actor_type=actor_type, summary=summary, actor_id=actor_id,
            agent_id=agent_id, run_id=run_id, payload=payload, dedupe_key=dedupe_key,
            occurred_at=occurred_at,
        )
        return self._append_prepared([event])[0]

    @_locked
    def record_events(self, events: Sequence[Mapping[str, Any]]) -> list[int | None]:
        """Append a burst in one transaction; each item holds ``record_event``'s arguments
        (``session_key``, ``kind`` and the keywords).

        Every item is validated before anything is written: one bad item raises and nothing
        changes. A storage failure rolls the whole burst back and returns ``None`` for each.
        """
        if isinstance(events, (str, bytes)) or not isinstance(events, Sequence):
            raise InvalidArgument("events must be a sequence of mappings")
        prepared = []
        for index, item in enumerate(events):
            if not isinstance(item, Mapping):
                raise InvalidArgument(f"events[{index}] must be a mapping")
            try:
                prepared.append(self._prepare_event(**item))
            except TypeError as exc:  # missing or unknown argument names
                raise InvalidArgument(f"events[{index}]: {exc}") from None
        return self._append_prepared(prepared)

    def _prepare_event(
        self,
        session_key: str,
        kind: str,
        *,
        actor_type: str,
        summary: str,
        actor_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        payload: dict[str, Any] | None = None,
        dedupe_key: str | None = None,
        occurred_at: float | None = None,
    ) -> "_PreparedEvent":
        """Validate one event's arguments (raising, nothing written) and resolve its target."""
        check_key(session_key)
        check_kind(kind)
        check_actor_type(actor_type)
        check_line(summary, "summary", MAX_SUMMARY_LENGTH)
        if actor_id is not None:
            check_key(actor_id, "actor id")
        run_id = check_optional_id(run_id, "run id")
        dedupe_key = check_optional_id(dedupe_key, "dedupe key")
        payload_text = encode_payload(kind, payload)
        produced_at = check_timestamp(occurred_at)
        agent = resolve_agent_id(session_key, agent_id)
        if agent is not None and dedupe_key is None:
            # The head bump inside the transaction proves the session exists (append_event
            # raises UnknownSession and the transaction rolls back): no separate read.
            target: Target = (session_key, agent)
        else:
            target = self._resolve(session_key, agent_id)
        return _PreparedEvent(target, kind, actor_type, actor_id, run_id, summary, payload_text,
                              produced_at, dedupe_key)

    def _append_prepared(self, events: Sequence["_PreparedEvent"]) -> list[int | None]:
        """One transaction for all of ``events``; notices are queued after the commit (R9)."""
        now = self.clock()
        floor = now - OCCURRED_AT_WINDOW
        notices: list[tuple[str, Target, int]] = []
        material: list[tuple[Target, str | None]] = []
        sequences: list[int | None] = []
        inserted_count = 0
        append = self.store.append_event
        trace = self._trace
        try:
            with self.store.atomic():
                for e in events:
                    occurred = now if e.occurred_at is None else min(max(e.occurred_at, floor), now)
                    sequence, inserted = append(
                        e.target[0], e.target[1], e.kind, e.actor_type, e.actor_id, e.run_id,
                        e.summary, e.payload, occurred, now, e.dedupe_key,
                    )
                    sequences.append(sequence)
                    if inserted:
                        inserted_count += 1
                        if trace is not None:
                            trace.event(sequence, e.target, e.kind, e.actor_type, e.actor_id, notices_follow=True)
                        if e.kind in NOTIFYING_KINDS:
                            notices += self._decide_notices(e.target, e.actor_id, sequence, now, e.kind)
                            material.append((e.target, e.actor_id))
        except StorageError:
            self.stats["append_failures"] += len(events)
            kinds = ", ".join(sorted({e.kind for e in events}))
            log.exception("recording %d event(s) (%s) failed; the turn goes on", len(events), kinds)
            return [None] * len(events)
        self.stats["events_recorded"] += inserted_count
        self._queue_notices(notices)
        if material:
            self._rewake(material, now)
        return sequences

    def _decide_notices(
        self, target: Target, actor_id: str | None, sequence: int, now: float, kind: str
    ) -> list[tuple[str, Target, int]]:
        """The hot path of a notifying event: only caught-up cursors change (R6, R7).

        A pending cursor's transition on `material_event` is `raise_material`, which the store
        keeps derived from the log, so pending cursors are neither read nor written here.
        """
        rows = self.store.caught_up_watchers(*target)
        # R2: the actor's own cursor gets self_event; everyone else's material_event.
        own = [row for row in rows if row[0] == actor_id] if actor_id is not None else []
        others = [row for row in rows if row[0] != actor_id] if own else rows
        changes: list[tuple[str, tuple[int, int, int] | None]] = []
        notices: list[tuple[str, Target, int]] = []
        trace = self._trace
        for trigger, group in ((MATERIAL_EVENT, others), (SELF_EVENT, own)):
            fired = fire_many(group, target[0], trigger, sequence)
            if trace is not None:
                trace.event_steps(target, trigger, sequence, kind, actor_id, group, fired)
            for (watcher, old), (_, new, notice_since) in zip(group, fired):
                if new != old:
                    changes.append((watcher, new))
                if notice_since is not None:
                    notices.append((watcher, target, notice_since))
        if changes:
            self.store.put_cursors(target[0], target[1], changes, now)
        return notices

    # -- watching ---------------------------------------------------------------------------

    @_locked
    def watch(self, watcher_key: str, target_key: str, *, target_agent_id: str | None = None) -> bool:
        """Watch ``target_key`` from its current state version (R4).

        Returns ``True`` when a cursor was created, ``False`` when the pair was already
        watched (it is kept as it is, pending notice included).
        """
        watcher, target = self._check_pair(watcher_key, target_key, target_agent_id)
        now = self.clock()
        with self.store.atomic():  # the head is read under the write lock: no event slips between
            head = self.store.head(*target)
            version = head.last_sequence if head else 0
            (step,) = self._fire_pairs([(watcher, target, None)], SEED, version, now, load=True)
        return step.state == UNWATCHED

    @_locked
    def unwatch(self, watcher_key: str, target_key: str, *, target_agent_id: str | None = None) -> bool:
        """Stop watching; ``True`` when a cursor was removed."""
        watcher, target = self._check_pair(watcher_key, target_key, target_agent_id)
        with self.store.atomic():
            (step,) = self._fire_pairs([(watcher, target, None)], UNWATCH, None, self.clock(), load=True)
        self.queue.withdraw_notice(watcher, target)
        return step.state != UNWATCHED

    def _check_pair(self, watcher_key: str, target_key: str, target_agent_id: str | None) -> tuple[str, Target]:
        check_key(watcher_key, "watcher key")
        check_key(target_key, "target key")
        if not is_agent_qualified(watcher_key):
            raise InvalidArgument(
                f"watcher {watcher_key!r} is not agent-qualified (agent:<id>:...); it gets no proactive notices"
            )
        watcher = self._resolve(watcher_key, None)
        target = self._resolve(target_key, target_agent_id)
        if target == watcher:
            raise InvalidArgument("a session cannot watch itself")
        return watcher_key, target

    # -- turns ------------------------------------------------------------------------------

    @_locked
    def drain_system_events(self, session_key: str) -> list[str]:
        """The system lines for the session's next turn; acknowledges the notices among them.

        R21: the durable cursors decide, whichever process queued what: one line per pending
        pair, for the cursor's L; stale queued notices are dropped.
        """
        check_key(session_key)
        entries = self.queue.peek(session_key)
        if not entries:
            self._resolve_any_agent(session_key)
        # A read first: a watcher that owes nothing takes no write lock.
        if not is_agent_qualified(session_key) or not serving_sql.pending_held_by(self.store.db, session_key):
            if any(e.target is not None for e in entries):
                self.queue.remove(session_key, [e.text for e in entries if e.target is not None])
            self.queue.remove(session_key, [e.text for e in entries if e.target is None])
            return [e.text for e in entries if e.target is None]
        now = self.clock()
        follow_ups: list[tuple[str, Target, int]] = []
        with self.store.atomic():
            owed = {
                (p.target_key, p.target_agent_id): p.last_seen
                for p in serving_sql.pending_held_by(self.store.db, session_key)
            }
            lines = plan_drain(entries, owed)
            for text, target in lines:
                if target is None:
                    continue
                record = self.store.cursor(session_key, *target)
                assert record is not None  # read as pending in this transaction
                (step,) = self._fire_pairs(
                    [(session_key, target, Positions(*record.positions))], DRAIN, None, now, delivered=text
                )
                if step.notice_since is not None:
                    follow_ups.append((session_key, target, step.notice_since))
        self.queue.remove(session_key, [e.text for e in entries])
        self._queue_notices(follow_ups)
        return [text for text, _ in lines]

    @_locked
    def pending_system_events(self, session_key: str) -> list[str]:
        """What the next drain would return, without acknowledging anything."""
        check_key(session_key)
        return [e.text for e in self.queue.peek(session_key)]

    @_locked
    def queue_owed_notices(self, session_key: str) -> int:
        """R18: queue the notice of each pending pair of the session not queued here yet.

        For a process that serves a session whose targets other processes record: it reads
        the session's cursors, fires no trigger and writes nothing (a sweep would fold later
        events into the pending notice), so a drain after it acknowledges exactly what a turn
        in the recording process would. Returns how many notices it queued.
        """
        check_key(session_key)
        queued = {e.target for e in self.queue.peek(session_key)}
        owed: list[tuple[str, Target, int]] = []
        for record in self.store.cursors_held_by(session_key):
            target = (record.target_key, record.target_agent_id)
            positions = Positions(*record.positions)
            if target not in queued and derive_state(positions) in PENDING_STATES:
                owed.append((session_key, target, positions.last_seen))
        self._queue_notices(owed)
        return len(owed)

    @_locked
    def enqueue_system_event(self, session_key: str, text: str) -> bool:
        """Queue a plain system line (announcements) for the session's next turn."""
        check_key(session_key)
        self._resolve_any_agent(session_key)
        check_text(text, "system event text", MAX_SYSTEM_EVENT_CHARS, allow_empty=False)
        added = self.queue.enqueue(session_key, text)
        if added and is_main_style_watcher(session_key):
            self._wakes.wake(session_key, "system-event")
        return added

    # -- reconciliation ---------------------------------------------------------------------

    @_locked
    def session_status(
        self, session_key: str, *, changes_since: int | None = None, agent_id: str | None = None
    ) -> dict[str, Any]:
        check_key(session_key)
        if changes_since is not None:
            check_changes_since(changes_since)
        agent = resolve_agent_id(session_key, agent_id)
        target = (session_key, agent) if agent is not None else self._resolve(session_key, None)
        head = self.store.head(*target)
        if head is None:  # every registered session has a head row; deleting removes both
            raise UnknownSession(f"unknown session {session_key!r} (agent {target[1]!r})")
        last, pruned = head
        result: dict[str, Any] = {"sessionKey": target[0], "stateVersion": last}
        if changes_since is not None:
            rows = self.store.event_page(target[0], target[1], changes_since, CHANGES_PAGE + 1)
            result["stateChanges"] = {
                "events": events_json(rows[:CHANGES_PAGE]),
                "truncated": len(rows) > CHANGES_PAGE,
                "earliestAvailableSequence": self.store.earliest_sequence(*target),
                "historyGap": changes_since < pruned,  # INV8: from the watermark only
            }
        return result

    def call_tool(self, caller_key: str, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run an agent-facing tool; failures come back as error results, never raised."""
        from .tools.dispatch import call_tool

        return call_tool(self, caller_key, name, args)

    # -- reset, delete, retention -----------------------------------------------------------

    @_locked
    def reset_session(self, key: str, *, agent_id: str | None = None) -> None:
        """R14: the session's own cursors go; the history of its targets stays."""
        check_key(key)
        self._resolve(key, agent_id)
        with self.store.atomic():
            self._fire_records(self.store.cursors_held_by(key), RESET_WATCHER)
            if self._trace is not None:
                self._trace.reset(key)
        self.queue.clear(key)

    @_locked
    def delete_session(self, key: str, *, agent_id: str | None = None) -> None:
        """R14: remove the session's events, head, registry row and every cursor naming it."""
        check_key(key)
        target = self._resolve(key, agent_id)
        with self.store.atomic():
            naming = self.store.cursors_naming(*target)
            self._fire_records(naming, DELETE_SESSION)
            self.store.delete_session_data(*target)
            if self._trace is not None:
                self._trace.delete(target)
        for record in naming:
            self.queue.withdraw_notice(record.watcher, (record.target_key, record.target_agent_id))
        self.queue.clear(key)

    @_locked
    def prune(self) -> dict[str, int]:
        """R13: retention window and row cap for events; expiry for idle cursors."""
        now = self.clock()
        cutoff = now - self.retention_days * DAY_SECONDS
        counts = self.store.prune_events(
            cutoff, self.max_rows, on_chunk=self._trace.prune if self._trace is not None else None
        )
        with self.store.atomic():
            expired = self.store.expired_cursors(cutoff)
            self._fire_records(expired, EXPIRE)
        for record in expired:
            self.queue.withdraw_notice(record.watcher, (record.target_key, record.target_agent_id))
        return {
            "events": counts["events"], "cursors": len(expired), "chunks": counts["chunks"],
            "pages_reclaimed": self.store.reclaim_free_pages(),
        }

    @_locked
    def startup_sweep(self) -> int:
        """R11: re-materialise every owed notice from the durable cursors; returns how many."""
        with self.store.atomic():
            notices = self._fire_records(self.store.cursors_behind(), RESTART_SWEEP)
            if self._trace is not None:
                self._trace.sweep(len(notices))
        self._queue_notices(notices)
        return len(notices)

    # -- inspection -------------------------------------------------------------------------

    @_locked
    def cursor_positions(self, watcher_key: str, target_key: str, *, target_agent_id: str | None = None) -> Positions | None:
        """The pair's effective positions (``None`` when unwatched)."""
        check_key(watcher_key, "watcher key")
        target = self._resolve(target_key, target_agent_id)
        record = self.store.cursor(watcher_key, *target)
        return Positions(*record.positions) if record else None

    @_locked
    def state_version(self, key: str, agent_id: str | None = None) -> int:
        head = self.store.head(*self._resolve(key, agent_id))
        return head.last_sequence if head else 0

    # -- internals --------------------------------------------------------------------------

    def _resolve(self, key: Any, agent_id: Any) -> Target:
        """(key, agent id) of an existing session, or ``UnknownSession``."""
        check_key(key)
        agent = resolve_agent_id(key, agent_id)
        if agent is None:
            agents = self.store.agents_with_session_key(key)
            if len(agents) != 1:
                detail = "unknown" if not agents else f"ambiguous across agents {agents}; give agent_id"
                raise UnknownSession(f"session {key!r} is {detail}")
            agent = agents[0]
        elif self.store.get_session(key, agent) is None:
            raise UnknownSession(f"unknown session {key!r} (agent {agent!r})")
        return key, agent

    def _resolve_any_agent(self, key: str) -> None:
        agent = resolve_agent_id(key, None)
        known = self.store.get_session(key, agent) is not None if agent else bool(self.store.agents_with_session_key(key))
        if not known:
            raise UnknownSession(f"unknown session {key!r}")

    def _fire_pairs(
        self,
        pairs: Iterable[tuple[str, Target, Positions | None]],
        trigger: str,
        sequence: int | None,
        now: float,
        *,
        load: bool = False,
        delivered: str | None = None,
    ) -> list[Any]:
        """Fire ``trigger`` on each (watcher, target, positions) and write what changed.

        Must run inside ``store.atomic()``; with ``load`` the positions are read first.
        """
        steps = []
        changed: list[str] = []
        for watcher, target, positions in pairs:
            if load:
                record = self.store.cursor(watcher, *target)
                positions = Positions(*record.positions) if record else None
            step = fire((watcher, target[0]), positions, trigger, sequence)
            if self._trace is not None:
                self._trace.step(watcher, target, trigger, sequence, positions, step.positions,
                                 step.notice_since, delivered=delivered)
            if step.positions != positions:
                self.store.put_cursors(target[0], target[1], [(watcher, step.positions)], now)
                changed.append(watcher)
            steps.append(step)
        serving_sql.note_cursor_changes(self.store.db, changed, now)  # R22: for other processes' pumps
        return steps

    def _fire_records(self, records: list[CursorRecord], trigger: str) -> list[tuple[str, Target, int]]:
        pairs = [(r.watcher, (r.target_key, r.target_agent_id), Positions(*r.positions)) for r in records]
        steps = self._fire_pairs(pairs, trigger, None, self.clock())
        return [
            (watcher, target, step.notice_since)
            for (watcher, target, _), step in zip(pairs, steps)
            if step.notice_since is not None
        ]

    def _queue_notices(self, notices: Iterable[tuple[str, Target, int]]) -> None:
        if self._transaction_depth:  # inside transaction(): wait for its commit (R9)
            self._deferred_notices.extend(notices)
            return
        serves = self.serving.serves
        handed: list[tuple[str, Target, str, bool, bool]] | None = [] if self._trace is not None else None
        for watcher, target, since in notices:
            text = notice_text(target[0], since)
            if not serves(watcher):  # R19: another process queues it
                if handed is not None:
                    handed.append((watcher, target, text, False, False))
                continue
            queued = self.queue.enqueue(watcher, text, target)
            if handed is not None:
                handed.append((watcher, target, text, queued, True))
            if queued:
                self.stats["notices_enqueued"] += 1
                if is_main_style_watcher(watcher):
                    self._wakes.wake(watcher, f"session-state: {target[0]}")
                    self.rewaker.track(watcher, target)
        if handed is not None and self._trace is not None:
            self._trace.notices(handed)

    def _rewake(self, material: list[tuple[Target, str | None]], now: float) -> None:
        """R23: material events re-wake pending main-style watchers whose window passed."""
        if self._transaction_depth:  # inside transaction(): after its commit (R9)
            self._deferred_rewakes.extend(material)
            return
        on_material = self.rewaker.on_material
        for target, actor_id in material:
            on_material(target, actor_id, now)
