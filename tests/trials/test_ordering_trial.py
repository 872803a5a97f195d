"""The multi-process ordering trial (trials/ordering.py) on every backend:
4 writer processes on shared and distinct targets, 2 readers polling changesSince."""

from __future__ import annotations

import copy

from trials.ordering import OrderingReport, check_outcome, run_ordering


def test_four_writers_and_two_readers_keep_order_and_cursors(db_url, tmp_path):
    report = run_ordering(db_url, writers=4, readers=2, events=60, seed=1, directory=tmp_path)
    assert report.ok, "\n".join(report.failures)
    assert report.appended == 4 * 60
    assert report.interleavings > 0 and report.polls > 0


def test_the_checks_see_a_skipped_event_and_a_lost_one(db_url, tmp_path, monkeypatch):
    # The trial's verdict must be able to fail: doctor one run's records and check again.
    captured: dict = {}

    def capture(url, writers, writes, reads, report):
        captured.update(url=url, writers=writers, writes=writes, reads=reads)
        return check_outcome(url, writers, writes, reads, report)

    monkeypatch.setattr("trials.ordering.check_outcome", capture)
    assert run_ordering(db_url, writers=2, readers=1, events=20, seed=2, directory=tmp_path).ok
    reads = copy.deepcopy(captured["reads"])
    key, seen = next((k, v) for k, v in reads[0]["seen"].items() if len(v) >= 2)
    seen.remove(min(seen))  # as if it committed after a larger sequence had been read
    writes = copy.deepcopy(captured["writes"])
    writes[0]["acknowledged"].pop()  # an event in the log that nobody acknowledged
    failures = check_outcome(captured["url"], 2, writes, reads, OrderingReport(2, 1, 20))
    assert any("skipped" in f and key in f for f in failures), failures
    assert any("nobody acknowledged" in f for f in failures), failures
