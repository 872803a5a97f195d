"""The in-memory system event queue (the stale notice's exact text: ``formats.notice_text``).

The queue is per session, ordered, and deduplicated on exact text: re-enqueueing a notice
whose text is already queued is a no-op (R5). It is not durable on purpose; the startup sweep
rebuilds the notices from the cursors (R11).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ...shared.formats import notice_text


class QueuedEvent(NamedTuple):
    text: str
    # For stale notices: the target (key, agent id) whose cursor a drain acknowledges.
    target: tuple[str, str] | None
    # The queue's entry counter when it entered: an owed wake fires only for lines that
    # entered after the process's own last wake of the session (R12).
    entered: int = 0
    # Whether this line asks for a wake (decided once, when it is queued: R12).
    wakes: bool = False


RemovalObserver = Callable[[str, list[QueuedEvent]], None]
# (session key, text, target): a line entered a session's queue (target None: a plain line)
EntryObserver = Callable[[str, str, "tuple[str, str] | None"], None]


class SystemEventQueue:
    def __init__(self) -> None:
        self._queues: dict[str, dict[str, QueuedEvent]] = {}
        self._entered = 0
        self._removal_observers: list[RemovalObserver] = []
        # called for each line the queue takes in (services/observing.py adds and removes them)
        self.entry_observers: list[EntryObserver] = []

    def observe_removals(self, observer: RemovalObserver) -> None:
        """Tell ``observer`` of the lines that leave a session's queue, whichever method
        removes them (the protocol trace)."""
        self._removal_observers.append(observer)

    def _removed(self, session_key: str, entries: list[QueuedEvent]) -> None:
        if entries:
            for observer in self._removal_observers:
                observer(session_key, entries)

    def enqueue(
        self, session_key: str, text: str, target: tuple[str, str] | None = None, *, wakes: bool = False
    ) -> bool:
        """Queue ``text`` for the session's next turn; ``False`` when it was already queued."""
        queue = self._queues.setdefault(session_key, {})
        if text in queue:
            return False
        if target is not None:
            # R5, INV2: another text for the pair is an earlier episode another process ended
            # (a delete, a reset) before this process's sweep withdrew it; the new one replaces it.
            stale = [e for e in queue.values() if e.target == target]
            if stale:
                for entry in stale:
                    del queue[entry.text]
                self._removed(session_key, stale)
        self._entered += 1
        queue[text] = QueuedEvent(text, target, self._entered, wakes)
        if self.entry_observers:
            for observer in list(self.entry_observers):
                observer(session_key, text, target)
        return True

    def mark(self) -> int:
        """The entry counter now: lines queued later compare above it."""
        return self._entered

    def holds_waking_after(self, session_key: str, mark: int) -> bool:
        """Whether a line that asks for a wake entered the session's queue after ``mark``."""
        return any(e.wakes and e.entered > mark for e in self._queues.get(session_key, {}).values())

    def peek(self, session_key: str) -> list[QueuedEvent]:
        return list(self._queues.get(session_key, {}).values())

    def remove(self, session_key: str, texts: list[str]) -> None:
        queue = self._queues.get(session_key)
        if queue is None:
            return
        observed = self._removal_observers
        gone = []
        for text in texts:
            entry = queue.pop(text, None)
            if observed and entry is not None:
                gone.append(entry)
        if not queue:
            del self._queues[session_key]
        if gone:
            self._removed(session_key, gone)

    def withdraw_notice(self, session_key: str, target: tuple[str, str]) -> None:
        queue = self._queues.get(session_key)
        if not queue:
            return
        gone = [e for e in queue.values() if e.target == target]
        for entry in gone:
            del queue[entry.text]
        if not queue:
            del self._queues[session_key]
        if self._removal_observers:
            self._removed(session_key, gone)

    def holds_notice(self, session_key: str, target: tuple[str, str]) -> bool:
        return any(e.target == target for e in self._queues.get(session_key, {}).values())

    def clear(self, session_key: str) -> None:
        cleared = self._queues.pop(session_key, None)
        if cleared and self._removal_observers:
            self._removed(session_key, list(cleared.values()))

    def sessions(self) -> list[str]:
        return list(self._queues)


def plan_drain(
    entries: list[QueuedEvent], owed: dict[tuple[str, str], int]
) -> list[tuple[str, tuple[str, str] | None]]:
    """R21: the lines a drain delivers, each with the target it acknowledges (``None`` for a
    plain line): queued order, one line per pending pair at its queued notice's place, its text
    for the cursor's L (``owed``: target -> L); queued notices of pairs not owed are dropped;
    owed pairs with no queued notice follow, in target order."""
    lines: list[tuple[str, tuple[str, str] | None]] = []
    done: set[tuple[str, str]] = set()
    for entry in entries:
        if entry.target is None:
            lines.append((entry.text, None))
        elif entry.target in owed and entry.target not in done:
            done.add(entry.target)
            lines.append((notice_text(entry.target[0], owed[entry.target]), entry.target))
    for target in sorted(owed):
        if target not in done:
            lines.append((notice_text(target[0], owed[target]), target))
    return lines
