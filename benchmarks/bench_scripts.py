"""The standalone measurement scripts, run once at their smallest so they cannot rot.

``append_cost.py`` compares trees rather than the project with raw SQL, so it is a script of
its own; here it compares this tree with itself, on SQLite and (with a server) on PostgreSQL,
and only the shape of its report is checked: nothing here asserts timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PG_URL = os.environ.get("SESSIONSTATE_TEST_PG_URL")


def test_pg_batch_script_reports_every_tree_and_size():
    if not PG_URL:
        pytest.skip("needs SESSIONSTATE_TEST_PG_URL (scripts/pg-test-server)")
    done = subprocess.run(
        [sys.executable, str(HERE / "pg_batch.py"), "--rounds", "1", "--sizes", "1,4",
         str(HERE.parent), str(HERE.parent)],
        capture_output=True, text=True, timeout=300, cwd=HERE.parent,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [t["tree"] for t in report["trees"]] == [str(HERE.parent)] * 2
    for tree in report["trees"]:
        assert sorted(tree["sizes"]) == ["1", "4"]
        assert all(size["us_per_event"] > 0 and size["round_trips"] > 0 for size in tree["sizes"].values())
    assert report["trees"][0]["sizes"]["4"]["vs_first"] == 1.0


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_append_cost_script_reports_every_tree(backend):
    if backend == "postgresql" and not PG_URL:
        pytest.skip("needs SESSIONSTATE_TEST_PG_URL (scripts/pg-test-server)")
    flags = ["--postgres"] if backend == "postgresql" else []
    done = subprocess.run(
        [sys.executable, str(HERE / "append_cost.py"), *flags, "--events", "20", "--runs", "2",
         str(HERE.parent), str(HERE.parent)],
        capture_output=True, text=True, timeout=300, cwd=HERE.parent,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["backend"] == backend and report["events"] == 20
    assert [t["tree"] for t in report["trees"]] == [str(HERE.parent)] * 2
    for tree in report["trees"]:
        assert len(tree["medians_us"]) == 2 and all(m > 0 for m in tree["medians_us"])
    assert report["trees"][0]["vs_first"] == 1.0


def test_owed_wakes_script_reports_cost_idle_cpu_and_lateness():
    done = subprocess.run(
        [sys.executable, str(HERE / "owed_wakes.py"), "10", "0.2"],
        capture_output=True, text=True, timeout=300, cwd=HERE.parent,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("append, 10 pending main-style watchers: owed ")
    assert lines[1].startswith("wake timer idle CPU: 10 owed an hour ahead ")
    assert lines[2].startswith("lateness of 10 owed at once: p50 ")


def test_thread_scaling_script_reports_both_sides_per_thread_count():
    done = subprocess.run(
        [sys.executable, str(HERE / "thread_scaling.py"), "--rounds", "1", "--events", "16", "--threads", "1,2"],
        capture_output=True, text=True, timeout=300, cwd=HERE.parent,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [p["threads"] for p in report["points"]] == [1, 2]
    for point in report["points"]:
        assert point["serial"]["events_per_s"] > 0 and point["group"]["events_per_s"] > 0


def test_checkpoint_aside_script_reports_both_sides():
    done = subprocess.run(
        [sys.executable, str(HERE / "checkpoint_aside.py"), "--rounds", "2", "--events", "16"],
        capture_output=True, text=True, timeout=300, cwd=HERE.parent,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for side in ("thread", "in_commit"):
        point = report[side]
        assert point["record_event_us"] > 0 and point["burst8_us_per_event"] > 0
        calls = point["call_us"]
        assert 0 < calls["p50"] <= calls["p99"] <= calls["p999"] <= calls["max"]
        assert point["wal_mb"] > 0
    assert report["record_event_in_commit_over_thread"] > 0 and report["burst8_in_commit_over_thread"] > 0


def test_handover_floor_script_reports_both_primitives():
    done = subprocess.run(
        [sys.executable, str(HERE / "handover_floor.py"), "--trips", "200", "--rounds", "1"],
        capture_output=True, text=True, timeout=300, cwd=HERE.parent,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for primitive in ("event", "lock"):
        point = report[primitive]
        assert point["wall_us"] > 0
        assert point["cpu_us"] == pytest.approx(point["user_us"] + point["system_us"], abs=0.15)


def test_handover_script_reports_cpu_per_side():
    done = subprocess.run(
        [sys.executable, str(HERE / "handover.py"), "--rounds", "1", "--events", "16", "--threads", "2"],
        capture_output=True, text=True, timeout=300, cwd=HERE.parent,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for side in ("raw", "one", "burst8", "burst8_one_target", "t2"):
        assert report[side]["us_per_event"] > 0
        assert set(report[side]["cpu_us_per_event"]) == {"user", "system"}
    assert report["t2"]["switches_per_event"] >= 0 and report["t2"]["vs_burst8"] > 0


def test_batch_ceiling_script_sets_the_ceiling_against_the_target():
    done = subprocess.run(
        [sys.executable, str(HERE / "batch_ceiling.py"), "--rounds", "1", "--events", "16"],
        capture_output=True, text=True, timeout=300, cwd=HERE.parent,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report["one_thread_us_per_event"]) == {"singles", "bursts_of_8"}
    # the printed figures are rounded: the ceiling is one burst event's cost inverted, the target 3x serial
    ceiling = 1e6 / report["one_thread_us_per_event"]["bursts_of_8"]
    assert abs(report["ceiling_events_per_s"] - ceiling) <= 0.01 * ceiling
    assert abs(report["target_events_per_s"] - 3 * report["eight_threads_events_per_s"]["serial"]) <= 3


def test_writer_scaling_script_reports_both_sides():
    if not PG_URL:
        pytest.skip("needs SESSIONSTATE_TEST_PG_URL (scripts/pg-test-server)")
    done = subprocess.run(
        [sys.executable, str(HERE / "writer_scaling.py"), "--writers", "1", "--seconds", "0.2", "--layout", "shared"],
        capture_output=True, text=True, timeout=300, cwd=HERE.parent,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [(p["layout"], p["writers"]) for p in report["points"]] == [("shared", 1)]
    for point in report["points"]:
        for side in ("raw", "project"):
            assert point[side]["events_per_s"] > 0 and point[side]["p99_ms"] >= point[side]["p50_ms"]


def test_instructions_script_counts_every_tree():
    """``instructions.py`` at its smallest: a count per tree, the first tree's ratio 1 (the
    counts themselves are not judged)."""
    import shutil

    if shutil.which("valgrind") is None or shutil.which("gcc") is None or not Path(
        "/usr/include/valgrind/callgrind.h"
    ).exists():
        pytest.skip("needs valgrind with its headers, and gcc")
    done = subprocess.run(
        [sys.executable, str(HERE / "instructions.py"), "--events", "5", "--warm-up", "5", str(HERE.parent)],
        capture_output=True, text=True, timeout=600, cwd=HERE.parent,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["events"] == 5 and [t["tree"] for t in report["trees"]] == [str(HERE.parent)]
    assert report["trees"][0]["instructions_per_event"] > 10_000 and report["trees"][0]["vs_first"] == 1.0
