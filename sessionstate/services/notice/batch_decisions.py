"""A group commit's notice decisions in a bounded number of statements (issue 25).

One event alone reads its target's caught-up cursors and writes what changed
(``NoticeProtocol._decide_notices``). A batch of events instead reads the caught-up cursors of
all its notifying events' targets in one go, decides the events in order in memory, and writes
every change at the end: each decision sees the cursors as the batch's earlier events left
them, exactly what re-reading them would give. Only caught-up cursors change on an event
(R6, R7), and which positions are caught up comes from the statemachine's own derivation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

from ...shared.keys import SessionRef
from ...shared.provenance import Notice
from ...statemachine import derive_state
from ...statemachine.table import CAUGHT_UP
from ...store import Store
from ...store.records import CaughtUpRow

Rows = list[CaughtUpRow]
Changes = list[tuple[str, tuple[int, int, int] | None]]
Notices = list[Notice]
# NoticeProtocol._fire_event: (rows, target, actor_id, sequence, kind) -> (changes, notices)
FireEvent = Callable[[Rows, SessionRef, "str | None", int, str], tuple[Changes, Notices]]


class BatchDecisions:
    """The caught-up cursors of a batch's targets, kept as its events change them; read with
    the batch's appends (inside its transaction, after its heads are locked), one write at
    ``write``."""

    def __init__(self, store: Store, caught_up: dict[SessionRef, Rows]) -> None:
        """``caught_up``: the batch's targets' caught-up cursors (``Store.append_and_read``),
        kept from here on as the batch's events change them."""
        self._store = store
        self._caught_up = caught_up
        self._written: dict[tuple[str, SessionRef], tuple[int, int, int] | None] = {}

    def decide(
        self, fire_event: FireEvent, target: SessionRef, actor_id: str | None, sequence: int, kind: str
    ) -> Notices:
        """One notifying event's notices; its cursor changes are kept for ``write``."""
        rows = self._caught_up.get(target)
        if not rows:
            return []
        changes, notices = fire_event(rows, target, actor_id, sequence, kind)
        if changes:
            new = dict(changes)
            # A row that stops being caught up leaves the set (an event never changes it
            # again before a drain); one that stays keeps its new positions.
            kept: Rows = []
            for watcher, positions, provenance in rows:
                if watcher in new:
                    changed = new[watcher]
                    if changed is None or derive_state(changed) != CAUGHT_UP:
                        continue
                    positions = changed
                kept.append((watcher, positions, provenance))
            self._caught_up[target] = kept
            for watcher, changed in changes:
                self._written[(watcher, target)] = changed
        return notices

    def write(self, now: float, *, last: bool = False) -> None:
        """Every change of the batch in one write (each pair at its last positions); ``last``:
        the write ends a transaction the batch opened itself, so a server backend may send it
        with the ``COMMIT`` (one round trip fewer)."""
        if self._written:
            self._store.put_pair_cursors([(w, t, p) for (w, t), p in self._written.items()], now, with_commit=last)
