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


def run_script(script: str, *args: str, timeout: float = 300) -> str:
    """``benchmarks/<script>`` with ``args`` in a process of its own: its output, once it
    exited 0."""
    done = subprocess.run(
        [sys.executable, str(HERE / script), *args], capture_output=True, text=True, timeout=timeout, cwd=HERE.parent
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def script_report(script: str, *args: str, timeout: float = 300) -> dict:
    """``run_script``'s output read as the JSON report it prints."""
    return json.loads(run_script(script, *args, timeout=timeout))


def test_pg_batch_script_reports_every_tree_and_size():
    if not PG_URL:
        pytest.skip("needs SESSIONSTATE_TEST_PG_URL (scripts/pg-test-server)")
    report = script_report("pg_batch.py", "--rounds", "1", "--sizes", "1,4", str(HERE.parent), str(HERE.parent))
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
    report = script_report("append_cost.py", *flags, "--events", "20", "--runs", "2", str(HERE.parent), str(HERE.parent))
    assert report["backend"] == backend and report["events"] == 20
    assert [t["tree"] for t in report["trees"]] == [str(HERE.parent)] * 2
    for tree in report["trees"]:
        assert len(tree["medians_us"]) == 2 and all(m > 0 for m in tree["medians_us"])
    assert report["trees"][0]["vs_first"] == 1.0


def test_owed_wakes_script_reports_cost_idle_cpu_and_lateness():
    lines = run_script("owed_wakes.py", "10", "0.2").splitlines()
    assert lines[0].startswith("append, 10 pending main-style watchers: owed ")
    assert lines[1].startswith("wake timer idle CPU: 10 owed an hour ahead ")
    assert lines[2].startswith("lateness of 10 owed at once: p50 ")


def test_thread_scaling_script_reports_both_sides_per_thread_count():
    report = script_report("thread_scaling.py", "--rounds", "1", "--events", "16", "--threads", "1,2")
    assert [p["threads"] for p in report["points"]] == [1, 2]
    for point in report["points"]:
        assert point["serial"]["events_per_s"] > 0 and point["group"]["events_per_s"] > 0


def test_checkpoint_aside_script_reports_both_sides():
    report = script_report("checkpoint_aside.py", "--rounds", "2", "--events", "16")
    for side in ("thread", "in_commit"):
        point = report[side]
        assert point["record_event_us"] > 0 and point["burst8_us_per_event"] > 0
        calls = point["call_us"]
        assert 0 < calls["p50"] <= calls["p99"] <= calls["p999"] <= calls["max"]
        assert point["wal_mb"] > 0
    assert report["record_event_in_commit_over_thread"] > 0 and report["burst8_in_commit_over_thread"] > 0


def test_handover_floor_script_reports_every_primitive():
    report = script_report("handover_floor.py", "--trips", "200", "--rounds", "1")
    for primitive in ("event", "signal", "lock"):
        point = report[primitive]
        assert point["wall_us"] > 0
        assert point["cpu_us"] == pytest.approx(point["user_us"] + point["system_us"], abs=0.15)


def test_handover_script_reports_cpu_per_side():
    report = script_report("handover.py", "--rounds", "1", "--events", "16", "--threads", "2")
    for side in ("raw", "one", "burst8", "burst8_one_target", "t2", "bound2", "bound2_prepared"):
        assert report[side]["us_per_event"] > 0
        cpu = report[side]["cpu_us_per_event"]
        assert set(cpu) == {"user", "system"} and min(cpu.values()) >= 0
    for side in ("t2", "bound2", "bound2_prepared"):
        assert report[side]["switches_per_event"] >= 0 and report[side]["vs_burst8"] > 0
    # the bound commits every call in a batch of exactly T: 16 events, one round, 2 threads
    assert report["bound2"]["calls_by_batch_size"] == report["bound2_prepared"]["calls_by_batch_size"] == {"2": 16}


def test_batch_ceiling_script_sets_the_ceiling_against_the_target():
    report = script_report("batch_ceiling.py", "--rounds", "1", "--events", "16")
    assert set(report["one_thread_us_per_event"]) == {"singles", "bursts_of_8"}
    # the printed figures are rounded: the ceiling is one burst event's cost inverted, the target 3x serial
    ceiling = 1e6 / report["one_thread_us_per_event"]["bursts_of_8"]
    assert abs(report["ceiling_events_per_s"] - ceiling) <= 0.01 * ceiling
    assert abs(report["target_events_per_s"] - 3 * report["eight_threads_events_per_s"]["serial"]) <= 3


def test_writer_scaling_script_reports_both_sides():
    if not PG_URL:
        pytest.skip("needs SESSIONSTATE_TEST_PG_URL (scripts/pg-test-server)")
    report = script_report("writer_scaling.py", "--writers", "1", "--seconds", "0.2", "--layout", "shared")
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
    report = script_report("instructions.py", "--events", "5", "--warm-up", "5", str(HERE.parent), timeout=600)
    assert report["events"] == 5 and [t["tree"] for t in report["trees"]] == [str(HERE.parent)]
    assert report["trees"][0]["instructions_per_event"] > 10_000 and report["trees"][0]["vs_first"] == 1.0


def test_one_core_script_reports_every_placement():
    report = script_report("one_core.py", "--invocations", "1", "--trips", "200", "--rounds", "1", "--events", "48",
                           "--threads", "4")
    assert report["threads"] == 4 and report["invocations"] == 1
    assert sorted(report["placements"]) == ["all_cpus", "one_cpu", "one_cpu_batch"]
    for rows in report["placements"].values():
        for key in ("event_hand_over_wall_us", "signal_hand_over_wall_us", "lock_hand_over_cpu_us", "raw_us_per_event",
                    "t4_us_per_event", "bound4_us_per_event"):
            assert rows[key]["min"] <= rows[key]["median"] <= rows[key]["max"] and rows[key]["median"] > 0
        assert min(rows[f"{side}_vs_raw"]["median"] for side in ("t4", "bound4", "bound4_prepared")) > 0
    assert report["t4_one_cpu_over_all_cpus"]["median"] > 0 and report["t4_one_cpu_batch_over_all_cpus"]["median"] > 0
