"""`sessionstate mcp` refuses to start, with one error line, when there is nothing to serve."""

from __future__ import annotations

import subprocess
import sys

from sessionstate import Gateway


def run_mcp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sessionstate.clients.cli", "mcp", *args],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_an_unknown_session_exits_before_serving(tmp_path):
    db = tmp_path / "state.db"
    Gateway.open(str(db)).close()
    done = run_mcp("--db", str(db), "--session", "agent:main:ghost")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("sessionstate: unknown_session:")


def test_a_missing_database_is_not_created(tmp_path):
    db = tmp_path / "nowhere" / "state.db"
    done = run_mcp("--db", str(db), "--session", "agent:main:main")
    assert done.returncode == 2 and "storage_unavailable" in done.stderr
    assert not db.parent.exists()


def test_a_bad_policy_option_is_an_invalid_argument(tmp_path):
    db = tmp_path / "state.db"
    with Gateway.open(str(db)) as gw:
        gw.create_session("agent:main:main")
    done = run_mcp("--db", str(db), "--session", "agent:main:main", "--max-spawn-depth", "9")
    assert done.returncode == 2 and "invalid_argument" in done.stderr
    done = run_mcp("--db", str(db), "--session", "agent:main:main", "--poll-interval", "0")
    assert done.returncode == 2 and "invalid_argument" in done.stderr
