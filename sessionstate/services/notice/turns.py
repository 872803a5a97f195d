"""A session's turn: the drain that acknowledges (R5, R8, R21), what it would return, the
notices another process owes it (R18), plain lines, and ``session_status`` (reconciliation).
"""

from __future__ import annotations

import logging
from typing import Any

from ...errors import CommitOutcomeUnknown, StorageError, UnknownSession
from ...shared.keys import SessionRef, check_key, is_agent_qualified, resolve_agent_id
from ...shared.provenance import Notice
from ...shared.validation import CHANGES_PAGE, MAX_SYSTEM_EVENT_CHARS, check_changes_since, check_text
from ...statemachine import Positions, derive_state
from ...statemachine.table import DRAIN, PENDING_STATES
from ..locking import locked
from .cursors import CursorLifecycle

log = logging.getLogger(__name__)

# R29: a drain whose commit is known to have rolled back is run again, this many times in all.
DRAIN_ATTEMPTS = 3
from .queue import plan_drain
from .reconcile import events_json


class Turns(CursorLifecycle):
    """Drains, pending lines, owed notices and reconciliation."""

    @locked
    def drain_system_events(self, session_key: str) -> list[str]:
        """The system lines for the session's next turn; acknowledges the notices among them.

        R21: the durable cursors decide, whichever process queued what: one line per pending
        pair, for the cursor's L; stale queued notices are dropped.
        """
        check_key(session_key)
        if not self.observers:
            return self._drain_turn(session_key)
        notices = {e.text for e in self.queue.peek(session_key) if e.target is not None}
        lines = self._drain_turn(session_key)
        self.observers.drained(sum(1 for line in lines if line in notices))
        return lines

    def _drain_turn(self, session_key: str) -> list[str]:
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
        for attempt in range(1, DRAIN_ATTEMPTS + 1):
            try:
                return self._drain_once(session_key, entries)
            except CommitOutcomeUnknown as exc:
                # R29: the commit may have acknowledged the pairs: the lines are returned (a
                # later drain may repeat one; none is lost).
                lines = getattr(exc, "drained_lines", None)
                if lines is None or self.store.in_transaction:
                    raise
                log.warning("drain of %s: commit outcome unknown; returning its lines", session_key)
                return list(lines)
            except StorageError as exc:
                # R29: a commit known to have rolled back changed nothing: drain again.
                if not exc.retry_safe or attempt == DRAIN_ATTEMPTS or self.store.in_transaction:
                    raise
                entries = self.queue.peek(session_key)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _drain_once(self, session_key: str, entries: Any) -> list[str]:
        now = self.clock()
        follow_ups: list[Notice] = []
        lines: list[tuple[str, SessionRef | None]] = []
        own_transaction = not self.store.in_transaction
        try:
            with self.store.transaction():
                self.store.witness_commit()  # R29: a lost answer is resolved, not left unknown
                # The targets' heads locked, then one read for every pending pair, effective
                # positions included (R7; spec section 16): the acknowledgements fire on them
                # without reading each cursor again.
                owed = {(r.target_key, r.target_agent_id): r for r in self.store.pending_for_drain(session_key)}
                lines = plan_drain(entries, {target: record.positions[0] for target, record in owed.items()})
                for text, target in lines:
                    if target is None:
                        continue
                    # The acks are the transaction's last writes: in a drain of its own they
                    # may travel with its COMMIT.
                    record = owed[target]
                    (step,) = self._fire_pairs([(session_key, target, record.positions)], DRAIN, None, now,
                                               delivered=text, with_commit=own_transaction)
                    if step.notice_since is not None:
                        # The follow-up's wake (R26) asks the provenance this read found, in
                        # the transaction that acknowledged: no read after the commit.
                        follow_ups.append((session_key, target, step.notice_since, record.provenance))
                texts = [e.text for e in entries]
                self.store.after_commit(lambda: self.queue.remove(session_key, texts))
                self.queue_notices(follow_ups)
        except CommitOutcomeUnknown as exc:
            exc.drained_lines = [text for text, _ in lines]  # type: ignore[attr-defined]
            raise
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
        owed: list[Notice] = []
        for record in self.store.cursors_held_by(session_key):
            target = (record.target_key, record.target_agent_id)
            positions = Positions(*record.positions)
            if target not in queued and derive_state(positions) in PENDING_STATES:
                owed.append((session_key, target, positions.last_seen, record.provenance))
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

    @locked
    def session_status(
        self, session_key: str, *, changes_since: int | None = None, agent_id: str | None = None
    ) -> dict[str, Any]:
        check_key(session_key)
        if changes_since is not None:
            check_changes_since(changes_since)
        agent = resolve_agent_id(session_key, agent_id)
        target = (session_key, agent) if agent is not None else self.resolve(session_key, None)
        if changes_since is None:
            head = self.store.head(*target)
            if head is None:  # every registered session has a head row; deleting removes both
                raise UnknownSession(f"unknown session {session_key!r} (agent {target[1]!r})")
            return {"sessionKey": target[0], "stateVersion": head[0]}
        page = self.store.changes_page(target[0], target[1], changes_since, CHANGES_PAGE + 1)
        if page is None:
            raise UnknownSession(f"unknown session {session_key!r} (agent {target[1]!r})")
        events = page.events
        truncated = len(events) > CHANGES_PAGE
        return {"sessionKey": target[0], "stateVersion": page.last_sequence, "stateChanges": {
            "events": events_json(events[:CHANGES_PAGE] if truncated else events),
            "truncated": truncated,
            "earliestAvailableSequence": page.earliest_sequence,
            "historyGap": page.history_gap(changes_since),
        }}
