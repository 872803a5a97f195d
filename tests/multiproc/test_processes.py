"""Real OS processes on each backend (R21, R22, INV10): A records, B serves the watcher. B's notice arrives
through its pump and its wake fires; then A and B drain the watcher concurrently, a thousand
times each, while A keeps recording, and every pending episode is delivered exactly once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from sessionstate import Gateway
from sessionstate import notice_text

W, T = "agent:a:main", "agent:b:main"
# Each session logs its own `created` first (R27): W is 1, T is 2, so a watch of T made after
# both starts at 2, and its first notice says changesSince 2.
SEED = 2
DRAINS = 1000
ROOT = Path(__file__).resolve().parents[2]


def read(process: subprocess.Popen[str]) -> dict:
    line = process.stdout.readline()  # type: ignore[union-attr]
    assert line, process.stderr.read()  # type: ignore[union-attr]
    return json.loads(line)


def test_a_records_b_serves_and_each_episode_is_delivered_once(db_url):
    url = db_url
    with Gateway.open(url, serve=[]) as a:
        a.create_session(W)
        a.create_session(T)
        a.watch(W, T)
        b = subprocess.Popen(
            [sys.executable, "-m", "tests.multiproc.process_worker", url, W, str(DRAINS)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            assert read(b) == {"ready": True}
            first = a.record_event(T, "human_direct_message", actor_type="human", summary="hello")
            assert a.pending_system_events(W) == []  # a does not serve W
            arrived = read(b)
            assert arrived["pending"] == [notice_text(T, SEED)]
            assert arrived["wakes"] == [[W, f"session-state: {T}"]]

            b.stdin.write("go\n")  # type: ignore[union-attr]
            b.stdin.flush()  # type: ignore[union-attr]
            recorded = [first]
            mine: list[list[str]] = []
            for i in range(DRAINS):
                sequence = a.record_event(T, "human_direct_message", actor_type="human", summary=f"m{i}")
                recorded.append(sequence)
                mine.append(a.drain_system_events(W))
            theirs = read(b)["drained"]
            b.wait(timeout=60)
        finally:
            if b.poll() is None:
                b.kill()
        mine.append(a.drain_system_events(W))  # whatever is still owed
        final = a.ops.cursor_positions(W, T)

    drains = mine + theirs
    assert all(len(lines) <= 1 for lines in drains)  # at most one line per target per drain
    delivered = [int(re.search(r"changesSince (\d+)\.$", lines[0]).group(1)) for lines in drains if lines]
    # Exactly once: every acknowledged position is delivered once, and the episodes chain from
    # the seed to the newest event with nothing owed at the end.
    assert len(delivered) == len(set(delivered))
    assert final == (recorded[-1],) * 3
    assert min(delivered) == SEED and set(delivered) - {SEED} <= set(recorded)
    assert len(delivered) >= 2 and len(theirs) == DRAINS
