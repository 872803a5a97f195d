"""The demo's adopted-session step tells the story it claims."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessionstate.clients.demo.story import run_demo


def test_demo_adopts_a_claude_session_and_the_manager_gets_one_notice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_demo(str(tmp_path / "demo.db")) == 0
    out = capsys.readouterr().out
    step = out[out.index("An external Claude Code session is adopted"):out.index("Thirty-one days pass")]
    assert "activities_recorded=1" in step
    # R27's announcement of the adopted session, then the one notice of the human's turn.
    assert "manager's queue: 2 line(s)" in step
    queue = step[step.index("manager's queue: 2 line(s)"):step.index("session_status of the adopted session")]
    assert queue.count("| [session created]") == 1 and queue.count("changed (other actor)") == 1
    assert '"kind": "human_direct_message"' in step and "human message via claude-jsonl" in step
