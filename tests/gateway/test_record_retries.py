"""R15's retries of a recording call: a storage failure known to have rolled back (or one after
which every event would be found again by its dedupe key) is tried again, at most three
attempts in all, with growing pauses and a warning each; anything else, or inside the caller's
own transaction, gives ``None`` at once, with the error logged and counted."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from sessionstate import Gateway, StorageConflict, StorageFull, StorageUnavailable
from sessionstate.services.notice import recording
from tests.gateway.helpers import CHILD, EVENT, PEER, open_watched_child


@pytest.fixture
def gw(db_url: str) -> Iterator[Gateway]:
    gateway = open_watched_child(db_url)
    yield gateway
    gateway.close()


# -- R15: which storage failures are tried again ------------------------------------------------


class FailingAppends:
    """Stands in for the store's appends, as recording calls them (a lone event's
    ``append_event``, or ``record_alone`` where the database decides it, a batch's
    ``append_and_read``): the first ``times`` calls raise ``error``, the rest append for real;
    counts the attempts."""

    def __init__(self, gw: Gateway, monkeypatch: pytest.MonkeyPatch, error: Exception, times: int) -> None:
        self.attempts = 0
        self.error, self.times = error, times
        # record_alone only where the database decides a lone record (PostgreSQL); elsewhere it
        # answers None and the lone event goes through append_event.
        decided_there = getattr(gw.store, "record_function", None) is not None
        for name in ("append_event", "append_and_read") + (("record_alone",) if decided_there else ()):
            monkeypatch.setattr(gw.store, name, self._failing(getattr(gw.store, name)))

    def _failing(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def append(*args: Any) -> Any:
            self.attempts += 1
            if self.attempts <= self.times:
                raise self.error
            return real(*args)

        return append


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The retry pauses asked for, instead of sleeping them."""
    asked: list[float] = []
    monkeypatch.setattr(recording, "time", SimpleNamespace(sleep=asked.append, perf_counter=time.perf_counter))
    return asked


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sessionstate" and r.levelno == level]


def test_a_conflict_that_rolled_back_is_tried_again_until_it_commits(gw, monkeypatch, pauses, caplog):
    caplog.set_level(logging.WARNING, logger="sessionstate")
    failing = FailingAppends(gw, monkeypatch, StorageConflict("deadlock (injected)", retry_safe=True), times=2)
    before, recorded, failures = gw.ops.state_version(CHILD), gw.ops.stats["events_recorded"], gw.ops.stats["append_failures"]
    assert gw.record_event(CHILD, "goal_changed", **EVENT) == before + 1
    assert failing.attempts == 3
    assert pauses == [0.05, 0.1]
    assert _messages(caplog, logging.WARNING) == ["recording 1 event(s) failed (deadlock (injected)); retrying"] * 2
    assert _messages(caplog, logging.ERROR) == []
    assert gw.ops.stats["events_recorded"] == recorded + 1 and gw.ops.stats["append_failures"] == failures
    assert len(gw.pending_system_events(PEER)) == 1, "the notice follows the commit that succeeded"


def test_a_conflict_on_every_attempt_gives_up_after_the_third(gw, monkeypatch, pauses, caplog):
    caplog.set_level(logging.WARNING, logger="sessionstate")
    failing = FailingAppends(gw, monkeypatch, StorageConflict("deadlock (injected)", retry_safe=True), times=99)
    before, failures = gw.store.dump(), gw.ops.stats["append_failures"]
    assert gw.record_event(CHILD, "goal_changed", **EVENT) is None
    assert failing.attempts == 3 and pauses == [0.05, 0.1]
    assert _messages(caplog, logging.ERROR) == ["recording 1 event(s) (goal_changed) failed; the turn goes on"]
    assert gw.record_events([dict(session_key=CHILD, kind=kind, **EVENT) for kind in ("goal_changed", "compacted")]) \
        == [None, None]
    assert _messages(caplog, logging.ERROR)[1:] == ["recording 2 event(s) (compacted, goal_changed) failed; the turn goes on"]
    assert gw.ops.stats["append_failures"] == failures + 3
    assert gw.store.dump() == before and gw.pending_system_events(PEER) == []


NOT_TRIED_AGAIN = {
    # the commit may have happened: running it again could record the event twice
    "outcome unknown, no dedupe key": (StorageUnavailable("connection lost (injected)"), {}),
    "outcome unknown, one of two without a dedupe key": (StorageUnavailable("connection lost (injected)"),
                                                         {"dedupe_key": "once", "burst": True}),
    # rolled back, but running it again cannot help
    "disk full": (StorageFull("disk full (injected)", retry_safe=True), {}),
}


@pytest.mark.parametrize("case", sorted(NOT_TRIED_AGAIN))
def test_a_failure_that_is_not_known_to_be_safe_and_passing_is_not_tried_again(gw, monkeypatch, pauses, case):
    error, shape = NOT_TRIED_AGAIN[case]
    failing = FailingAppends(gw, monkeypatch, error, times=99)
    before = gw.store.dump()
    if shape.get("burst"):
        items = [dict(session_key=CHILD, kind="goal_changed", dedupe_key=shape["dedupe_key"], **EVENT),
                 dict(session_key=CHILD, kind="goal_changed", **EVENT)]
        assert gw.record_events(items) == [None, None]
    else:
        assert gw.record_event(CHILD, "goal_changed", **EVENT) is None
    assert failing.attempts == 1 and pauses == []
    assert gw.store.dump() == before


def test_a_conflict_inside_the_callers_own_transaction_is_not_tried_again(gw, monkeypatch, pauses):
    """Only the caller can run its whole transaction again."""
    failing = FailingAppends(gw, monkeypatch, StorageConflict("deadlock (injected)", retry_safe=True), times=99)
    with gw.transaction():
        assert gw.record_event(CHILD, "goal_changed", **EVENT) is None
    assert failing.attempts == 1 and pauses == []


def test_an_unknown_outcome_is_tried_again_when_every_event_has_a_dedupe_key(gw, monkeypatch, pauses):
    """R10: a commit that did happen is found again by the dedupe key, so nothing is recorded twice."""
    failing = FailingAppends(gw, monkeypatch, StorageUnavailable("connection lost (injected)"), times=1)
    before = gw.ops.state_version(CHILD)
    assert gw.record_event(CHILD, "goal_changed", dedupe_key="once", **EVENT) == before + 1
    assert failing.attempts == 2 and pauses == [0.05]
