"""sessionstate.metrics through the OpenTelemetry SDK's in-memory reader: the counters, the
append histogram and the per-watcher lag and lead gauges, on each backend."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk.metrics")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from sessionstate import Gateway, StorageError
from sessionstate.metrics import instrument, metrics_of

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
    positions = gw.cursor_positions(MANAGER, WORKER)
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
    assert human(gw, PEER) is None  # R15: recording is best effort
    metrics = collected(reader)
    assert total(metrics, "sessionstate.append.failures") == 1
    assert "sessionstate.events.recorded" not in metrics


def test_the_wake_hooks_and_detach(measured):
    gw, metrics, reader, _ = measured
    assert metrics_of(gw) is metrics and instrument(gw) is metrics
    metrics.wake_owed(MANAGER)
    metrics.wake_fired_late(MANAGER)
    found = collected(reader)
    assert found["sessionstate.wakes.owed"] == [({"watcher": MANAGER}, 1)]
    assert found["sessionstate.wakes.fired_late"] == [({"watcher": MANAGER}, 1)]
    metrics.detach()
    assert metrics_of(gw) is None
    gw.create_session(PEER)
    human(gw, PEER)
    assert "sessionstate.events.recorded" not in collected(reader)  # no longer counted
    assert "record_event" not in vars(gw.protocol)  # the class's method again


def test_importing_sessionstate_never_imports_opentelemetry():
    import subprocess
    import sys

    probe = "import sys, sessionstate; g = sessionstate.Gateway.open('sqlite://'); " \
            "print(any(m.startswith('opentelemetry') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
