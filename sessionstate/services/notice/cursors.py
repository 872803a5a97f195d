"""The cursor lifecycle: every trigger fired on stored positions (``_fire_pairs``), watching
(R4, R25), reset and delete (R14), retention and expiry (R13) and the restart sweep (R11).
"""

from __future__ import annotations

from typing import Any, Iterable

from ...errors import InvalidArgument, StorageError
from ...shared.keys import SessionRef, check_key, is_agent_qualified
from ...shared.provenance import (
    PROVENANCE_AMBIENT,
    PROVENANCE_EXPLICIT,
    Notice,
    registered_provenance,
)
from ...shared.timefmt import DAY_SECONDS
from ...statemachine import Positions, fire
from ...statemachine.effects import PositionsLike
from ...statemachine.table import (
    DELETE_SESSION,
    EXPIRE,
    RESET_WATCHER,
    RESTART_SWEEP,
    SEED,
    UNWATCH,
    UNWATCHED,
)
from ...store import CursorRecord
from ..locking import locked
from .core import log
from .release import NoticeRelease


class CursorLifecycle(NoticeRelease):
    """Watch, unwatch, reset, delete, prune and sweep: cursors from birth to removal."""

    def _fire_pairs(
        self,
        pairs: Iterable[tuple[str, SessionRef, PositionsLike | None]],
        trigger: str,
        sequence: int | None,
        now: float,
        *,
        load: bool = False,
        delivered: str | None = None,
        provenance: str | None = None,
        with_commit: bool = False,
    ) -> list[Any]:
        """Fire ``trigger`` on each (watcher, target, positions) and write what changed.

        Must run inside ``store.transaction()``; with ``load`` the positions are read first;
        ``with_commit``: these are the last writes of a transaction the caller opened itself
        (a server backend sends them with its ``COMMIT``).
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
                self.store.put_cursors(target[0], target[1], [(watcher, step.positions)], now, with_commit=with_commit)
                changed.append(watcher)
            steps.append(step)
        self.store.serving.note_cursor_changes(changed, now)  # R22: for other processes' pumps
        return steps

    def _fire_records(self, records: list[CursorRecord], trigger: str) -> list[Notice]:
        pairs = [(r.watcher, (r.target_key, r.target_agent_id), Positions(*r.positions)) for r in records]
        steps = self._fire_pairs(pairs, trigger, None, self.clock())
        return [
            (watcher, target, step.notice_since, record.provenance)
            for (watcher, target, _), step, record in zip(pairs, steps, records)
            if step.notice_since is not None
        ]

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
        notices: list[Notice] = []
        for r in self.store.cursors_behind():
            step = fire((r.watcher, r.target_key), Positions(*r.positions), RESTART_SWEEP, None)
            if step.notice_since is not None:
                notices.append((r.watcher, (r.target_key, r.target_agent_id), step.notice_since, r.provenance))
        log.info("%s is read-only: %d owed notice(s) held in memory only", self.store.where, len(notices))
        self.queue_notices(notices)
        return len(notices)
