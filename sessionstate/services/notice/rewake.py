"""R23's heal for lost wakes: a main-style watcher whose notice is still pending is woken
again by a later material event on the target once its window (20 s by default) has passed.

Per target, a heap of (time last woken, watcher) for the pending main-style watchers this
process serves. A material event looks only at the heap's top, and reads nothing while the
top is inside its window (nobody is due). Past it, an entry whose notice is gone is popped
(paid for by the notice that created it), an entry whose watcher was woken since
(for another target, or by another process) is pushed back with the newer time (paid for by
that wake), a due entry is woken and pushed back (paid for by the wake). So an event costs
O(1) when nobody is due, whatever the number of pending watchers, and each watcher is woken
at most once per window.
"""

from __future__ import annotations

import heapq
from typing import Callable

from ...shared.keys import SessionRef
from .wakes import WakeCoalescer


class Rewaker:
    def __init__(self, wakes: WakeCoalescer, still_pending: Callable[[str, SessionRef], bool]) -> None:
        self._wakes = wakes
        self._still_pending = still_pending
        self._heaps: dict[SessionRef, list[tuple[float, str]]] = {}
        self._tracked: dict[SessionRef, set[str]] = {}

    def active(self) -> bool:
        return bool(self._heaps)

    def track(self, watcher: str, target: SessionRef) -> None:
        """A notice for (watcher, target) entered the queue and its wake was tried."""
        last = self._wakes.last(watcher)
        if last is None:
            return
        tracked = self._tracked.setdefault(target, set())
        if watcher not in tracked:
            tracked.add(watcher)
            heapq.heappush(self._heaps.setdefault(target, []), (last, watcher))

    def track_all(self, pairs: list[tuple[str, SessionRef]]) -> None:
        """``track`` for each pair, in order; a pair filed already (every notice of a pending
        pair after its first) costs one look-up here and no call."""
        filed = self._tracked
        for watcher, target in pairs:
            tracked = filed.get(target)
            if tracked is None or watcher not in tracked:
                self.track(watcher, target)

    def track_promoted(self, watcher: str, target: SessionRef) -> None:
        """An ambient pair with a queued notice became explicit (R25, R26): no wake for the
        notice now, but the next material event heals it as it would an explicit pair's."""
        tracked = self._tracked.setdefault(target, set())
        if watcher not in tracked:
            tracked.add(watcher)
            last = self._wakes.last(watcher)
            heapq.heappush(self._heaps.setdefault(target, []), (float("-inf") if last is None else last, watcher))

    def on_material(self, target: SessionRef, actor_id: str | None, now: float) -> int:
        """A notifying event on ``target`` by ``actor_id``; returns how many watchers it woke."""
        heap = self._heaps.get(target)
        if not heap:
            return 0
        tracked = self._tracked[target]
        woken = 0
        skipped: list[tuple[float, str]] = []
        while heap:
            stamp, watcher = heap[0]
            # The cheap test first: a stamp is never later than its watcher's last wake, so when
            # the oldest is inside the window nobody is due, and nothing is read (an entry whose
            # notice is gone waits for its turn: at most one per watcher and target).
            if now - stamp < self._wakes.window:
                break
            if not self._still_pending(watcher, target):
                heapq.heappop(heap)
                tracked.discard(watcher)
                continue
            last = self._wakes.last(watcher)
            if last is not None and last > stamp:  # woken since: re-file at its real time
                heapq.heapreplace(heap, (last, watcher))
                continue
            if watcher == actor_id:  # its own event is not material to it (R2)
                skipped.append(heapq.heappop(heap))
                continue
            if self._wakes.wake(watcher, f"session-state: {target[0]}"):
                woken += 1
            heapq.heapreplace(heap, (self._wakes.last(watcher) or now, watcher))
        for entry in skipped:
            heapq.heappush(heap, entry)
        if not heap:
            del self._heaps[target], self._tracked[target]
        return woken
