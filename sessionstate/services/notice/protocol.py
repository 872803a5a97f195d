"""The notice protocol service: records events, runs the protocol, queues notices.

The class is built in layers, one module each, every layer using only the ones below it:
``core`` (state, clock, wake timer, resolution) < ``release`` (after-commit queueing, wakes,
re-wakes) < ``cursors`` (the cursor lifecycle) < ``turns`` (drains, reconciliation) <
``recording`` (the signal log) < this module (sessions, claims, inspection).

Every change of a cursor goes through ``statemachine.fire`` (the dispatch table compiled from
the one machine); every byte that reaches the disk goes through ``store``. The order inside
each public call is always: validate (raise, nothing changed) -> one transaction in the store
-> after the outermost commit, queue notices and send wakes (R9).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

from ...errors import InvalidArgument, SessionExists, UnknownSession
from ...shared.keys import (
    DEFAULT_AGENT_ID,
    check_key,
    is_agent_qualified,
    resolve_agent_id,
)
from ...shared.provenance import PROVENANCE_SPAWN, CursorPositions
from ...shared.validation import (
    MAX_LABEL_LENGTH,
    MAX_SUMMARY_LENGTH,
    SESSION_KINDS,
    check_line,
    check_optional_id,
)
from ...statemachine.table import SEED, SEEDING_KINDS, SPAWN_KIND
from ...store import SessionRecord
from ..locking import locked
from ..observing import OBSERVER_METHODS, GatewayObserver
from ..trace import Tracer
from .announce import announcement_target, created_line
from .core import Clock, WakeHook
from .queue import QueuedEvent
from .recording import PreparedEvent, Recording

__all__ = ["Clock", "Diagnostics", "NoticeProtocol", "PreparedEvent", "WakeHook"]

class Diagnostics(NamedTuple):
    """A snapshot of a gateway's in-memory workings, for operators, drills and tests."""

    owed_wakes: dict[str, float]  # watcher -> when its owed wake falls due (R12)
    owed_wakes_cancelled: int  # owed wakes that fell due with nothing new held (drained meanwhile)
    wake_timer_running: bool  # the wake timer was started (by the first owed wake)
    unwoken: frozenset[str]  # watchers holding a waking line newer than this process's last wake of them
    queued: dict[str, int]  # session -> lines queued for it in this process's memory
    group_batches: int  # group commits of more than one caller so far
    group_queued: int  # callers waiting for the write turn now
    group_idle: bool  # no caller holds or waits for the write turn
    server_id: str | None  # this process's server id (R19-R20) once registered
    tracing: bool  # the protocol trace is being written (spec section 15)


class NoticeProtocol(Recording):
    """The notice protocol service: the signal log, the cursors, the in-memory queue and the
    wakes (spec R1-R18). Every cursor change goes through ``statemachine``; every in-memory
    effect (a queued notice or line, a withdrawal, a wake) waits for the outermost commit of
    the store's unit of work (R9)."""

    # -- operations (``Gateway.ops``) -------------------------------------------------------

    @property
    def wake_window(self) -> float:
        """Seconds within which a watcher is woken at most once (R12, R23)."""
        return self.wakes.window

    def trace_to(self, path: str | os.PathLike[str]) -> None:
        """Append the protocol trace to ``path`` from now on (spec section 15)."""
        self.tracer = Tracer(path, self.store, self.queue)

    def shut(self, *, unregister: bool = True) -> None:
        """Give up this process's part, lock held: the claims (or, with ``unregister=False``,
        only the change feed, leaving the row as a dead process would) and the trace."""
        if unregister:
            self.cluster.unregister()
        elif self.cluster.feed is not None:
            self.cluster.feed.close()
        if self.tracer is not None:
            self.tracer.close()

    def observe(self, observer: GatewayObserver) -> Callable[[], None]:
        """Report this gateway's recordings, queued and drained notices and wakes to
        ``observer`` (``metrics.instrument`` does); returns the function that stops it.
        A gateway nobody observes pays nothing for it."""
        missing = [name for name in OBSERVER_METHODS if not callable(getattr(observer, name, None))]
        if missing:
            raise InvalidArgument(f"observer must have the GatewayObserver methods; missing {', '.join(missing)}")
        return self.observers.add(observer)

    @locked
    def diagnostics(self) -> Diagnostics:
        """A snapshot of the in-memory workings: owed wakes, the group commit, the server id."""
        wakes, group, queue = self.wakes, self.group, self.queue
        return Diagnostics(
            owed_wakes=wakes.owed(), owed_wakes_cancelled=wakes.owed_cancelled,
            wake_timer_running=wakes.timer is not None,
            unwoken=frozenset(w for w in queue.sessions() if wakes.holds_unwoken(w)),
            queued={s: n for s in queue.sessions() if (n := len(queue.peek(s)))},
            group_batches=group.batches, group_queued=group.queued(), group_idle=group.idle(),
            server_id=self.cluster.server_id, tracing=self.tracer is not None,
        )

    @locked
    def queued_events(self, session_key: str) -> list[QueuedEvent]:
        """The lines queued in this process's memory for the session, in order, each with its
        notice's target (``None`` for a plain line); unlike ``pending_system_events`` not
        re-derived from the cursors."""
        check_key(session_key)
        return self.queue.peek(session_key)

    @locked
    def forget_queued(self, session_key: str | None = None) -> None:
        """Drop the lines queued in memory (for one session, or all), as a restart does; the
        cursors still owe their notices (R11: the next sweep queues them again). Inside a
        transaction the lines go at its commit and stay if it rolls back, so the queue and its
        trace lines (held with the transaction's) never part."""
        if session_key is not None:
            check_key(session_key)
        self.store.after_commit(lambda: self._forget_queued(session_key))

    def _forget_queued(self, session_key: str | None) -> None:
        for session in [session_key] if session_key is not None else self.queue.sessions():
            self.queue.clear(session)

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
            if not self.store.insert_session(record):  # created by another process since the look above
                raise SessionExists(f"session {key!r} (agent {agent!r}) already exists")
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
                    key, agent, SPAWN_KIND, "agent", parent_target[0], run_id,
                    f"spawned by {parent_target[0]}"[:MAX_SUMMARY_LENGTH], None, now, now,
                    f"child-spawned:{run_id}" if run_id else None,
                )
                if inserted and self.tracer is not None:
                    self.tracer.event(sequence, (key, agent), SPAWN_KIND, "agent", parent_target[0])
                # R3: only agent-qualified parents hold cursors; R4: seeded at the spawn, as the
                # kind table says of the spawn's kind.
                if is_agent_qualified(parent_target[0]) and SPAWN_KIND in SEEDING_KINDS:
                    self._fire_pairs([(parent_target[0], (key, agent), None)], SEED, sequence, now,
                                     provenance=PROVENANCE_SPAWN)
                    self.store.set_provenance(parent_target[0], key, agent, PROVENANCE_SPAWN, promote_only=False)
        if parent_target is not None:
            self.stats["events_recorded"] += 1
            if self.observers:
                self.observers.spawned()

    @locked
    def session_exists(self, key: str, agent_id: str | None = None) -> bool:
        try:
            self.resolve(key, agent_id)
        except UnknownSession:
            return False
        return True

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
