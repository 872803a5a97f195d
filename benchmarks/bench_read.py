"""``changesSince`` reads at 50,000 rows: a full page of 200 and a near-head page of 5, the
latter as a first read and read again.

The project call is ``session_status(key, changes_since=N)``: validation, session lookup, the
head with the earliest retained sequence, the page (LIMIT 201), and one JSON-ready dict per
event. The baseline runs the same two SELECTs on the same file and keeps the rows as tuples.
The store keeps the rows a page has read (store/event_rows.py): the page of 200 never reaches
the session's newest event, so it is read whole every round; the near-head page's first read
(``head``) drops the kept rows before each round (untimed), and ``again`` reads it with its
rows kept, its sequences only.
"""

from __future__ import annotations

import pytest
from _support import TARGET, RawLog, cached_log_file, open_gateway, paired, scaled

ROWS = scaled(50_000, 2_000)
SESSIONS = 10


@pytest.fixture(scope="module")
def log_file(tmp_path_factory):
    return cached_log_file(tmp_path_factory.mktemp("read"), rows=ROWS, sessions=SESSIONS)


def _since(path, page: str) -> tuple[int, int]:
    raw = RawLog(path)
    seqs = [r[0] for r in raw.db.execute(
        "SELECT sequence FROM session_state_events WHERE session_key = ? ORDER BY sequence", (TARGET,))]
    raw.close()
    # "full": from the middle of the target's log, so 200 events come back and more remain.
    mid = len(seqs) // 2
    return (seqs[mid], min(200, len(seqs) - mid - 1)) if page == "full" else (seqs[-6], 5)


@pytest.mark.parametrize("page", ["full", "head", "again"])
def test_changes_since(benchmark, log_file, page):
    """The project's page against the raw statements, alternately, on the same file (reads
    only: neither side's connection sees a commit)."""
    since, expect = _since(log_file, page)
    gw = open_gateway(log_file)
    raw = RawLog(log_file)
    first_read = gw.store.event_rows.clear if page == "head" else None
    result = paired(benchmark, gw.session_status, raw.page, key=f"page.{page}.project", rounds_full=2000,
                    setup_project=first_read,
                    args=(TARGET,), kwargs={"changes_since": since}, other_args=(TARGET, since), rows=ROWS)
    assert len(result["stateChanges"]["events"]) == expect
    assert len(raw.page(TARGET, since)[1][:200]) == expect
    raw.close()
    gw.close()
