"""sessionstate.clients.metrics through the OpenTelemetry SDK's in-memory reader: the counters, the
append histogram, the per-watcher lag and lead gauges and the owed wakes (owed, fired, fired
late, their lateness) under a fake clock, on each backend."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk.metrics")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from sessionstate import Gateway, StorageError
from sessionstate.clients.metrics import LATENESS_BUCKETS, instrument, metrics_of

MANAGER, WORKER, PEER = "agent:main:main", "agent:main:subagent:worker", "agent:main:peer"


def collected(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict, object]]]:
    """metric name -> [(attributes, value)]: a sum's value, a gauge's value, a histogram's count."""
    found: dict[str, list[tuple[dict, object]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "count", None) if hasattr(point, "bucket_counts") else point.value
                    found.setdefault(metric.name, []).append((dict(point.attributes), value))
    return found


def total(metrics: dict, name: str) -> object:
    return sum(value for _, value in metrics.get(name, []))  # type: ignore[misc]


@pytest.fixture
def measured(db_url):
    reader = InMemoryMetricReader()
    wakes: list[str] = []
    gw = Gateway.open(db_url, on_wake=lambda watcher, reason: wakes.append(watcher), max_rows=100)
    metrics = instrument(gw, MeterProvider(metric_readers=[reader]))
    yield gw, metrics, reader, wakes
    gw.close()


def human(gw: Gateway, key: str = WORKER) -> int | None:
    return gw.record_event(key, "human_direct_message", actor_type="human", summary="human message via telegram")


def test_counters_histogram_and_gauges(measured):
    gw, _, reader, wakes = measured
    gw.create_session(MANAGER)
    gw.create_session(WORKER, kind="subagent", parent=MANAGER)  # child_spawned: recorded inside
    for _ in range(3):
        human(gw)
    gw.record_events([{"session_key": WORKER, "kind": "goal_changed", "actor_type": "human", "summary": "goal"}])
    before_drain = collected(reader)
    assert before_drain["sessionstate.watcher.lag"] == [({"watcher": MANAGER}, 4)]
    positions = gw.ops.cursor_positions(MANAGER, WORKER)
    high_water = gw.store.sequence_high_water()
    # Row cap 100: the oldest unread event (L + 1) goes once 100 events are newer than it.
    assert before_drain["sessionstate.watcher.lead"] == [({"watcher": MANAGER}, 100 - (high_water - (positions.last_seen + 1)))]
    assert gw.drain_system_events(MANAGER)  # the notice, delivered
    gw.drain_system_events(MANAGER)  # the follow-up for the events after it (R8)

    metrics = collected(reader)
    recorded = dict((attrs["kind"], value) for attrs, value in metrics["sessionstate.events.recorded"])
    assert recorded == {"child_spawned": 1, "human_direct_message": 3, "goal_changed": 1}
    assert total(metrics, "sessionstate.append.duration") == 4  # three calls and one batch
    assert total(metrics, "sessionstate.notices.queued") == 2  # the notice and its follow-up
    assert total(metrics, "sessionstate.notices.drained") == 2
    assert total(metrics, "sessionstate.wakes.sent") == len(wakes) == 1  # coalesced within 20 s
    assert "sessionstate.append.failures" not in metrics
    assert metrics["sessionstate.watcher.lag"] == [({"watcher": MANAGER}, 0)]  # caught up
    assert "sessionstate.watcher.lead" not in metrics  # nothing unread: no lead to report


def test_append_failures_are_counted(measured, monkeypatch):
    gw, _, reader, _ = measured
    gw.create_session(PEER)

    def refuse(*args, **kwargs):
        raise StorageError("disk gone")

    monkeypatch.setattr(gw.store, "append_event", refuse)
    monkeypatch.setattr(gw.store, "record_alone", refuse)  # where the database decides a lone record
    assert human(gw, PEER) is None  # R15: recording is best effort
    metrics = collected(reader)
    assert total(metrics, "sessionstate.append.failures") == 1
    assert "sessionstate.events.recorded" not in metrics


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def timed(db_url):
    """A gateway on a fake clock (owed wakes fall due when the test moves it), with MANAGER
    watching WORKER: a human message on WORKER queues a notice that asks for a wake."""
    reader, clock, wakes = InMemoryMetricReader(), Clock(), []
    gw = Gateway.open(db_url, clock=clock, on_wake=lambda watcher, reason: wakes.append((watcher, clock.now)))
    metrics = instrument(gw, MeterProvider(metric_readers=[reader]))
    gw.create_session(MANAGER)
    gw.create_session(WORKER, kind="subagent", parent=MANAGER)
    yield gw, metrics, reader, clock, wakes
    gw.close()


def test_owed_wakes_fired_and_late(timed):
    gw, _, reader, clock, wakes = timed
    start = clock.now
    human(gw)                                   # t=0: woken at once, nothing owed
    assert "sessionstate.wakes.owed" not in collected(reader)
    clock.now = start + 5
    assert gw.drain_system_events(MANAGER)
    clock.now = start + 10
    human(gw)                                   # inside the window: owed, due at t=20
    assert collected(reader)["sessionstate.wakes.owed"] == [({"watcher": MANAGER}, 1)]
    clock.now = start + 20.5
    gw.ops.fire_due_wakes()                         # (or the timer first: the lock orders them)
    assert [at for _, at in wakes] == [start, start + 20.5]
    found = collected(reader)
    assert total(found, "sessionstate.wakes.sent") == 2  # the owed wake is an on_wake call too
    assert found["sessionstate.wakes.owed_fired"] == [({"watcher": MANAGER}, 1)]
    assert "sessionstate.wakes.fired_late" not in found  # 0.5 s: within LIV1's second

    assert gw.drain_system_events(MANAGER)
    clock.now = start + 25
    human(gw)                                   # owed again, due at 20.5 + 20 = 40.5
    clock.now = start + 43
    gw.ops.fire_due_wakes()                         # 2.5 s after its due time: late
    found = collected(reader)
    assert total(found, "sessionstate.wakes.owed") == 2
    assert found["sessionstate.wakes.owed_fired"] == [({"watcher": MANAGER}, 2)]
    assert found["sessionstate.wakes.fired_late"] == [({"watcher": MANAGER}, 1)]
    [point] = [p for m in reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
               if m.name == "sessionstate.wakes.lateness" for p in m.data.data_points]
    assert point.count == 2 and point.sum == pytest.approx(0.5 + 2.5)
    assert list(point.explicit_bounds) == list(LATENESS_BUCKETS)


def test_an_owed_wake_is_counted_once(timed, monkeypatch):
    """A drained watcher's owed wake never fires; one that fails to read its slot and is owed
    again (retry) is still one owed wake."""
    gw, _, reader, clock, wakes = timed
    start = clock.now
    human(gw)
    gw.drain_system_events(MANAGER)
    clock.now = start + 10
    human(gw)                                   # owed, due at t=20
    clock.now = start + 12
    assert gw.drain_system_events(MANAGER)      # drained before it fell due
    clock.now = start + 21
    gw.ops.fire_due_wakes()
    found = collected(reader)
    assert total(found, "sessionstate.wakes.owed") == 1 and "sessionstate.wakes.owed_fired" not in found

    clock.now = start + 30
    human(gw)                                   # the window has passed: woken at once
    assert gw.drain_system_events(MANAGER)
    clock.now = start + 35
    human(gw)                                   # owed, due at t=50
    slot = gw.store.serving.take_wake_slot  # R23's durable slot, read by the owed wake
    failures = iter([StorageError("slot unreadable")])

    def flaky(*args):
        for failure in failures:
            raise failure
        return slot(*args)

    monkeypatch.setattr(gw.store.serving, "take_wake_slot", flaky)
    clock.now = start + 50
    gw.ops.fire_due_wakes()                         # the slot fails: owed again at t=51
    assert len(wakes) == 2 and gw.ops.diagnostics().owed_wakes == {MANAGER: start + 51}
    clock.now = start + 51
    gw.ops.fire_due_wakes()
    found = collected(reader)
    assert len(wakes) == 3
    assert total(found, "sessionstate.wakes.owed") == 2  # not 3: the retry is the same owed wake
    assert found["sessionstate.wakes.owed_fired"] == [({"watcher": MANAGER}, 1)]


def test_detach(timed):
    """After ``detach`` nothing is counted any more: no recording (through any path), no
    queued or drained notice, no wake sent or owed."""
    gw, metrics, reader, clock, wakes = timed
    assert metrics_of(gw) is metrics and instrument(gw) is metrics
    counted = lambda: {k: v for k, v in collected(reader).items() if not k.startswith("sessionstate.watcher.")}  # noqa: E731
    before = counted()
    metrics.detach()
    assert metrics_of(gw) is None
    gw.create_session(PEER, kind="subagent", parent=MANAGER)  # a spawn edge: child_spawned
    human(gw, PEER)                              # queued for the manager, woken at once
    gw.record_events([dict(session_key=PEER, kind="goal_changed", actor_type="human", summary="g")])
    human(gw, PEER)                              # inside the window: owed
    assert gw.drain_system_events(MANAGER)
    assert wakes and gw.ops.diagnostics().owed_wakes  # the gateway still woke and owes
    assert counted() == before


def test_importing_sessionstate_never_imports_opentelemetry():
    import subprocess
    import sys

    probe = "import sys, sessionstate; g = sessionstate.Gateway.open('sqlite://'); " \
            "print(any(m.startswith('opentelemetry') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
