"""The adapter protocol's ``bench`` op and the side-by-side benchmark built on it
(benchmarks/reference_side_by_side.py, issue #35): every step is timed inside the
implementation, and the run against the pinned reference records the same events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sessionstate.conformance import openclaw_install
from sessionstate.conformance.protocol import Adapter, AdapterFailure

ROOT = Path(__file__).resolve().parents[2]
MAIN, CHILD = "agent:a:main", "agent:a:subagent:c1"
RECORD = ["record", {"session": CHILD, "kind": "human_direct_message", "actorType": "human", "summary": "x"}]


@pytest.fixture
def project():
    adapter = Adapter([sys.executable, "-m", "sessionstate.conformance.gateway_adapter"], stderr=subprocess.DEVNULL)
    adapter.call("fresh", now=1_700_000_000.0)
    adapter.call("create", key=MAIN)
    adapter.call("spawn", child=CHILD, parent=MAIN, runId="r1")
    yield adapter
    adapter.close()


def test_each_step_is_timed_under_its_label_inside_the_adapter(project: Adapter):
    steps = [RECORD + ["record"]] * 5 + [["drain", {"watcher": MAIN}, "drain"]] + [RECORD + ["after"]] * 2
    answer = project.call("bench", steps=steps)
    assert answer["count"] == {"record": 5, "drain": 1, "after": 2}
    assert set(answer["ns"]) == set(answer["count"]) and all(ns > 0 for ns in answer["ns"].values())
    sequences = answer["sequences"]
    assert len(sequences) == 7 and sequences == sorted(sequences) and len(set(sequences)) == 7
    # the steps really ran: the drain delivered the one notice the first record queued
    status = project.call("changesSince", session=CHILD, since=0)
    assert status["stateVersion"] == sequences[-1]


def test_the_status_tool_step_answers_what_the_state_read_answers(project: Adapter):
    sequences = project.call("bench", steps=[RECORD + ["record"]] * 3)["sequences"]
    since = sequences[0]
    read = project.call("changesSince", session=CHILD, since=since)
    assert [e["sequence"] for e in read["events"]] == sequences[1:]
    assert project.call("statusTool", caller=MAIN, session=CHILD, since=since) == read
    with pytest.raises(AdapterFailure, match="session_status failed"):
        project.call("statusTool", caller=MAIN, session="agent:a:nobody", since=0)


def test_the_signal_log_page_step_answers_what_the_gateway_answers(project: Adapter):
    sequences = project.call("bench", steps=[RECORD + ["record"]] * 4)["sequences"]
    for since in (0, sequences[1], sequences[-1]):
        read = project.call("changesSince", session=CHILD, since=since)
        assert project.call("changesPage", session=CHILD, since=since) == read
    assert [e["sequence"] for e in project.call("changesPage", session=CHILD, since=sequences[1])["events"]] == sequences[2:]
    project.call("clock", now=1_700_000_000.0 + 400 * 86_400)
    project.call("prune")  # every event is past retention: a gap below the pruned watermark (INV8)
    gap = project.call("changesPage", session=CHILD, since=0)
    assert gap["historyGap"] is True and gap["events"] == []
    assert gap == project.call("changesSince", session=CHILD, since=0)
    with pytest.raises(AdapterFailure, match="unknown session"):
        project.call("changesPage", session="agent:a:nobody", since=0)


def test_bench_refuses_what_it_cannot_time_and_the_adapter_goes_on(project: Adapter):
    with pytest.raises(AdapterFailure, match="cannot time"):
        project.call("bench", steps=[["fresh", {"now": 1.0}, "x"]])
    assert project.call("bench", steps=[RECORD + ["record"]])["count"] == {"record": 1}


def test_the_side_by_side_benchmark_records_the_same_events_in_both(tmp_path: Path):
    reason = openclaw_install.installed()
    if reason:
        if os.environ.get("SESSIONSTATE_REQUIRE_OPENCLAW") == "1":
            pytest.fail(f"SESSIONSTATE_REQUIRE_OPENCLAW=1 and {reason}")
        pytest.skip(reason)
    out = tmp_path / "side.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "reference_side_by_side.py"),
                           "--rounds", "2", "--events", "8", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["same_sequences"]
    assert set(result["micros"]) == {"sessionstate", "openclaw"}
    both = {"record", "record after a drain", "drain", "changesSince"}
    assert set(result["micros"]["openclaw"]) == both
    assert set(result["micros"]["sessionstate"]) == both | {"session_status", "session_status tool call"}
    assert set(result["reference_over_project"]) == both
    for name, micros in result["micros"].items():
        assert all(value > 0 for value in micros.values()), (name, micros)
    assert "openclaw 2026.9.6" in result["implementations"]["openclaw"]
    assert "| record |" in done.stdout and "| session_status |" in done.stdout
    assert "| session_status tool call |" in done.stdout and "same sequences in both: yes" in done.stdout
