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
from ...statemachine.table import SEED
from ...store import SessionRecord
from ..locking import locked
from .announce import announcement_target, created_line
from .core import Clock, WakeHook
from .recording import PreparedEvent, Recording

__all__ = ["Clock", "NoticeProtocol", "PreparedEvent", "WakeHook"]


class NoticeProtocol(Recording):
    """The notice protocol service: the signal log, the cursors, the in-memory queue and the
    wakes (spec R1-R18). Every cursor change goes through ``statemachine``; every in-memory
    effect (a queued notice or line, a withdrawal, a wake) waits for the outermost commit of
    the store's unit of work (R9)."""

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
