"""The notice protocol service: records events, runs the protocol, queues notices.

Every change of a cursor goes through ``statemachine.fire`` (the dispatch table compiled from
the one machine); every byte that reaches the disk goes through ``store``. The order inside
each public call is always: validate (raise, nothing changed) -> one transaction in the store
-> after the outermost commit, queue notices and send wakes (R9).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence  # the ABCs: isinstance on typing's aliases is slow
from typing import Any, Callable, Iterable, NamedTuple

from ..errors import InvalidArgument, SessionExists, StorageConflict, StorageError, StorageUnavailable, UnknownSession
from ..keys import (
    DEFAULT_AGENT_ID,
    SessionRef,
    check_key,
    is_agent_qualified,
    is_main_style_watcher,
    resolve_agent_id,
)
from .announce_created import announcement_target, created_line
from .batch_decisions import BatchDecisions
from .group_commit import GroupCommit, Waiter
from .locking import locked
from ..formats import notice_text
from .notices import SystemEventQueue, plan_drain
from .reconcile import events_json
from ..timefmt import DAY_SECONDS
from ..statemachine import NOTIFYING_KINDS, Positions, derive_state, fire, fire_many
from ..statemachine.machine import states_written_by
from ..statemachine.table import (
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
from ..store import CursorRecord, SessionRecord, Store
from ..validation import (
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
from ..provenance import (
    PROVENANCE_AMBIENT,
    PROVENANCE_EXPLICIT,
    PROVENANCE_SPAWN,
    CursorPositions,
    is_queue_only,
    registered_provenance,
)
from .rewake import Rewaker
from .claims import SERVE_ALL, Serving
from .trace import Tracer
from .wakes import DEFAULT_WAKE_WINDOW, WakeCoalescer, WakeTimer

log = logging.getLogger("sessionstate")

OCCURRED_AT_WINDOW = DAY_SECONDS  # R16
CHANGES_PAGE = 200
APPEND_ATTEMPTS = 3  # a burst that rolled back whole (conflict, lost connection) runs again
RETRY_PAUSE_SECONDS = 0.05

Clock = Callable[[], float]
WakeHook = Callable[[str, str], None]


# The event hot path reads only caught-up cursors (through a partial index) and skips
# log-only kinds entirely. That is sound only while the table says so; if it changes, this
# import fails instead of the gateway silently missing transitions.
if (states_written_by(MATERIAL_EVENT) | states_written_by(SELF_EVENT)) - {CAUGHT_UP} or states_written_by(
    LOG_ONLY_EVENT
):
    raise ImportError("the transition table needs cursor writes the event hot path does not make")


class PreparedEvent(NamedTuple):
    # None until resolved inside the append's transaction (``requested`` names it): a
    # resolution that reads the database must fail as the append does (R15).
    target: SessionRef | None
    kind: str
    actor_type: str
    actor_id: str | None
    run_id: str | None
    summary: str
    payload: str | None
    occurred_at: float | None
    dedupe_key: str | None
    requested: tuple[str, str | None]  # (session key, agent id) as the caller gave them


_PreparedEvent = PreparedEvent  # the name this module's hot path uses


class NoticeProtocol:
    """The notice protocol service: the signal log, the cursors, the in-memory queue and the
    wakes (spec R1-R18). Every cursor change goes through ``statemachine``; every in-memory
    effect (a queued notice or line, a withdrawal, a wake) waits for the outermost commit of
    the store's unit of work (R9)."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        on_wake: WakeHook | None = None,
        retention_days: float = 30,
        max_rows: int = 50_000,
        serve: Sequence[str] = SERVE_ALL,
        wake_window: float = DEFAULT_WAKE_WINDOW,
    ) -> None:
        if isinstance(retention_days, bool) or not isinstance(retention_days, (int, float)) or retention_days <= 0:
            raise InvalidArgument("retention_days must be a positive number")
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0:
            raise InvalidArgument("max_rows must be a non-negative integer")
        self.store = store
        self.clock = clock
        self.retention_days = retention_days
        self.max_rows = max_rows
        self.queue = SystemEventQueue()
        self.wakes = WakeCoalescer(
            on_wake, clock, window=wake_window,
            holds_waking_after=self.queue.holds_waking_after, queue_mark=self.queue.mark,
        )
        self.wakes.start_timer = self._start_wake_timer  # R12: one timer, started by the first owed wake
        self.wakes.on_fired = self._trace_wake
        self._wakes_stopped = False
        self.stats = {"append_failures": 0, "events_recorded": 0, "notices_enqueued": 0}
        self.serving = Serving(self, serve)  # section 6a: which watchers this process serves
        self.wakes.take_slot = self.serving.take_wake_slot  # R23: the durable wake slot
        # R26: a re-wake is a wake too, so it asks the same question (an ambient pair that
        # replaced a tracked one must not inherit its entry).
        self.rewaker = Rewaker(self.wakes, lambda w, t: self.queue.holds_notice(w, t) and self.wakes_for(w, t))
        self.tracer: Tracer | None = None  # the protocol trace (spec section 15), when on
        # R27, both on by default (see Gateway.open): log `created` for every new session;
        # announce it to the agent's main session.
        self.record_created = True
        self.notify_on_create = True

        # Concurrent record_event/record_events calls share a transaction (spec R9).
        self.group: GroupCommit[_PreparedEvent] = GroupCommit(
            store.lock, lambda: store.in_transaction, self._record_alone, self._record_batch
        )

    # -- owed wakes (R12, LIV1) ---------------------------------------------------------------

    @locked
    def fire_due_wakes(self) -> int:
        """Fire the owed wakes that are due by the gateway's clock; returns how many fired.

        The wake timer calls this when the earliest owed wake falls due; a test with a fake
        clock moves the clock past the window's end and calls it to fire them at once."""
        return self.wakes.fire_due()

    def stop_wakes(self) -> None:
        """Stop the wake timer (closing; call without the lock: a firing round takes it)."""
        self._wakes_stopped = True
        self.wakes.start_timer = None
        timer = self.wakes.timer
        if timer is not None:
            timer.stop()

    def _start_wake_timer(self) -> WakeTimer:
        return WakeTimer(self.wakes, self.clock, self._fire_from_timer)

    def _fire_from_timer(self) -> None:
        with self.store.lock:
            if not self._wakes_stopped:
                self.wakes.fire_due()

    def _trace_wake(self, watcher: str, at: float, due: float | None) -> None:
        if self.tracer is not None:
            self.tracer.wake(watcher, at, self.wakes.window, due)

    def line_wakes(self, watcher: str, target: SessionRef | None) -> bool:
        """THE wake decision (R12): whether a line queued for ``watcher`` (a notice for
        ``target``, or a plain line when ``None``) asks for a wake. Decided once, when the line
        is queued; owed wakes count only the lines it said yes to. A notice asks only when
        its pair is not ambient (R26, through ``wakes_for``)."""
        if target is None:
            return is_main_style_watcher(watcher)
        return self.wakes_for(watcher, target)

    # -- several processes (spec section 6a) ------------------------------------------------

    @locked
    def attach(self, session_key: str) -> int:
        """R20: serve ``session_key`` from this process (the last attach wins); returns the
        claim's generation. Needs the change pump."""
        return self.serving.attach(session_key)

    @locked
    def detach(self, session_key: str) -> bool:
        """R20: drop this process's claim on ``session_key``; ``True`` when it held one."""
        return self.serving.detach(session_key)

    @locked
    def serves(self, session_key: str) -> bool:
        """R19: whether notices for ``session_key`` are queued (and wakes sent) here."""
        check_key(session_key)
        return self.serving.serves(session_key)

    @locked
    def sweep_changes(self) -> int:
        """R22: one sweep now, of everything committed before the call (what the pump runs on
        a change); notices queued."""
        return self.serving.sweep(sync=True)

    # -- sessions ---------------------------------------------------------------------------

    @locked
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
        parent_target = self.resolve(parent, None) if parent is not None else None
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
        with self.store.transaction():
            self.store.insert_session(record)
            if self.record_created:  # R27: log-only, before a spawn edge's child_spawned
                created, inserted = self.store.append_event(
                    key, agent, "created", "system", None, None, f"session created ({kind})", None, now, now,
                    f"created:{agent}:{key}",
                )
                if inserted:
                    self.stats["events_recorded"] += 1
                    if self.tracer is not None:
                        self.tracer.event(created, (key, agent), "created", "system", None)
            main = announcement_target(key, agent, parent_target[0] if parent_target else None)
            if self.notify_on_create and main is not None and self.store.get_session(main, agent) is not None:
                line = created_line(key, kind, label)
                self.store.after_commit(lambda: self._announce(main, line))
            if parent_target is not None:
                sequence, inserted = self.store.append_event(
                    key, agent, "child_spawned", "agent", parent_target[0], run_id,
                    f"spawned by {parent_target[0]}"[:MAX_SUMMARY_LENGTH], None, now, now,
                    f"child-spawned:{run_id}" if run_id else None,
                )
                if inserted and self.tracer is not None:
                    self.tracer.event(sequence, (key, agent), "child_spawned", "agent", parent_target[0])
                # R3: only agent-qualified parents hold cursors; R4: seeded at the spawn.
                if is_agent_qualified(parent_target[0]):
                    self._fire_pairs([(parent_target[0], (key, agent), None)], SEED, sequence, now,
                                     provenance=PROVENANCE_SPAWN)
                    self.store.set_provenance(parent_target[0], key, agent, PROVENANCE_SPAWN, promote_only=False)
        if parent_target is not None:
            self.stats["events_recorded"] += 1

    @locked
    def session_exists(self, key: str, agent_id: str | None = None) -> bool:
        try:
            self.resolve(key, agent_id)
        except UnknownSession:
            return False
        return True

    # -- the signal log ---------------------------------------------------------------------

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
        """Append one event; returns its sequence, or ``None`` if storage failed (R15).

        Validated first (raising, nothing written); concurrent calls from other threads may
        share its transaction (group commit), and it returns only after that commit."""
        event = self.prepare_event(
            session_key, kind, actor_type=actor_type, summary=summary, actor_id=actor_id,
            agent_id=agent_id, run_id=run_id, payload=payload, dedupe_key=dedupe_key,
            occurred_at=occurred_at,
        )
        return self.group.submit((event,))[0]

    def record_events(self, events: Sequence[Mapping[str, Any]]) -> list[int | None]:
        """Append a burst in one transaction; each item holds ``record_event``'s arguments
        (``session_key``, ``kind`` and the keywords).

        Every item is validated before anything is written: one bad item raises and nothing
        changes. A storage failure rolls the whole burst back and returns ``None`` for each.
        The burst stays together, in order, when it shares a transaction with other callers'.
        """
        return self.group.submit(self.prepare_events(events))

    def prepare_events(self, events: Sequence[Mapping[str, Any]]) -> list["_PreparedEvent"]:
        """``record_events``' validation alone (pure: no lock, no store): the prepared events,
        or ``InvalidArgument`` for the first bad item. For callers that validate before they
        hand the work to another thread (``sessionstate.aio``)."""
        if isinstance(events, (str, bytes)) or not isinstance(events, Sequence):
            raise InvalidArgument("events must be a sequence of mappings")
        prepared = []
        for index, item in enumerate(events):
            if not isinstance(item, Mapping):
                raise InvalidArgument(f"events[{index}] must be a mapping")
            try:
                prepared.append(self.prepare_event(**item))
            except TypeError as exc:  # missing or unknown argument names
                raise InvalidArgument(f"events[{index}]: {exc}") from None
        return prepared

    def record_prepared(self, calls: Sequence[Sequence["_PreparedEvent"]]) -> list[Waiter["_PreparedEvent"]]:
        """Commit several callers' prepared events as one group (with whatever other threads
        have queued), waiting for the write turn; each waiter holds its caller's outcome."""
        return self.group.submit_all(calls)

    def prepare_event(
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
        """Validate one event's arguments (raising, nothing written); pure, so it runs before
        the caller waits for the write turn. The target is resolved here when its key names the
        agent and no dedupe key asks for a read, else inside the append's transaction (R15)."""
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
        # The head bump inside the transaction proves the session exists (append_event raises
        # UnknownSession and the transaction rolls back): no separate read.
        target: SessionRef | None = (session_key, agent) if agent is not None and dedupe_key is None else None
        return _PreparedEvent(target, kind, actor_type, actor_id, run_id, summary, payload_text,
                              produced_at, dedupe_key, (session_key, agent_id))

    def _record_alone(self, events: Sequence["_PreparedEvent"]) -> list[int | None]:
        """One caller's events in a transaction of their own (or the caller's open one);
        holding the lock."""
        return self._append_prepared(events)

    def _record_batch(self, waiters: list[Waiter["_PreparedEvent"]]) -> None:
        """Group commit: every waiter's events in one transaction, holding the lock.

        A caller whose session is unknown fails alone: its lookup or head bump fails inside the
        batch's transaction (which rolls back whole), and the callers run again one transaction
        each. A storage failure gives every caller of the batch its
        ``None`` per event (R15).
        """
        live = list(waiters)
        if len(live) > 1:
            merged = [e for waiter in live for e in waiter.events]
            try:
                results = self._append_prepared(merged)
            except UnknownSession:
                pass  # rolled back whole: each caller alone below gets its own outcome
            else:
                start = 0
                for waiter in live:
                    end = start + len(waiter.events)
                    waiter.result = results[start:end]
                    start = end
                return
        for waiter in live:
            try:
                waiter.result = self._append_prepared(waiter.events)
            except Exception as exc:
                waiter.error = exc

    def _append_prepared(self, events: Sequence["_PreparedEvent"]) -> list[int | None]:
        """One transaction for all of ``events``; notices are queued after the commit (R9).

        A storage failure that is known to have rolled everything back (a conflict with a
        concurrent writer, a connection lost before the commit), or one after which every
        event would be found again by its dedupe key (R10), is retried a few times when this
        is the outermost transaction; any other, or the last, returns ``None`` per event (R15).
        """
        now = self.clock()
        for attempt in range(1, APPEND_ATTEMPTS + 1):
            try:
                sequences, notices, material, inserted_count = self._append_once(events, now)
            except StorageError as exc:
                retry = attempt < APPEND_ATTEMPTS and not self.store.in_transaction and (
                    exc.retry_safe or all(e.dedupe_key is not None for e in events)
                ) and isinstance(exc, (StorageConflict, StorageUnavailable))
                if retry:
                    log.warning("recording %d event(s) failed (%s); retrying", len(events), exc.message)
                    time.sleep(RETRY_PAUSE_SECONDS * attempt)
                    continue
                self.stats["append_failures"] += len(events)
                kinds = ", ".join(sorted({e.kind for e in events}))
                log.exception("recording %d event(s) (%s) failed; the turn goes on", len(events), kinds)
                return [None] * len(events)
            self.stats["events_recorded"] += inserted_count
            self.queue_notices(notices)
            if material:
                self._rewake(material, now)
            return sequences
        raise AssertionError("unreachable: the last attempt returns")

    def _append_once(self, events: Sequence["_PreparedEvent"], now: float) -> tuple[
        list[int | None], list[tuple[str, SessionRef, int]], list[tuple[SessionRef, str | None]], int
    ]:
        floor = now - OCCURRED_AT_WINDOW
        notices: list[tuple[str, SessionRef, int]] = []
        material: list[tuple[SessionRef, str | None]] = []
        sequences: list[int | None] = []
        inserted_count = 0
        trace = self.tracer
        with self.store.transaction():
            # Resolved here, so a storage failure while reading is the append's (R15); an
            # unknown session raises UnknownSession and the transaction rolls back.
            events = [e if e.target is not None else e._replace(target=self.resolve(*e.requested)) for e in events]
            rows = [
                (e.target[0], e.target[1], e.kind, e.actor_type, e.actor_id, e.run_id, e.summary, e.payload,
                 now if e.occurred_at is None else min(max(e.occurred_at, floor), now), now, e.dedupe_key)
                for e in events
                if e.target is not None  # resolved above
            ]
            batch: BatchDecisions | None = None
            if len(rows) == 1:
                appended = [self.store.append_event(*rows[0])]
            else:  # several sessions: their locks in one order (no deadlock), one append statement
                self.store.lock_targets({e.target for e in events if e.target is not None})
                appended = self.store.append_events(rows)
                batch = BatchDecisions(self.store, [
                    e.target for e, (_, inserted) in zip(events, appended)
                    if inserted and e.kind in NOTIFYING_KINDS and e.target is not None
                ])
            # The decisions read and write cursors only, so they follow the appends in order.
            for e, (sequence, inserted) in zip(events, appended):
                assert e.target is not None  # resolved above
                sequences.append(sequence)
                if inserted:
                    inserted_count += 1
                    if trace is not None:
                        trace.event(sequence, e.target, e.kind, e.actor_type, e.actor_id, notices_follow=True)
                    if e.kind in NOTIFYING_KINDS:
                        if batch is None:
                            notices += self._decide_notices(e.target, e.actor_id, sequence, now, e.kind)
                        else:
                            notices += batch.decide(self._fire_event, e.target, e.actor_id, sequence, e.kind)
                        material.append((e.target, e.actor_id))
            if batch is not None:
                batch.write(now)
        return sequences, notices, material, inserted_count

    def _decide_notices(
        self, target: SessionRef, actor_id: str | None, sequence: int, now: float, kind: str
    ) -> list[tuple[str, SessionRef, int]]:
        """The hot path of a notifying event: only caught-up cursors change (R6, R7).

        A pending cursor's transition on `material_event` is `raise_material`, which the store
        keeps derived from the log, so pending cursors are neither read nor written here.
        """
        changes, notices = self._fire_event(self.store.caught_up_watchers(*target), target, actor_id, sequence, kind)
        if changes:
            self.store.put_cursors(target[0], target[1], changes, now)
        return notices

    def _fire_event(
        self, rows: list[tuple[str, tuple[int, int, int]]], target: SessionRef, actor_id: str | None,
        sequence: int, kind: str,
    ) -> tuple[list[tuple[str, tuple[int, int, int] | None]], list[tuple[str, SessionRef, int]]]:
        """One notifying event's transitions on the target's caught-up ``rows`` (pure but for
        the trace): the cursor changes and the notices they open."""
        # R2: the actor's own cursor gets self_event; everyone else's material_event.
        own = [row for row in rows if row[0] == actor_id] if actor_id is not None else []
        others = [row for row in rows if row[0] != actor_id] if own else rows
        changes: list[tuple[str, tuple[int, int, int] | None]] = []
        notices: list[tuple[str, SessionRef, int]] = []
        trace = self.tracer
        for trigger, group in ((MATERIAL_EVENT, others), (SELF_EVENT, own)):
            if not group:  # mostly the actor's own: nobody, or no watcher at all
                continue
            fired = fire_many(group, target[0], trigger, sequence)
            if trace is not None:
                trace.event_steps(target, trigger, sequence, kind, actor_id, group, fired)
            for (watcher, old), (_, new, notice_since) in zip(group, fired):
                if new != old:
                    changes.append((watcher, new))
                if notice_since is not None:
                    notices.append((watcher, target, notice_since))
        return changes, notices

    # -- watching ---------------------------------------------------------------------------

    @locked
    def watch(
        self, watcher_key: str, target_key: str, *, target_agent_id: str | None = None, ambient: bool = False
    ) -> bool:
        """Watch ``target_key`` from its current state version (R4).

        Returns ``True`` when a cursor was created, ``False`` when the pair was already
        watched (its positions are kept, pending notice included). ``ambient``: the gateway
        registers the watch itself; the pair's notices are queued but never wake (R26). An
        explicit watch promotes an ambient pair; an ambient one never demotes (R25).
        """
        if not isinstance(ambient, bool):
            raise InvalidArgument("ambient must be a boolean")
        watcher, target = self._check_pair(watcher_key, target_key, target_agent_id)
        requested = PROVENANCE_AMBIENT if ambient else PROVENANCE_EXPLICIT
        now = self.clock()
        with self.store.transaction():  # the head is read under the write lock: no event slips between
            head = self.store.head(*target)
            version = head.last_sequence if head else 0
            record = self.store.cursor(watcher, *target)
            positions = Positions(*record.positions) if record else None
            provenance = registered_provenance(record.provenance if record else None, requested)
            (step,) = self._fire_pairs([(watcher, target, positions)], SEED, version, now, provenance=provenance)
            # A new row starts explicit (the column's default): only another provenance is written.
            if provenance != (record.provenance if record else PROVENANCE_EXPLICIT):
                self.store.set_provenance(watcher, *target, provenance, promote_only=record is not None)
                if record is not None:  # a promotion: other processes' pumps hear of the pair
                    self.store.serving.note_cursor_changes([watcher], now)
                    self.store.after_commit(lambda: self._promoted(watcher, target))
        return step.state == UNWATCHED

    def _promoted(self, watcher: str, target: SessionRef) -> None:
        """R26: a notice queued while the pair was ambient is not woken for at the promotion;
        R23's heal takes it from here (a later material event wakes the now explicit pair)."""
        if self.queue.holds_notice(watcher, target) and self.wakes_for(watcher, target):
            self.rewaker.track_promoted(watcher, target)

    @locked
    def unwatch(self, watcher_key: str, target_key: str, *, target_agent_id: str | None = None) -> bool:
        """Stop watching; ``True`` when a cursor was removed."""
        watcher, target = self._check_pair(watcher_key, target_key, target_agent_id)
        with self.store.transaction():
            (step,) = self._fire_pairs([(watcher, target, None)], UNWATCH, None, self.clock(), load=True)
            self.store.after_commit(lambda: self.queue.withdraw_notice(watcher, target))
        return step.state != UNWATCHED

    def _check_pair(self, watcher_key: str, target_key: str, target_agent_id: str | None) -> tuple[str, SessionRef]:
        check_key(watcher_key, "watcher key")
        check_key(target_key, "target key")
        if not is_agent_qualified(watcher_key):
            raise InvalidArgument(
                f"watcher {watcher_key!r} is not agent-qualified (agent:<id>:...); it gets no proactive notices"
            )
        watcher = self.resolve(watcher_key, None)
        target = self.resolve(target_key, target_agent_id)
        if target == watcher:
            raise InvalidArgument("a session cannot watch itself")
        return watcher_key, target

    # -- turns ------------------------------------------------------------------------------

    @locked
    def drain_system_events(self, session_key: str) -> list[str]:
        """The system lines for the session's next turn; acknowledges the notices among them.

        R21: the durable cursors decide, whichever process queued what: one line per pending
        pair, for the cursor's L; stale queued notices are dropped.
        """
        check_key(session_key)
        entries = self.queue.peek(session_key)
        if not entries:
            self.resolve_any_agent(session_key)
        serving = self.store.serving
        # A read first: a watcher that owes nothing takes no write lock. A queued notice is
        # the sign that it owes one (R21 decides inside the transaction): no read then.
        if not is_agent_qualified(session_key) or (
            not any(e.target is not None for e in entries) and not serving.pending_held_by(session_key)
        ):
            texts = [e.text for e in entries]
            self.store.after_commit(lambda: self.queue.remove(session_key, texts))
            return [e.text for e in entries if e.target is None]
        now = self.clock()
        follow_ups: list[tuple[str, SessionRef, int]] = []
        with self.store.transaction():
            self.store.lock_watcher_targets(session_key)  # then read: see spec section 16
            # One read for every pending pair, effective positions included (R7): the
            # acknowledgements fire on them without reading each cursor again.
            owed = {(r.target_key, r.target_agent_id): r.positions
                    for r in self.store.pending_cursors_held_by(session_key)}
            lines = plan_drain(entries, {target: positions[0] for target, positions in owed.items()})
            for text, target in lines:
                if target is None:
                    continue
                (step,) = self._fire_pairs(
                    [(session_key, target, Positions(*owed[target]))], DRAIN, None, now, delivered=text
                )
                if step.notice_since is not None:
                    follow_ups.append((session_key, target, step.notice_since))
            texts = [e.text for e in entries]
            self.store.after_commit(lambda: self.queue.remove(session_key, texts))
            self.queue_notices(follow_ups)
        return [text for text, _ in lines]

    @locked
    def pending_system_events(self, session_key: str) -> list[str]:
        """What the next drain would return, without acknowledging anything."""
        check_key(session_key)
        return [e.text for e in self.queue.peek(session_key)]

    @locked
    def queue_owed_notices(self, session_key: str) -> int:
        """R18: queue the notice of each pending pair of the session not queued here yet.

        For a process that serves a session whose targets other processes record: it reads
        the session's cursors, fires no trigger and writes nothing (a sweep would fold later
        events into the pending notice), so a drain after it acknowledges exactly what a turn
        in the recording process would. Returns how many notices it queued.
        """
        check_key(session_key)
        queued = {e.target for e in self.queue.peek(session_key)}
        owed: list[tuple[str, SessionRef, int]] = []
        for record in self.store.cursors_held_by(session_key):
            target = (record.target_key, record.target_agent_id)
            positions = Positions(*record.positions)
            if target not in queued and derive_state(positions) in PENDING_STATES:
                owed.append((session_key, target, positions.last_seen))
        self.queue_notices(owed)
        return len(owed)

    @locked
    def enqueue_system_event(self, session_key: str, text: str) -> bool:
        """Queue a plain system line (announcements) for the session's next turn."""
        check_key(session_key)
        self.resolve_any_agent(session_key)
        check_text(text, "system event text", MAX_SYSTEM_EVENT_CHARS, allow_empty=False)
        added = text not in {e.text for e in self.queue.peek(session_key)}
        # R9: inside a transaction the line waits for the outermost commit (at once outside one).
        self.store.after_commit(lambda: self._release_system_event(session_key, text))
        return added

    def _announce(self, main: str, line: str) -> None:
        """R27: queue the announcement line for the main session's next turn; no wake (it is
        not a notice, and a gateway creating many sessions must not keep waking its main)."""
        self.queue.enqueue(main, line)

    def _release_system_event(self, session_key: str, text: str) -> None:
        wakes = self.line_wakes(session_key, None)
        if self.queue.enqueue(session_key, text, wakes=wakes) and wakes:
            self.wakes.wake(session_key, "system-event")

    # -- reconciliation ---------------------------------------------------------------------

    @locked
    def session_status(
        self, session_key: str, *, changes_since: int | None = None, agent_id: str | None = None
    ) -> dict[str, Any]:
        check_key(session_key)
        if changes_since is not None:
            check_changes_since(changes_since)
        agent = resolve_agent_id(session_key, agent_id)
        target = (session_key, agent) if agent is not None else self.resolve(session_key, None)
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

    # -- reset, delete, retention -----------------------------------------------------------

    @locked
    def reset_session(self, key: str, *, agent_id: str | None = None) -> None:
        """R14: the session's own cursors go; the history of its targets stays."""
        check_key(key)
        self.resolve(key, agent_id)
        with self.store.transaction():
            self._fire_records(self.store.cursors_held_by(key), RESET_WATCHER)
            if self.tracer is not None:
                self.tracer.reset(key)
            self.store.after_commit(lambda: self.queue.clear(key))

    @locked
    def delete_session(self, key: str, *, agent_id: str | None = None) -> None:
        """R14: remove the session's events, head, registry row and every cursor naming it."""
        check_key(key)
        target = self.resolve(key, agent_id)
        with self.store.transaction():
            naming = self.store.cursors_naming(*target)
            self._fire_records(naming, DELETE_SESSION)
            self.store.delete_session_data(*target)
            if self.tracer is not None:
                self.tracer.delete(target)
            self.store.after_commit(lambda: self._withdraw(naming, clear=key))

    @locked
    def prune(self) -> dict[str, int]:
        """R13: retention window and row cap for events; expiry for idle cursors."""
        now = self.clock()
        cutoff = now - self.retention_days * DAY_SECONDS
        counts = self.store.prune_events(
            cutoff, self.max_rows, on_chunk=self.tracer.prune if self.tracer is not None else None
        )
        with self.store.transaction():
            expired = self.store.expired_cursors(cutoff)
            self._fire_records(expired, EXPIRE)
            self.store.after_commit(lambda: self._withdraw(expired))
        return {
            "events": counts["events"], "cursors": len(expired), "chunks": counts["chunks"],
            "pages_reclaimed": self.store.reclaim_free_pages(),
        }

    @locked
    def startup_sweep(self) -> int:
        """R11: re-materialise every owed notice from the durable cursors; returns how many.
        On a database this connection cannot write, in memory only (``_sweep_in_memory``)."""
        if not self.store.read_only:
            try:
                with self.store.transaction():
                    notices = self._fire_records(self.store.cursors_behind(), RESTART_SWEEP)
                    if self.tracer is not None:
                        self.tracer.sweep(len(notices))
            except StorageError:
                if not self.store.read_only:  # the write was refused for another reason
                    raise
            else:
                self.queue_notices(notices)
                return len(notices)
        return self._sweep_in_memory()

    def _sweep_in_memory(self) -> int:
        """R11 on a read-only database: the same transitions, fired on positions read without a
        transaction, their notices queued and nothing written. The notices are those of the
        durable cursors (their L), so what this process answers agrees with every other."""
        notices = []
        for r in self.store.cursors_behind():
            step = fire((r.watcher, r.target_key), Positions(*r.positions), RESTART_SWEEP, None)
            if step.notice_since is not None:
                notices.append((r.watcher, (r.target_key, r.target_agent_id), step.notice_since))
        log.info("%s is read-only: %d owed notice(s) held in memory only", self.store.where, len(notices))
        self.queue_notices(notices)
        return len(notices)

    # -- inspection -------------------------------------------------------------------------

    @locked
    def cursor_positions(
        self, watcher_key: str, target_key: str, *, target_agent_id: str | None = None
    ) -> CursorPositions | None:
        """The pair's effective positions and provenance (``None`` when unwatched)."""
        check_key(watcher_key, "watcher key")
        target = self.resolve(target_key, target_agent_id)
        record = self.store.cursor(watcher_key, *target)
        return CursorPositions(*record.positions, record.provenance) if record else None

    @locked
    def watchers_of(self, target_key: str, *, target_agent_id: str | None = None) -> list[tuple[str, CursorPositions]]:
        """Every cursor on the target: (watcher, effective positions with provenance), by watcher."""
        target = self.resolve(target_key, target_agent_id)
        return [
            (r.watcher, CursorPositions(*r.positions, r.provenance))
            for r in self.store.cursors_naming(*target)
            if (r.target_key, r.target_agent_id) == target
        ]

    @locked
    def state_version(self, key: str, agent_id: str | None = None) -> int:
        head = self.store.head(*self.resolve(key, agent_id))
        return head.last_sequence if head else 0

    # -- internals --------------------------------------------------------------------------

    def resolve(self, key: Any, agent_id: Any) -> SessionRef:
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

    def resolve_any_agent(self, key: str) -> None:
        agent = resolve_agent_id(key, None)
        known = self.store.get_session(key, agent) is not None if agent else bool(self.store.agents_with_session_key(key))
        if not known:
            raise UnknownSession(f"unknown session {key!r}")

    def _fire_pairs(
        self,
        pairs: Iterable[tuple[str, SessionRef, Positions | None]],
        trigger: str,
        sequence: int | None,
        now: float,
        *,
        load: bool = False,
        delivered: str | None = None,
        provenance: str | None = None,
    ) -> list[Any]:
        """Fire ``trigger`` on each (watcher, target, positions) and write what changed.

        Must run inside ``store.transaction()``; with ``load`` the positions are read first.
        """
        steps = []
        changed: list[str] = []
        for watcher, target, positions in pairs:
            if load:
                record = self.store.cursor(watcher, *target)
                positions = Positions(*record.positions) if record else None
            step = fire((watcher, target[0]), positions, trigger, sequence)
            if self.tracer is not None:
                self.tracer.step(watcher, target, trigger, sequence, positions, step.positions,
                                 step.notice_since, delivered=delivered, provenance=provenance)
            if step.positions != positions:
                self.store.put_cursors(target[0], target[1], [(watcher, step.positions)], now)
                changed.append(watcher)
            steps.append(step)
        self.store.serving.note_cursor_changes(changed, now)  # R22: for other processes' pumps
        return steps

    def _fire_records(self, records: list[CursorRecord], trigger: str) -> list[tuple[str, SessionRef, int]]:
        pairs = [(r.watcher, (r.target_key, r.target_agent_id), Positions(*r.positions)) for r in records]
        steps = self._fire_pairs(pairs, trigger, None, self.clock())
        return [
            (watcher, target, step.notice_since)
            for (watcher, target, _), step in zip(pairs, steps)
            if step.notice_since is not None
        ]

    def _withdraw(self, records: list[CursorRecord], *, clear: str | None = None) -> None:
        for record in records:
            self.queue.withdraw_notice(record.watcher, (record.target_key, record.target_agent_id))
        if clear is not None:
            self.queue.clear(clear)

    def queue_notices(self, notices: list[tuple[str, SessionRef, int]]) -> None:
        # R9: after the outermost commit; dropped if it rolls back. The trace hears of every
        # commit's notices, none included (its batch waits for them).
        if notices or self.tracer is not None:
            self.store.after_commit(lambda: self._release_notices(notices))

    def _release_notices(self, notices: list[tuple[str, SessionRef, int]]) -> None:
        serves = self.serving.serves
        trace = self.tracer
        handed: list[tuple[str, SessionRef, str, bool, bool]] | None = [] if trace is not None else None
        to_wake: dict[str, SessionRef] = {}  # one wake per watcher for lines queued together
        tracked: list[tuple[str, SessionRef]] = []
        texts: dict[tuple[str, int], str] = {}  # the watchers of one event mostly share a text
        for watcher, target, since in notices:
            text = texts.get((target[0], since))
            if text is None:
                text = texts[(target[0], since)] = notice_text(target[0], since)
            if not serves(watcher):  # R19: another process queues it
                if handed is not None:
                    handed.append((watcher, target, text, False, False))
                continue
            wakes = self.line_wakes(watcher, target)
            queued = self.queue.enqueue(watcher, text, target, wakes=wakes)
            if handed is not None:
                handed.append((watcher, target, text, queued, True))
            if queued:
                self.stats["notices_enqueued"] += 1
                if wakes:
                    to_wake.setdefault(watcher, target)
                    tracked.append((watcher, target))
        if handed is not None and trace is not None:
            trace.notices(handed)
        for watcher, target in to_wake.items():  # after all entered: they share the wake
            self.wakes.wake(watcher, f"session-state: {target[0]}")
        for watcher, target in tracked:  # R23's re-wake heap files them at their wake time
            self.rewaker.track(watcher, target)

    def wakes_for(self, watcher: str, target: SessionRef) -> bool:
        """The one place a wake is decided (R12, R26): a main-style watcher whose cursor on
        ``target`` is not ambient. The durable provenance is read last, and only when a wake
        could be sent at all, so a gateway without ``on_wake`` never reads it."""
        return (
            is_main_style_watcher(watcher)
            and self.wakes.enabled
            and not is_queue_only(self.store.cursor_provenance(watcher, *target))
        )

    def _rewake(self, material: list[tuple[SessionRef, str | None]], now: float) -> None:
        """R23: material events re-wake pending main-style watchers whose window passed
        (after the outermost commit, R9)."""
        on_material = self.rewaker.on_material

        def rewake() -> None:
            for target, actor_id in material:
                on_material(target, actor_id, now)

        self.store.after_commit(rewake)
