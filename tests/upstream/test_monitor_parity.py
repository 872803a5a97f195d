"""R28: the upstream monitor skips a session while it has an active run, and a failed
``upstream_missing`` append is retried at the next tick. Both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessionstate.store import RunRecord
from sessionstate.upstream.monitor import MISSES_BEFORE_DROP

from tests.upstream.monitor_support import MANAGER, World, make_world

THREAD = "5f0c2a8e-1111-4c2d-9e7f-0a1b2c3d4e5f"


@pytest.fixture
def world(tmp_path: Path, db_url: str) -> World:
    w = make_world(tmp_path, db_url)
    yield w
    w.gw.close()


def start_run(world: World, child: str) -> str:
    now = world.gw.clock()
    with world.gw.transaction() as store:  # the run's row as sessions_spawn writes it
        store.runs.insert(RunRecord(
            "run-1", MANAGER, "main", child, "main", "subagent", "keep working", None, None, None, False,
            "isolated", None, "running", None, None, None, None, 0, now, None,
        ))
    return "run-1"


def test_a_session_with_an_active_run_is_not_scanned_until_the_run_ends(world: World) -> None:
    world.transcript(THREAD, world.builder(THREAD).summary())
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    run_id = start_run(world, key)
    world.human(THREAD, "typed by its own turn")  # what the running turn writes
    calls_before = world.jsonl.calls
    report = monitor.tick()
    assert (report.checked, report.activities_recorded, report.skipped_running) == (0, 0, 1)
    assert world.jsonl.calls == calls_before  # the provider was not even asked
    assert world.events(key, "human_direct_message") == []
    world.gw.runs.finish_run(run_id, "completed", announce=False)
    after = monitor.tick()
    assert (after.checked, after.skipped_running) == (1, 0)


def test_a_missing_source_is_not_counted_as_a_miss_while_its_session_runs(world: World) -> None:
    path = world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    path.unlink()
    start_run(world, key)
    for _ in range(MISSES_BEFORE_DROP + 1):
        assert monitor.tick().misses == 0
    assert monitor.links.get(key, "main").consecutive_misses == 0


def test_a_failed_upstream_missing_append_is_retried_at_the_next_tick(world: World, monkeypatch) -> None:
    path = world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    path.unlink()
    for _ in range(MISSES_BEFORE_DROP - 1):
        monitor.tick()
    real = world.gw.record_event
    failing = {"left": 1}

    def flaky(session_key: str, kind: str, **kwargs: Any) -> int | None:
        if kind == "upstream_missing" and failing["left"]:
            failing["left"] -= 1
            return None  # R15: the append failed
        return real(session_key, kind, **kwargs)

    monkeypatch.setattr(world.gw, "record_event", flaky)
    failed = monitor.tick()
    assert (failed.missing_emitted, failed.missing_deferred, failed.errors) == (0, 1, 1)
    link = monitor.links.get(key, "main")
    assert link is not None and link.consecutive_misses == MISSES_BEFORE_DROP - 1  # one short
    assert world.events(key, "upstream_missing") == []
    retried = monitor.tick()
    assert retried.missing_emitted == 1 and monitor.links.get(key, "main") is None
    assert len(world.events(key, "upstream_missing")) == 1
    assert len(world.notices()) == 1  # the watcher got its one notice


def test_a_storage_failure_of_the_upstream_missing_append_is_retried_at_the_next_tick(world: World, monkeypatch) -> None:
    from sessionstate.errors import StorageFull

    path = world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    path.unlink()
    for _ in range(MISSES_BEFORE_DROP - 1):
        monitor.tick()
    store = world.gw.store
    real = store.append_event
    failing = {"left": 1}

    def full(*args: Any) -> Any:
        if args[2] == "upstream_missing" and failing["left"]:
            failing["left"] -= 1
            raise StorageFull("disk full (injected)")
        return real(*args)

    monkeypatch.setattr(store, "append_event", full)
    failed = monitor.tick()
    assert (failed.missing_emitted, failed.missing_deferred) == (0, 1) and failing["left"] == 0
    link = monitor.links.get(key, "main")
    assert link is not None and link.consecutive_misses == MISSES_BEFORE_DROP - 1
    retried = monitor.tick()
    assert retried.missing_emitted == 1 and monitor.links.get(key, "main") is None
    assert len(world.events(key, "upstream_missing")) == 1
