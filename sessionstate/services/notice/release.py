"""The release after commit (R9): notices and lines enter the in-memory queue only once the
outermost transaction committed, wakes are decided once when a line is queued (R12, R26) and
R23's re-wakes follow material events.
"""

from __future__ import annotations

from typing import Any

from ...shared.formats import notice_text
from ...shared.keys import SessionRef, is_main_style_watcher
from ...shared.provenance import Notice, is_queue_only
from ...store import CursorRecord, Store
from ..cluster import Cluster
from .core import NoticeCore
from .rewake import Rewaker


class NoticeRelease(NoticeCore):
    """Queue, wake and re-wake after the outermost commit."""

    def __init__(self, store: Store, **options: Any) -> None:
        super().__init__(store, **options)
        self.cluster = Cluster(self, self.serve)  # section 6a: which watchers this process serves
        self.wakes.take_slot = self.cluster.take_wake_slot  # R23: the durable wake slot
        # R26: a re-wake is a wake too, so it asks the same question (an ambient pair that
        # replaced a tracked one must not inherit its entry).
        self.rewaker = Rewaker(self.wakes, lambda w, t: self.queue.holds_notice(w, t) and self.wakes_for(w, t))

    def line_wakes(self, watcher: str, target: SessionRef | None) -> bool:
        """THE wake decision (R12): whether a line queued for ``watcher`` (a notice for
        ``target``, or a plain line when ``None``) asks for a wake. Decided once, when the line
        is queued; owed wakes count only the lines it said yes to. A notice asks only when
        its pair is not ambient (R26, through ``wakes_for``)."""
        if target is None:
            return is_main_style_watcher(watcher)
        return self.wakes_for(watcher, target)

    def wakes_for(self, watcher: str, target: SessionRef, provenance: str | None = None) -> bool:
        """The one place a wake is decided (R12, R26): a main-style watcher whose cursor on
        ``target`` is not ambient. ``provenance`` is the pair's as the notice's own read found
        it (the event hot path's caught-up read carries it); without it the durable provenance
        is read, last, and only when a wake could be sent at all, so a gateway without
        ``on_wake`` never reads it."""
        if not (is_main_style_watcher(watcher) and self.wakes.enabled):
            return False
        if provenance is None:
            provenance = self.store.cursor_provenance(watcher, *target)
        return not is_queue_only(provenance)

    def queue_notices(self, notices: list[Notice]) -> None:
        # R9: after the outermost commit; dropped if it rolls back. The trace hears of every
        # commit's notices, none included (its batch waits for them).
        if notices or self.tracer is not None:
            self.store.after_commit(lambda: self._release_notices(notices))

    def _release_notices(self, notices: list[Notice]) -> None:
        serves = self.cluster.serves_here
        trace = self.tracer
        handed: list[tuple[str, SessionRef, str, bool, bool]] | None = [] if trace is not None else None
        to_wake: dict[str, SessionRef] = {}  # one wake per watcher for lines queued together
        tracked: list[tuple[str, SessionRef]] = []
        texts: dict[tuple[str, int], str] = {}  # the watchers of one event mostly share a text
        for watcher, target, since, provenance in notices:
            text = texts.get((target[0], since))
            if text is None:
                text = texts[(target[0], since)] = notice_text(target[0], since)
            if not serves(watcher):  # R19: another process queues it
                if handed is not None:
                    handed.append((watcher, target, text, False, False))
                continue
            wakes = self.wakes_for(watcher, target, provenance)  # line_wakes for a notice
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
        if to_wake:  # after all entered: they share the wake
            self.wakes.wake_for_notices(to_wake)
            self.rewaker.track_all(tracked)  # R23's re-wake heap files them at their wake time

    def _rewake(self, material: list[tuple[SessionRef, str | None]], now: float) -> None:
        """R23: material events re-wake pending main-style watchers whose window passed
        (after the outermost commit, R9)."""
        on_material = self.rewaker.on_material

        def rewake() -> None:
            for target, actor_id in material:
                on_material(target, actor_id, now)

        self.store.after_commit(rewake)

    def _announce(self, main: str, line: str) -> None:
        """R27: queue the announcement line for the main session's next turn; no wake (it is
        not a notice, and a gateway creating many sessions must not keep waking its main)."""
        self.queue.enqueue(main, line)

    def _release_system_event(self, session_key: str, text: str) -> None:
        wakes = self.line_wakes(session_key, None)
        if self.queue.enqueue(session_key, text, wakes=wakes) and wakes:
            self.wakes.wake(session_key, "system-event")

    def _withdraw(self, records: list[CursorRecord], *, clear: str | None = None) -> None:
        for record in records:
            self.queue.withdraw_notice(record.watcher, (record.target_key, record.target_agent_id))
        if clear is not None:
            self.queue.clear(clear)
