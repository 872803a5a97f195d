"""LIV3's trial (trials/threads.py) on every backend, and the two defects it is
there for, seeded: a lost wake and an answer before the commit."""

from __future__ import annotations

import random
import time

from sessionstate.services.notice import group_commit, recording
from trials.threads import run_threads


def test_eight_threads_and_an_event_loop_on_one_gateway_all_return_after_their_commits(db_url):
    report = run_threads(40, threads=8, seed=3, database=db_url)
    assert report.ok, "\n".join(report.failures)
    assert report.calls == (8 + 4) * 40  # 4 coroutines through an AsyncGateway
    assert report.recorded > report.calls * 0.9  # drains record nothing, bursts several
    assert report.read_back > 0


def test_a_wake_lost_once_in_a_hundred_is_found_as_a_call_that_never_returns(monkeypatch, tmp_path):
    real_set = group_commit.Signal.set
    losing = random.Random(5)

    def sometimes_lost(self: group_commit.Signal) -> None:
        if losing.random() >= 0.01:
            real_set(self)

    monkeypatch.setattr(group_commit.Signal, "set", sometimes_lost)
    started = time.monotonic()
    report = run_threads(100, threads=8, seed=1, database=str(tmp_path / "lost.db"), deadline=1.0)
    assert any(f.startswith("LIV3: ") and "never woken" in f for f in report.failures), report.failures
    assert time.monotonic() - started < 30, "found at its deadline, not at the end of every call"


def test_callers_answered_inside_the_batch_transaction_are_found_by_the_read_back(monkeypatch, tmp_path):
    (owner,) = [c for c in vars(recording).values() if isinstance(c, type) and "_record_batch" in vars(c)]
    real_batch = owner._record_batch

    def answered_early(self, waiters):
        with self.store.transaction():  # the batch's own transaction becomes a savepoint of this
            real_batch(self, waiters)
            self.group._release(waiters)  # the defect: woken with their sequences, not committed
            time.sleep(0.003)

    monkeypatch.setattr(owner, "_record_batch", answered_early)
    report = run_threads(60, threads=8, seed=1, database=str(tmp_path / "early.db"))
    assert any(f.startswith("R9: ") and "before its commit" in f for f in report.failures), report.failures
