"""Crash and concurrency trials: a few in CI, the slow profile's sizes with SESSIONSTATE_SLOW=1."""

from __future__ import annotations

import pytest

from trials.concurrency import run_concurrency
from trials.crash import read_sidelog, run_trials


def test_three_sigkill_trials(tmp_path):
    report = run_trials(3, seed=1, directory=tmp_path)
    assert report.ok, report.failures
    assert report.trials == 3


def test_a_torn_sidelog_line_is_not_acknowledged(tmp_path):
    log = tmp_path / "ack.log"
    log.write_text("1 agent:w0:main\n2 agent:w1:main\n3 agent:w", encoding="utf-8")
    assert read_sidelog(log) == [(1, "agent:w0:main"), (2, "agent:w1:main")]


def test_two_processes_append_500_events_each(tmp_path):
    report = run_concurrency(500, seed=2, directory=tmp_path)
    assert report.ok, report.failures
    assert report.appended == 1000 and report.append_failures == 0 and report.throughput > 0


@pytest.mark.slow
def test_slow_fifty_crash_trials():
    report = run_trials(50, seed=0)
    assert report.ok, report.failures


@pytest.mark.slow
def test_slow_ten_thousand_events_per_process():
    report = run_concurrency(10_000, seed=0)
    assert report.ok, report.failures
