"""``gw.ops.observe``: explicit hooks (services/observing.py). Each report point calls the
protocol's declared observers; observing replaces no attribute of the protocol, its queue or its
wake coalescer; detaching leaves the hook lists as an unobserved gateway has them. An observer
hears how long each recording call took; one without every method is refused, each missing
method named."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from sessionstate import Gateway, InvalidArgument
from sessionstate.services.observing import OBSERVER_METHODS

MANAGER, WORKER = "agent:main:main", "agent:main:subagent:worker"


class Noting:
    """A GatewayObserver that writes down what it hears."""

    def __init__(self) -> None:
        self.heard: list[tuple[Any, ...]] = []

    def recorded(self, kinds, sequences, seconds) -> None:
        assert seconds >= 0
        self.heard.append(("recorded", list(kinds), list(sequences)))

    def spawned(self) -> None:
        self.heard.append(("spawned",))

    def queued(self) -> None:
        self.heard.append(("queued",))

    def drained(self, count: int) -> None:
        self.heard.append(("drained", count))

    def wake_fired(self, watcher: str, at: float, due: float | None) -> None:
        self.heard.append(("wake_fired", watcher, due))

    def wake_owed(self, watcher: str, due: float) -> None:
        self.heard.append(("wake_owed", watcher))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world():
    clock = Clock()
    gw = Gateway.open("sqlite://", clock=clock, on_wake=lambda watcher, reason: None, wake_window=30)
    yield gw, clock
    gw.close()


@pytest.fixture
def gw(db_url: str) -> Iterator[Gateway]:
    """A gateway on each backend, MANAGER created."""
    gateway = Gateway.open(db_url, clock=Clock(), record_created=False, notify_on_create=False)
    gateway.create_session(MANAGER)
    try:
        yield gateway
    finally:
        gateway.close()


def hooks(gw: Gateway) -> tuple[int, int, int, bool]:
    ops = gw.ops
    return len(ops.queue.entry_observers), len(ops.wakes.fired_hooks), len(ops.wakes.owed_hooks), bool(ops.observers)


def human(gw: Gateway, key: str = WORKER) -> int | None:
    return gw.record_event(key, "human_direct_message", actor_type="human", summary="a human message")


def test_every_report_point_calls_the_observer(world):
    gw, clock = world
    unobserved = hooks(gw)
    assert unobserved == (0, 1, 0, False)  # only the protocol's own wake hook (the trace)
    noting = Noting()
    detach = gw.ops.observe(noting)
    assert hooks(gw) == (1, 2, 1, True)
    gw.create_session(MANAGER)
    gw.create_session(WORKER, kind="subagent", parent=MANAGER)
    assert noting.heard == [("spawned",)]  # a session without a parent is no spawn
    noting.heard.clear()
    first = human(gw)
    assert noting.heard == [("queued",), ("wake_fired", MANAGER, None), ("recorded", ["human_direct_message"], [first])]
    noting.heard.clear()
    assert gw.drain_system_events(MANAGER)
    assert noting.heard == [("drained", 1)]  # the pair's one coalesced stale notice
    assert gw.drain_system_events(MANAGER) == []
    assert noting.heard == [("drained", 1)]  # a drain that delivers no notice reports nothing
    noting.heard.clear()
    sequences = gw.record_events([
        {"session_key": WORKER, "kind": "goal_changed", "actor_type": "human", "summary": "goal"},
        {"session_key": WORKER, "kind": "human_direct_message", "actor_type": "human", "summary": "again"},
    ])
    # stale again, inside the wake window: queued, the wake owed (R12)
    assert noting.heard == [("queued",), ("wake_owed", MANAGER),
                            ("recorded", ["goal_changed", "human_direct_message"], sequences)]
    noting.heard.clear()
    clock.now += 31
    gw.ops.fire_due_wakes()
    assert [h[:2] for h in noting.heard] == [("wake_fired", MANAGER)]
    assert noting.heard[0][2] is not None  # the owed wake, fired with its due time
    detach()
    detach()  # a second call does nothing
    assert hooks(gw) == unobserved
    noting.heard.clear()
    gw.drain_system_events(MANAGER)
    human(gw)
    assert noting.heard == []


def test_observing_replaces_nothing(world):
    """The hooks are called by their owners; no method is wrapped on the instance (the earlier
    ``setattr`` wrapping put ``record_event`` and the others into the instances' dicts)."""
    gw, _ = world
    before = [dict(vars(part)) for part in (gw.ops, gw.ops.queue, gw.ops.wakes)]
    detach = gw.ops.observe(Noting())
    for part, was in zip((gw.ops, gw.ops.queue, gw.ops.wakes), before):
        assert vars(part).keys() == was.keys()
        assert all(vars(part)[name] is value for name, value in was.items())
    detach()


def test_two_observers_hear_alike_and_leave_alone(world):
    gw, _ = world
    first, second = Noting(), Noting()
    stop_first = gw.ops.observe(first)
    stop_second = gw.ops.observe(second)
    gw.create_session(MANAGER)
    gw.create_session(WORKER, kind="subagent", parent=MANAGER)
    assert first.heard == second.heard == [("spawned",)]
    stop_first()
    human(gw)
    assert first.heard == [("spawned",)]
    assert [h[0] for h in second.heard] == ["spawned", "queued", "wake_fired", "recorded"]
    stop_second()
    assert hooks(gw) == (0, 1, 0, False)


def test_a_failed_call_reports_nothing(world):
    gw, _ = world
    noting = Noting()
    gw.ops.observe(noting)
    with pytest.raises(InvalidArgument):
        gw.record_event(WORKER, "no_such_kind", actor_type="human", summary="x")
    with pytest.raises(InvalidArgument):
        gw.drain_system_events("")
    assert noting.heard == []


def test_an_observer_without_the_methods_is_refused(world):
    gw, _ = world
    with pytest.raises(InvalidArgument, match="missing"):
        gw.ops.observe(object())  # type: ignore[arg-type]
    assert hooks(gw) == (0, 1, 0, False)


def test_an_incomplete_observer_is_refused_with_every_missing_method_named(gw):
    class OnlyRecorded:
        def recorded(self, kinds, sequences, seconds) -> None:
            pass

    missing = ", ".join(name for name in OBSERVER_METHODS if name != "recorded")
    with pytest.raises(InvalidArgument) as refused:
        gw.ops.observe(OnlyRecorded())  # type: ignore[arg-type]
    assert str(refused.value) == f"observer must have the GatewayObserver methods; missing {missing}"


class Timing(Noting):
    """Noting, plus the seconds each ``recorded`` report gave."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: list[float] = []

    def recorded(self, kinds, sequences, seconds) -> None:
        self.seconds.append(seconds)
        super().recorded(kinds, sequences, seconds)


def test_an_observer_hears_how_long_each_recording_call_took(gw):
    timing = Timing()
    gw.ops.observe(timing)
    spans = []
    for record in (
        lambda: gw.record_event(MANAGER, "compacted", actor_type="system", summary="one"),
        lambda: gw.record_events([dict(session_key=MANAGER, kind="compacted", actor_type="system", summary="two")]),
    ):
        started = time.perf_counter()
        record()
        spans.append(time.perf_counter() - started)
    assert len(timing.seconds) == 2
    for heard, span in zip(timing.seconds, spans):
        assert 0 <= heard <= span  # measured inside the call, by the same clock
