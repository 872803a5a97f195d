"""Recording the signal log: validation before the write turn (``prepare_event``), group commit
of concurrent callers (R9), one transaction a burst, and each notifying event's decisions on
the caught-up cursors (R2, R6, R7), one by one or as a batch.
"""

from __future__ import annotations

import time
from collections.abc import (  # the ABCs: isinstance on typing's aliases is slow
    Mapping,
    Sequence,
)
from typing import Any, NamedTuple, TypedDict, Unpack

from ...errors import (
    InvalidArgument,
    StorageConflict,
    StorageError,
    StorageUnavailable,
    UnknownSession,
)
from ...shared.keys import SessionRef, check_key, resolve_agent_id
from ...shared.provenance import Notice
from ...shared.validation import (
    MAX_SUMMARY_LENGTH,
    check_actor_type,
    check_kind,
    check_line,
    check_optional_id,
    check_timestamp,
    encode_payload,
)
from ...statemachine import NOTIFYING_KINDS, fire_many
from ...statemachine.machine import states_written_by
from ...statemachine.table import CAUGHT_UP, LOG_ONLY_EVENT, MATERIAL_EVENT, SELF_EVENT
from ...store import Store
from ...store.records import CaughtUpRow
from .batch_decisions import BatchDecisions
from .group_commit import GroupCommit, Waiter

# The event hot path reads only caught-up cursors (through a partial index) and skips
# log-only kinds entirely. That is sound only while the table says so; if it changes, this
# import fails instead of the gateway silently missing transitions.
if (states_written_by(MATERIAL_EVENT) | states_written_by(SELF_EVENT)) - {CAUGHT_UP} or states_written_by(
    LOG_ONLY_EVENT
):
    raise ImportError("the transition table needs cursor writes the event hot path does not make")


class _RequiredEventArgs(TypedDict):
    actor_type: str
    summary: str


class EventArgs(_RequiredEventArgs, total=False):
    """``record_event``'s keyword arguments, written once: ``prepare_event`` reads them,
    ``record_event``, ``Gateway.record_event`` and ``AsyncGateway.record_event`` pass them on
    (``Unpack[EventArgs]``). ``actor_type`` and ``summary`` are required."""

    actor_id: str | None
    agent_id: str | None
    run_id: str | None
    payload: dict[str, Any] | None
    dedupe_key: str | None
    occurred_at: float | None


EVENT_ARGS = EventArgs.__required_keys__ | EventArgs.__optional_keys__
REQUIRED_EVENT_ARGS = EventArgs.__required_keys__


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


from .core import APPEND_ATTEMPTS, OCCURRED_AT_WINDOW, RETRY_PAUSE_SECONDS, log
from .turns import Turns


