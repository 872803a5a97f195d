"""``sessionstate demo --processes 2`` tells the story it claims."""

from __future__ import annotations

import subprocess
import sys


def test_demo_with_two_processes(db_url):
    out = subprocess.run(
        [sys.executable, "-m", "sessionstate.clients.cli", "demo", "--processes", "2", "--db", db_url],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    feed = "listens for the commits' NOTIFY" if db_url.startswith("postgres") else "polls PRAGMA data_version"
    assert f"its change pump {feed}" in out
    assert "its own queue for the manager holds 0 line(s): it does not serve it" in out
    assert "manager's queue in process 1: 1 line(s)" in out
    assert "wakes sent: 1" in out and "in the serving process" in out
    assert "lines delivered in total for the episode: 1" in out
