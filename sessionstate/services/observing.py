"""What one gateway reports of its work to an observer (``metrics.py``'s OpenTelemetry
instruments, a benchmark's clock), through explicit hooks, and how it is taken back again.

``Observers`` is the protocol's declared list of observers (``NoticeProtocol.observers``).
Its owners call it at each report point: recording (``record_event``, ``record_events``),
``create_session`` (a spawn) and ``drain_system_events`` call ``Observers``' methods; the queue
calls its ``entry_observers`` for each line it takes in, and the wake coalescer its
``fired_hooks``/``owed_hooks`` (wakes.py), after the protocol's own (the trace). Nothing is
patched: with nobody observing, each report point costs one truth test of an empty list."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .notice.queue import SystemEventQueue
    from .notice.wakes import WakeCoalescer

__all__ = ["GatewayObserver", "OBSERVER_METHODS", "Observers"]


class GatewayObserver(Protocol):
    """What an observer hears (every method is called in the thread doing the work)."""

    def recorded(self, kinds: Sequence[str], sequences: Sequence[int | None], seconds: float) -> None:
        """One record_event/record_events call ended (``None``: refused by storage, R15)."""

    def spawned(self) -> None:
        """A session was created with a parent: its spawn edge's ``child_spawned`` event."""

    def queued(self) -> None:
        """A stale notice entered a watcher's queue in this process."""

    def drained(self, count: int) -> None:
        """A drain delivered ``count`` stale notices (plain lines not counted)."""

    def wake_fired(self, watcher: str, at: float, due: float | None) -> None:
        """An ``on_wake`` call at ``at``; ``due`` is the owed wake's due time (None: at once)."""

    def wake_owed(self, watcher: str, due: float) -> None:
        """The wake window held a wake back (R12); it is owed at ``due``."""


OBSERVER_METHODS = ("recorded", "spawned", "queued", "drained", "wake_fired", "wake_owed")


class Observers(list[GatewayObserver]):
    """The observers of one gateway's protocol, in the order they were added: a list, so the
    ``if observers:`` a report point asks first is the list's own (C-level) truth test, and an
    unobserved gateway does no other work for it."""

    def __init__(self, queue: "SystemEventQueue", wakes: "WakeCoalescer") -> None:
        super().__init__()
        self._queue = queue
        self._wakes = wakes

    def add(self, observer: GatewayObserver) -> Callable[[], None]:
        """Report to ``observer`` from now on; returns the function that stops it (calling it
        again does nothing)."""

        def entered(session_key: str, text: str, target: tuple[str, str] | None) -> None:
            if target is not None:  # a stale notice (plain lines carry no target)
                observer.queued()

        hooks: list[tuple[list, Callable[..., None]]] = [
            (self._queue.entry_observers, entered),
            (self._wakes.fired_hooks, observer.wake_fired),
            (self._wakes.owed_hooks, observer.wake_owed),
        ]
        self.append(observer)
        for owner, hook in hooks:
            owner.append(hook)

        def detach() -> None:
            if not hooks:
                return
            self.remove(observer)
            for owner, hook in hooks:
                owner.remove(hook)
            hooks.clear()

        return detach

    # -- the report points the protocol calls -------------------------------------------------

    def recorded(self, kinds: Sequence[str], sequences: Sequence[int | None], started: float) -> None:
        """A recording call that began at ``started`` (``time.perf_counter``) ended."""
        seconds = time.perf_counter() - started
        for observer in list(self):
            observer.recorded(kinds, sequences, seconds)

    def spawned(self) -> None:
        for observer in list(self):
            observer.spawned()

    def drained(self, count: int) -> None:
        if count:
            for observer in list(self):
                observer.drained(count)