class Recording(Turns):
    """Prepare, group-commit and append events; decide their notices."""

    def __init__(self, store: Store, **options: Any) -> None:
        super().__init__(store, **options)
        # Concurrent record_event/record_events calls share a transaction (spec R9).
        self.group: GroupCommit[PreparedEvent] = GroupCommit(
            store.lock, lambda: store.in_transaction, self._append_prepared, self._record_batch
        )

    def record_event(self, session_key: str, kind: str, **event: Unpack[EventArgs]) -> int | None:
        """Append one event; returns its sequence, or ``None`` if storage failed (R15).

        Validated first (raising, nothing written); concurrent calls from other threads may
        share its transaction (group commit), and it returns only after that commit."""
        if not self.observers:
            return self.group.submit((self._prepare(session_key, kind, event),))[0]
        started = time.perf_counter()
        sequence = self.group.submit((self._prepare(session_key, kind, event),))[0]
        self.observers.recorded([kind], [sequence], started)
        return sequence

    def record_events(self, events: Sequence[Mapping[str, Any]]) -> list[int | None]:
        """Append a burst in one transaction; each item holds ``record_event``'s arguments
        (``session_key``, ``kind`` and the keywords).

        Every item is validated before anything is written: one bad item raises and nothing
        changes. A storage failure rolls the whole burst back and returns ``None`` for each.
        The burst stays together, in order, when it shares a transaction with other callers'.
        """
        if not self.observers:
            return self.group.submit(self.prepare_events(events))
        started = time.perf_counter()
        prepared = self.prepare_events(events)
        sequences = self.group.submit(prepared)
        self.observers.recorded([p.kind for p in prepared], sequences, started)
        return sequences

    def prepare_events(self, events: Sequence[Mapping[str, Any]]) -> list[PreparedEvent]:
        """``record_events``' validation alone (pure: no lock, no store): the prepared events,
        or ``InvalidArgument`` for the first bad item. For callers that validate before they
        hand the work to another thread (``sessionstate.facade.aio``)."""
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

    def record_prepared(self, calls: Sequence[Sequence[PreparedEvent]]) -> list[Waiter[PreparedEvent]]:
        """Commit several callers' prepared events as one group (with whatever other threads
        have queued), waiting for the write turn; each waiter holds its caller's outcome."""
        if isinstance(calls, (str, bytes)) or not isinstance(calls, Sequence) or not all(
            isinstance(events, Sequence) and all(isinstance(e, PreparedEvent) for e in events) for events in calls
        ):
            raise InvalidArgument("calls must be a sequence of sequences of prepared events (prepare_event)")
        return self.group.submit_all(calls)

    def prepare_event(self, session_key: str, kind: str, **event: Unpack[EventArgs]) -> PreparedEvent:
        """Validate one event's arguments (raising, nothing written); pure, so it runs before
        the caller waits for the write turn. The target is resolved here when its key names the
        agent and no dedupe key asks for a read, else inside the append's transaction (R15)."""
        return self._prepare(session_key, kind, event)

    def _prepare(self, session_key: str, kind: str, event: Mapping[str, Any]) -> PreparedEvent:
        """``prepare_event`` on the keywords' own mapping (``record_event`` passes its own, not
        a copy)."""
        if len(event) == 2 and "actor_type" in event and "summary" in event:
            # The usual call names the required keywords alone: nothing else to look up.
            actor_type, summary = event["actor_type"], event["summary"]
            actor_id = agent_id = run_id = payload = dedupe_key = occurred_at = None
        else:
            if not EVENT_ARGS.issuperset(event) or not REQUIRED_EVENT_ARGS <= event.keys():
                unknown, missing = sorted(event.keys() - EVENT_ARGS), sorted(REQUIRED_EVENT_ARGS - event.keys())
                raise TypeError(f"record_event() got unexpected keyword arguments {unknown}" if unknown
                                else f"record_event() missing required keyword arguments {missing}")
            actor_type, summary = event["actor_type"], event["summary"]
            actor_id, agent_id, run_id = event.get("actor_id"), event.get("agent_id"), event.get("run_id")
            payload, dedupe_key, occurred_at = event.get("payload"), event.get("dedupe_key"), event.get("occurred_at")
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
        return PreparedEvent(target, kind, actor_type, actor_id, run_id, summary, payload_text,
                              produced_at, dedupe_key, (session_key, agent_id))

    def _record_batch(self, waiters: list[Waiter[PreparedEvent]]) -> None:
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

    def _append_prepared(self, events: Sequence[PreparedEvent]) -> list[int | None]:
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
            try:
                self.queue_notices(notices)
                if material:
                    self._rewake(material, now)
            except StorageError as exc:
                # R15: committed, so the caller gets its sequences; a wake's read or write that
                # failed after the commit is the sweep's and the timer's to make good (R11, LIV1).
                log.warning("recorded %d event(s); their wakes after the commit failed: %s", len(events), exc.message)
            return sequences
        raise AssertionError("unreachable: the last attempt returns")

    def _append_once(self, events: Sequence[PreparedEvent], now: float) -> tuple[
        list[int | None], list[Notice], list[tuple[SessionRef, str | None]], int
    ]:
        floor = now - OCCURRED_AT_WINDOW
        if len(events) == 1 and self.tracer is None and events[0].target is not None:
            alone = self._record_alone(events[0], now, floor)
            if alone is not None:
                return alone
        notices: list[Notice] = []
        material: list[tuple[SessionRef, str | None]] = []
        sequences: list[int | None] = []
        inserted_count = 0
        trace = self.tracer
        own_transaction = not self.store.in_transaction
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
                # and the caught-up read of every notifying event's target (one round trip on a
                # server: the read is sent before the appends' answer, so it covers the events
                # a dedupe key turns away too; they are never decided).
                appended, caught_up = self.store.append_and_read(rows, [
                    e.target for e in events if e.kind in NOTIFYING_KINDS and e.target is not None
                ])
                batch = BatchDecisions(self.store, caught_up)
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
                batch.write(now, last=own_transaction)
        return sequences, notices, material, inserted_count

    def _record_alone(self, e: PreparedEvent, now: float, floor: float) -> tuple[
        list[int | None], list[Notice], list[tuple[SessionRef, str | None]], int
    ] | None:
        """A lone event outside any transaction, where the store decides it in the database
        in one round trip (``Store.record_alone``: the table's decision, generated from the
        same effect data as ``_fire_event``'s); ``None`` when it does not."""
        target = e.target
        assert target is not None  # the caller checked
        occurred = now if e.occurred_at is None else min(max(e.occurred_at, floor), now)
        recorded = self.store.record_alone((target[0], target[1], e.kind, e.actor_type, e.actor_id, e.run_id,
                                            e.summary, e.payload, occurred, now, e.dedupe_key))
        if recorded is None:
            return None
        notices: list[Notice] = [(watcher, target, since, provenance) for watcher, since, provenance in recorded.notices]
        material = [(target, e.actor_id)] if e.kind in NOTIFYING_KINDS else []
        return [recorded.sequence], notices, material, 1

    def _decide_notices(
        self, target: SessionRef, actor_id: str | None, sequence: int, now: float, kind: str
    ) -> list[Notice]:
        """The hot path of a notifying event: only caught-up cursors change (R6, R7).

        A pending cursor's transition on `material_event` is `raise_material`, which the store
        keeps derived from the log, so pending cursors are neither read nor written here.
        """
        changes, notices = self._fire_event(self.store.caught_up_watchers(*target), target, actor_id, sequence, kind)
        if changes:
            self.store.put_cursors(target[0], target[1], changes, now)
        return notices

    def _fire_event(
        self, rows: list[CaughtUpRow], target: SessionRef, actor_id: str | None, sequence: int, kind: str,
    ) -> tuple[list[tuple[str, tuple[int, int, int] | None]], list[Notice]]:
        """One notifying event's transitions on the target's caught-up ``rows`` (pure but for
        the trace): the cursor changes and the notices they open, each with the pair's
        provenance from the same read (its wake is decided without another, R26)."""
        # R2: the actor's own cursor gets self_event; everyone else's material_event.
        own = [row for row in rows if row[0] == actor_id] if actor_id is not None else []
        others = [row for row in rows if row[0] != actor_id] if own else rows
        changes: list[tuple[str, tuple[int, int, int] | None]] = []
        notices: list[Notice] = []
        trace = self.tracer
        for trigger, group in ((MATERIAL_EVENT, others), (SELF_EVENT, own)):
            if not group:  # mostly the actor's own: nobody, or no watcher at all
                continue
            fired = fire_many(group, target[0], trigger, sequence)
            if trace is not None:
                trace.event_steps(target, trigger, sequence, kind, actor_id, group, fired)
            for (watcher, old, provenance), (_, new, notice_since) in zip(group, fired):
                if new != old:
                    changes.append((watcher, new))
                if notice_since is not None:
                    notices.append((watcher, target, notice_since, provenance))
        return changes, notices
