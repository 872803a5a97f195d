"""The studies and the tree-against-tree comparison, each run once at its smallest so none rots.

``benchmarks/compare.py`` compares trees rather than the project with raw SQL; here it compares
this tree with itself, on SQLite and (with a server) on PostgreSQL. Of every script only the
shape of its report is checked: nothing here asserts timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent  # benchmarks/studies
BENCHMARKS = HERE.parent
TREE = str(BENCHMARKS.parent)  # this checkout
PG_URL = os.environ.get("SESSIONSTATE_TEST_PG_URL")


def run_script(script: str, *args: str, timeout: float = 300) -> str:
    """``benchmarks/<script>`` (e.g. ``studies/handover.py``) with ``args`` in a process of its
    own: its output, once it exited 0."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=timeout, cwd=TREE
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def script_report(script: str, *args: str, timeout: float = 300) -> dict:
    """``run_script``'s output read as the JSON report it prints."""
    return json.loads(run_script(script, *args, timeout=timeout))


def test_compare_pg_batch_reports_every_tree_and_size():
    """``compare.py pg-batch`` runs studies/pg_batch.py with the arguments given."""
    if not PG_URL:
        pytest.skip("needs SESSIONSTATE_TEST_PG_URL (scripts/pg-test-server)")
    report = script_report("compare.py", "pg-batch", "--rounds", "1", "--sizes", "1,4", TREE, TREE)
    assert [t["tree"] for t in report["trees"]] == [TREE] * 2
    for tree in report["trees"]:
        assert sorted(tree["sizes"]) == ["1", "4"]
        assert all(size["us_per_event"] > 0 and size["round_trips"] > 0 for size in tree["sizes"].values())
    assert report["trees"][0]["sizes"]["4"]["vs_first"] == 1.0


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_compare_wall_reports_every_tree(backend):
    if backend == "postgresql" and not PG_URL:
        pytest.skip("needs SESSIONSTATE_TEST_PG_URL (scripts/pg-test-server)")
    flags = ["--postgres"] if backend == "postgresql" else []
    # options after the trees are taken too
    report = script_report("compare.py", "wall", *flags, "--events", "20", TREE, TREE, "--runs", "2")
    assert report["backend"] == backend and report["events"] == 20 and report["threaded"] is False
    assert [t["tree"] for t in report["trees"]] == [TREE] * 2
    for tree in report["trees"]:
        assert len(tree["medians_us"]) == 2 and all(m > 0 for m in tree["medians_us"])
    assert report["trees"][0]["vs_first"] == 1.0


def test_owed_wakes_script_reports_cost_idle_cpu_and_lateness():
    lines = run_script("studies/owed_wakes.py", "10", "0.2").splitlines()
    assert lines[0].startswith("append, 10 pending main-style watchers: owed ")
    assert lines[1].startswith("wake timer idle CPU: 10 owed an hour ahead ")
    assert lines[2].startswith("lateness of 10 owed at once: p50 ")


def test_watcher_styles_script_reports_both_sides_and_their_ratio():
    lines = run_script("studies/watcher_styles.py", "--rounds", "1", "--events", "5").splitlines()
    assert lines[0].startswith("1 rounds of 5 events, 3 watchers caught up before each")
    assert any(line.lstrip().startswith("main ") for line in lines)
    assert any(line.lstrip().startswith("sub-agent watchers:") for line in lines)
    assert lines[-1].startswith("main ÷ sub-agent: ")


def test_thread_scaling_script_reports_both_sides_per_thread_count():
    report = script_report("studies/thread_scaling.py", "--rounds", "1", "--events", "16", "--threads", "1,2")
    assert [p["threads"] for p in report["points"]] == [1, 2]
    for point in report["points"]:
        assert point["serial"]["events_per_s"] > 0 and point["group"]["events_per_s"] > 0


def test_handover_script_reports_cpu_per_side():
    report = script_report("studies/handover.py", "--rounds", "1", "--events", "16", "--threads", "2")
    for side in ("raw", "one", "burst8", "burst8_one_target", "t2", "bound2", "bound2_prepared"):
        assert report[side]["us_per_event"] > 0
        cpu = report[side]["cpu_us_per_event"]
        assert set(cpu) == {"user", "system"} and min(cpu.values()) >= 0
    for side in ("t2", "bound2", "bound2_prepared"):
        assert report[side]["switches_per_event"] >= 0 and report[side]["vs_burst8"] > 0
    # the bound commits every call in a batch of exactly T: 16 events, one round, 2 threads
    assert report["bound2"]["calls_by_batch_size"] == report["bound2_prepared"]["calls_by_batch_size"] == {"2": 16}


def test_writer_scaling_script_reports_both_sides():
    if not PG_URL:
        pytest.skip("needs SESSIONSTATE_TEST_PG_URL (scripts/pg-test-server)")
    report = script_report("studies/writer_scaling.py", "--writers", "1", "--seconds", "0.2", "--layout", "shared")
    assert [(p["layout"], p["writers"]) for p in report["points"]] == [("shared", 1)]
    for point in report["points"]:
        for side in ("raw", "project"):
            assert point[side]["events_per_s"] > 0 and point[side]["p99_ms"] >= point[side]["p50_ms"]


def test_compare_instructions_counts_every_tree_and_style():
    """``compare.py instructions`` at its smallest: a count per tree and style, the first one's
    ratio 1 (the counts themselves are not judged)."""
    import shutil

    if shutil.which("valgrind") is None or shutil.which("gcc") is None or not Path(
        "/usr/include/valgrind/callgrind.h"
    ).exists():
        pytest.skip("needs valgrind with its headers, and gcc")
    report = script_report("compare.py", "instructions", "--events", "5", "--warm-up", "5",
                           "--style", "append-cost", "--style", "main", TREE, timeout=600)
    assert report["events"] == 5
    assert [(t["tree"], t["style"]) for t in report["trees"]] == [(TREE, "append-cost"), (TREE, "main")]
    assert report["trees"][0]["instructions_per_event"] > 10_000 and report["trees"][0]["vs_first"] == 1.0
