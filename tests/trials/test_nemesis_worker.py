"""A nemesis worker's agent turns (trials/nemesis_worker.py): a wake is followed by a drain."""

from __future__ import annotations

import json
import threading
import time

from trials.nemesis_worker import Worker


def drains_in(history) -> list[dict]:
    return [row for row in map(json.loads, history.read_text().splitlines()) if row["op"] == "drain"]


def test_a_turn_for_a_watcher_deleted_after_its_wake_ends_that_turn_and_the_turns_go_on(tmp_path):
    # Found by the nemesis (PostgreSQL, seed 1, in CI): the workload deleted a watcher between
    # its wake and its turn; the turn's drain raised UnknownSession, which ended the thread that
    # takes every turn, and the pairs of that process's watchers stayed pending (a false LIV1).
    worker = Worker(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, "g0", 0, 1, {"window": 2.0})
    turns = threading.Thread(target=worker.turns, daemon=True)
    try:
        worker.gw.create_session("agent:w:main")
        turns.start()
        worker.on_wake("agent:gone:main", "session-state: agent:t:main")
        worker.on_wake("agent:w:main", "session-state: agent:t:main")
        history = tmp_path / "history-g0-0.jsonl"
        deadline = time.monotonic() + 10
        while not any(row["watcher"] == "agent:w:main" for row in drains_in(history)):
            assert time.monotonic() < deadline, drains_in(history)
            time.sleep(0.05)
        gone = [row for row in drains_in(history) if row["watcher"] == "agent:gone:main"]
        assert [(row["turn"], row["error"]) for row in gone] == [(True, "UnknownSession")]
        assert turns.is_alive()
    finally:
        worker.stopping.set()
        turns.join(timeout=10)
        worker.gw.close()
