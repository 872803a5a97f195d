"""``sessionstate demo``: a new temporary database by default (real state is never touched), the
same story on every run, a non-empty database refused unless ``--reuse``, a heading for every
block it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sessionstate import Gateway

NOTICE = 'Session "agent:main:subagent:worker" changed (other actor).'


def demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The demo in a child process whose home and temporary directory are under ``tmp_path``."""
    home, scratch = tmp_path / "home", tmp_path / "tmp"
    home.mkdir(exist_ok=True)
    scratch.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in {"SESSIONSTATE_DB", "XDG_STATE_HOME", "SESSIONSTATE_TRACE"}}
    env.update(HOME=str(home), TMPDIR=str(scratch))
    return subprocess.run([sys.executable, "-m", "sessionstate.clients.cli", "demo", *args],
                          capture_output=True, text=True, timeout=120, env=env)


def test_two_runs_tell_the_same_story_on_new_temporary_databases_and_leave_home_alone(tmp_path):
    first, second = demo(tmp_path), demo(tmp_path)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    paths = [re.search(r"sessionstate demo on sqlite:///(\S+)", run.stdout).group(1) for run in (first, second)]
    assert paths[0] != paths[1], "each run gets a new database"
    for path in paths:
        assert Path(path).is_relative_to(tmp_path / "tmp") and Path(path).exists()
    assert first.stdout.replace(paths[0], "DB") == second.stdout.replace(paths[1], "DB")
    # The worker starts at 3 (the manager's and its own `created`, R27, then the spawn): no
    # earlier run's state.
    assert "stateVersion 3;" in first.stdout
    assert first.stdout.count(NOTICE) >= 5 and '"historyGap": true' in first.stdout
    assert not any((tmp_path / "home").iterdir()), "the demo wrote under $HOME"


def test_every_block_of_rows_has_a_heading_that_counts_it(tmp_path):
    out = demo(tmp_path).stdout.splitlines()
    blocks: list[tuple[str, int]] = []  # (the line before the rows, how many rows)
    for before, line in zip(["", *out], out):
        if line.startswith("     | "):
            if before.startswith("     | "):
                blocks[-1] = (blocks[-1][0], blocks[-1][1] + 1)
            else:
                blocks.append((before, 1))
    assert len(blocks) >= 10
    for heading, rows in blocks:
        counted = re.search(r": (\d+) \w+\(s\)$", heading)
        assert counted is not None, f"rows without a heading under {heading!r}"
        assert int(counted.group(1)) == rows, f"{heading!r} heads {rows} rows"
    documents = [before for before, line in zip(["", *out], out) if line == "     {"]
    assert len(documents) == 3
    for heading in documents:  # each JSON document says which call it answers
        assert "session_status" in heading and "changesSince" in heading and heading.endswith(":"), heading


def test_a_database_with_sessions_is_refused_unless_reuse(tmp_path):
    db = tmp_path / "mine.db"
    with Gateway.open(str(db)) as gw:
        gw.create_session("agent:ops:main")
    refused = demo(tmp_path, "--db", str(db))
    assert refused.returncode == 2 and refused.stdout == ""
    assert len(refused.stderr.strip().splitlines()) == 1 and "--reuse" in refused.stderr, refused.stderr
    with Gateway.open(str(db), create=False) as gw:
        assert [s.session_key for s in gw.store.list_sessions()] == ["agent:ops:main"]  # untouched

    reused = demo(tmp_path, "--db", str(db), "--reuse")
    assert reused.returncode == 0, reused.stderr
    again = demo(tmp_path, "--db", str(db), "--reuse")  # its own sessions from the last run are recreated
    assert again.returncode == 0 and "manager's queue after twenty messages: 1 line(s)" in again.stdout
    with Gateway.open(str(db), create=False) as gw:
        assert gw.ops.session_exists("agent:ops:main")


def test_an_empty_database_given_with_db_needs_no_reuse(tmp_path):
    db = tmp_path / "empty.db"
    Gateway.open(str(db)).close()
    run = demo(tmp_path, "--db", str(db))
    assert run.returncode == 0 and f"sessionstate demo on sqlite:///{db}" in run.stdout


@pytest.mark.parametrize("args", [["--processes", "3"], ["--db", ""]])
def test_bad_demo_arguments_exit_2_with_one_line(tmp_path, args):
    run = demo(tmp_path, *args)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip().splitlines()[-1].startswith(("sessionstate", "usage")), run.stderr
