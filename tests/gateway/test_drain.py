"""The drain (R21, R29): a transaction known to have rolled back is run again, three attempts in
all, with the queue as it is then (a plain line included); a failure that is not retry-safe, or
one inside the caller's transaction, is raised at once; a commit whose outcome is unknown
returns its lines (logged as a warning naming the watcher) and a later drain may repeat them.
Its plan: queued notices come in queued order (not target order), a process that queued no
notice delivers the durable cursor's line itself, a notice another process acknowledged
meanwhile is dropped, and a turn that owes no notice (its quick path, no transaction) delivers
its plain lines once."""

from __future__ import annotations

import logging

import pytest

from sessionstate import Gateway, notice_text
from sessionstate.errors import CommitOutcomeUnknown, StorageConflict, StorageFull
from tests.gateway.helpers import BEHIND, PLAIN, WATCHER, human_upstream, owing_watcher

# -- R29: a drain whose transaction failed ---------------------------------------------------


def failing_cursor_writes(gw: Gateway, monkeypatch, failures: list[BaseException]) -> list[BaseException]:
    """The drain's acknowledgement write raises each of ``failures`` in turn, then works; the
    list left over says how many were not reached."""
    real = gw.store.put_cursors

    def put_cursors(*args, **kwargs):
        if failures:
            raise failures.pop(0)
        return real(*args, **kwargs)

    monkeypatch.setattr(gw.store, "put_cursors", put_cursors)
    return failures


def conflict() -> StorageConflict:
    return StorageConflict("injected: a concurrent transaction won", retry_safe=True)


def test_a_drain_rolled_back_twice_delivers_on_its_third_attempt(db_url, monkeypatch):
    with Gateway.open(db_url) as gw:
        notice = owing_watcher(gw)
        left = failing_cursor_writes(gw, monkeypatch, [conflict(), conflict()])
        assert gw.drain_system_events(WATCHER) == [PLAIN, notice]
        assert left == []
        # acknowledged: nothing is owed any more, and nothing is queued
        assert gw.pending_system_events(WATCHER) == []
        positions = gw.ops.cursor_positions(WATCHER, BEHIND)
        assert positions.last_seen == positions.notified == positions.material


def test_a_drain_rolled_back_three_times_raises_and_keeps_everything_queued(db_url, monkeypatch):
    with Gateway.open(db_url) as gw:
        notice = owing_watcher(gw)
        third = conflict()
        left = failing_cursor_writes(gw, monkeypatch, [conflict(), conflict(), third, conflict()])
        with pytest.raises(StorageConflict) as raised:
            gw.drain_system_events(WATCHER)
        assert raised.value is third and len(left) == 1  # three attempts, not a fourth
        assert gw.pending_system_events(WATCHER) == [PLAIN, notice]


def test_a_drain_failure_that_is_not_retry_safe_is_raised_at_once(db_url, monkeypatch):
    with Gateway.open(db_url) as gw:
        notice = owing_watcher(gw)
        full = StorageFull("injected: the disk is full")
        left = failing_cursor_writes(gw, monkeypatch, [full, conflict()])
        with pytest.raises(StorageFull):
            gw.drain_system_events(WATCHER)
        assert len(left) == 1
        assert gw.pending_system_events(WATCHER) == [PLAIN, notice]


def test_a_drain_inside_the_callers_transaction_is_not_run_again(db_url, monkeypatch):
    """The caller's transaction is what rolled back: only the caller can run it again."""
    with Gateway.open(db_url) as gw:
        notice = owing_watcher(gw)
        left = failing_cursor_writes(gw, monkeypatch, [conflict(), conflict()])
        with pytest.raises(StorageConflict), gw.transaction():
            gw.drain_system_events(WATCHER)
        assert len(left) == 1
        assert gw.pending_system_events(WATCHER) == [PLAIN, notice]


def test_a_drain_whose_commit_outcome_is_unknown_returns_its_lines(db_url, monkeypatch, caplog):
    """Injected before the commit, so nothing was acknowledged nor taken off the queue: the
    next drain delivers the same lines again (R29: at least once, a line may repeat)."""
    with Gateway.open(db_url) as gw:
        notice = owing_watcher(gw)
        left = failing_cursor_writes(gw, monkeypatch, [CommitOutcomeUnknown("injected: the answer was lost")])
        with caplog.at_level(logging.WARNING, logger="sessionstate"):
            assert gw.drain_system_events(WATCHER) == [PLAIN, notice]
        assert left == []
        assert f"drain of {WATCHER}: commit outcome unknown; returning its lines" in caplog.messages
        assert gw.drain_system_events(WATCHER) == [PLAIN, notice]


# -- R21: what a drain delivers -------------------------------------------------------------


def test_a_turn_owing_no_notice_delivers_its_plain_lines_once(db_url):
    with Gateway.open(db_url) as gw:
        gw.create_session(WATCHER)
        gw.ops.enqueue_system_event(WATCHER, PLAIN)
        gw.ops.enqueue_system_event(WATCHER, "[gateway] a second plain line")
        assert gw.drain_system_events(WATCHER) == [PLAIN, "[gateway] a second plain line"]
        assert gw.drain_system_events(WATCHER) == []


def test_a_drain_keeps_the_queued_order_of_notices_not_their_target_order(db_url):
    late, early = "agent:zz:main", "agent:aa:main"  # queued in the order opposite to sorting
    with Gateway.open(db_url) as gw:
        for key in (WATCHER, late, early):
            gw.create_session(key)
        gw.watch(WATCHER, late)
        gw.watch(WATCHER, early)
        since = {key: gw.ops.cursor_positions(WATCHER, key).last_seen for key in (late, early)}
        human_upstream(gw, late)
        human_upstream(gw, early)
        assert gw.drain_system_events(WATCHER) == [notice_text(late, since[late]), notice_text(early, since[early])]


def test_each_process_delivers_from_the_durable_cursor_and_drops_what_another_acknowledged(db_url):
    """Two gateways on one database; only the recording one queued the notice. The other's
    drain delivers the pair's line from the cursor; the recorder's queued copy is then stale."""
    with Gateway.open(db_url) as recorder, Gateway.open(db_url) as other:
        for key in (WATCHER, BEHIND):
            recorder.create_session(key)
        recorder.watch(WATCHER, BEHIND)
        since = recorder.ops.cursor_positions(WATCHER, BEHIND).last_seen
        human_upstream(recorder, BEHIND)
        assert other.pending_system_events(WATCHER) == []
        assert recorder.pending_system_events(WATCHER) == [notice_text(BEHIND, since)]
        assert other.drain_system_events(WATCHER) == [notice_text(BEHIND, since)]
        assert recorder.drain_system_events(WATCHER) == []
        assert recorder.pending_system_events(WATCHER) == []
