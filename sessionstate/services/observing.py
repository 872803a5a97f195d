"""``observe(protocol, observer)``: report one gateway's work to an observer (``metrics.py``'s
OpenTelemetry instruments, a benchmark's clock), and take it all back again.

Nothing is added to the record path of a gateway nobody observes: the protocol's bound
methods are wrapped on that one instance (the detach function puts back what the instance
held before), and the wake counters come from the wake coalescer's two hooks (``on_fired``,
``on_owed``: wakes.py), chained after the protocol's own (the trace)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

_CLASS_METHOD = object()  # the instance held nothing: the class's method showed through


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


def observe(protocol: Any, observer: GatewayObserver) -> Callable[[], None]:
    """Start reporting to ``observer``; returns the function that stops it."""
    originals: list[tuple[object, str, object]] = []

    def replace(owner: object, name: str, make: Callable[[Any], Any]) -> None:
        originals.append((owner, name, vars(owner).get(name, _CLASS_METHOD)))
        setattr(owner, name, make(getattr(owner, name)))

    def recording(original: Callable[..., int | None]) -> Callable[..., int | None]:
        def record_event(*args: Any, **kwargs: Any) -> int | None:
            kind = args[1] if len(args) > 1 else kwargs.get("kind", "")
            start = time.perf_counter()
            sequence = original(*args, **kwargs)
            observer.recorded([kind], [sequence], time.perf_counter() - start)
            return sequence
        return record_event

    def recording_batch(original: Callable[..., list[int | None]]) -> Callable[..., list[int | None]]:
        def record_events(events: Any) -> list[int | None]:
            events = list(events)
            start = time.perf_counter()
            sequences = original(events)
            kinds = [e.get("kind", "") if hasattr(e, "get") else "" for e in events]
            observer.recorded(kinds, sequences, time.perf_counter() - start)
            return sequences
        return record_events

    def creating(original: Callable[..., None]) -> Callable[..., None]:
        def create_session(*args: Any, **kwargs: Any) -> None:
            original(*args, **kwargs)
            if kwargs.get("parent") is not None:
                observer.spawned()
        return create_session

    def queueing(original: Callable[..., bool]) -> Callable[..., bool]:
        def enqueue(session_key: str, text: str, target: Any = None, **options: Any) -> bool:
            added = original(session_key, text, target, **options)  # options: the queue's own (wakes=)
            if added and target is not None:  # a stale notice (plain lines carry no target)
                observer.queued()
            return added
        return enqueue

    def draining(original: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
        def drain_system_events(session_key: str) -> list[str]:
            notices = {e.text for e in protocol.queue.peek(session_key) if e.target is not None}
            lines = original(session_key)
            delivered = sum(1 for line in lines if line in notices)
            if delivered:
                observer.drained(delivered)
            return lines
        return drain_system_events

    def chained(hook: Callable[..., None]) -> Callable[[Any], Callable[..., None]]:
        def make(original: Callable[..., None] | None) -> Callable[..., None]:
            if original is None:
                return hook

            def both(*args: Any) -> None:  # the protocol's own hook (the trace) first
                original(*args)
                hook(*args)
            return both
        return make

    replace(protocol, "record_event", recording)
    replace(protocol, "record_events", recording_batch)
    replace(protocol, "create_session", creating)
    replace(protocol.queue, "enqueue", queueing)
    replace(protocol, "drain_system_events", draining)
    # Every on_wake call, at once or owed, passes on_fired (wakes.WakeCoalescer._attempt).
    replace(protocol.wakes, "on_fired", chained(observer.wake_fired))
    replace(protocol.wakes, "on_owed", chained(observer.wake_owed))

    def detach() -> None:
        for owner, name, original in reversed(originals):
            if original is _CLASS_METHOD:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        originals.clear()

    return detach
