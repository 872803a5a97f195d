"""Tests written for mutmut's survivors over the notice service's cursors.py, turns.py,
queue.py, reconcile.py and announce.py (tests/gateway as the selection), and for mutants of
those files the run had not reached that the test files closest to the code let through. Each
pins a behaviour those mutants changed unnoticed:

- a read-only database owing notices: the startup sweep's in-memory path queues exactly the
  owed notice (none for a caught-up pair) and logs how many it holds, naming the database;
- R29 in a drain: a transaction known to have rolled back is run again, three attempts in
  all, with the queue as it is then (a plain line included); a failure that is not retry-safe,
  or one inside the caller's transaction, is raised at once; a commit whose outcome is unknown
  returns its lines (logged as a warning naming the watcher) and a later drain may repeat them;
- watch's refusals name what is wrong (the watcher key, the target key, an unqualified
  watcher, a self-watch), and an unqualified target key is resolved with the agent id given;
- an owed wake fires only for a waking line that entered after the watcher's last wake: not
  for the line it was woken for (its other notice withdrawn meanwhile), nor for an R27
  announcement (which never asks for a wake); a plain line queued again while it is still
  queued is not new (R5) and asks for no second wake;
- a turn that owes no notice (its quick path, no transaction) delivers its plain lines once;
- R21's drain plan: queued notices come in queued order (not target order), a process that
  queued no notice delivers the durable cursor's line itself, and a notice another process
  acknowledged meanwhile is dropped;
- R26 with R23: a notice queued while its pair was ambient is woken for by the next material
  event after a promotion, also when it is the only line queued (no R27 announcement beside);
  a promotion, a reset and a delete of a watcher with nothing queued log no error (their
  queue work runs after the commit, where a failure is only logged);
- the protocol trace records each notice an unwatch withdraws and a reset clears, naming the
  watcher, the target and the text (its "unqueue" lines), and a reset with nothing queued
  records nothing and logs no error;
- an attach (R20) re-queues the watcher's notices from its cursors and keeps its plain lines;
"""

from __future__ import annotations

import json
import logging

import pytest
from sqlalchemy.engine import make_url

from sessionstate import Gateway, notice_text
from sessionstate.errors import CommitOutcomeUnknown, InvalidArgument, StorageConflict, StorageFull

WATCHER = "agent:w:main"
# Main sessions of other agents: no R27 announcement joins the watcher's lines.
BEHIND, CAUGHT_UP = "agent:behind:main", "agent:calm:main"


def read_only_url(db_url: str) -> str:
    """The same database opened so that this connection cannot write: SQLite's read-only
    mode, or PostgreSQL transactions that default to read-only (as on a standby)."""
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        return f"sqlite:///file:{url.database}?mode=ro&uri=true"
    options = f"{url.query['options']} -cdefault_transaction_read_only=on"
    return url.update_query_dict({"options": options}).render_as_string(hide_password=False)


def test_a_read_only_open_queues_only_the_owed_notice_and_says_so(db_url, caplog):
    with Gateway.open(db_url) as gw:
        for key in (WATCHER, BEHIND, CAUGHT_UP):
            gw.create_session(key)
        gw.watch(WATCHER, BEHIND)
        gw.watch(WATCHER, CAUGHT_UP)
        owed_since = gw.ops.cursor_positions(WATCHER, BEHIND).last_seen
        gw.record_event(BEHIND, "human_direct_message", actor_type="human", summary="typed upstream")
    with caplog.at_level(logging.INFO, logger="sessionstate"):
        with Gateway.open(read_only_url(db_url), create=False) as gw:
            assert gw.store.read_only
            assert gw.pending_system_events(WATCHER) == [notice_text(BEHIND, owed_since)]
            where = gw.store.where
    assert f"{where} is read-only: 1 owed notice(s) held in memory only" in caplog.messages


# -- R29: a drain whose transaction failed ---------------------------------------------------

PLAIN = "[gateway] a plain line queued before the notice"


def owing_watcher(gw: Gateway) -> str:
    """WATCHER with a plain line and then one notice queued; returns the notice's text."""
    for key in (WATCHER, BEHIND):
        gw.create_session(key)
    gw.watch(WATCHER, BEHIND)
    since = gw.ops.cursor_positions(WATCHER, BEHIND).last_seen
    gw.ops.enqueue_system_event(WATCHER, PLAIN)
    gw.record_event(BEHIND, "human_direct_message", actor_type="human", summary="typed upstream")
    assert gw.pending_system_events(WATCHER) == [PLAIN, notice_text(BEHIND, since)]
    return notice_text(BEHIND, since)


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


# -- watch: what a refusal says, and whose target is watched ----------------------------------

REFUSED_WATCHES = {
    "watcher key": (("agent:w:with space", BEHIND),
                    "watcher key 'agent:w:with space' contains whitespace or control characters"),
    "target key": ((WATCHER, "agent:t:with space"),
                   "target key 'agent:t:with space' contains whitespace or control characters"),
    "unqualified watcher": (("plain-watcher", BEHIND),
                            "watcher 'plain-watcher' is not agent-qualified (agent:<id>:...); "
                            "it gets no proactive notices"),
    "itself": ((WATCHER, WATCHER), "a session cannot watch itself"),
}


@pytest.mark.parametrize("refusal", sorted(REFUSED_WATCHES))
def test_a_refused_watch_says_why(db_url, refusal):
    (watcher, target), message = REFUSED_WATCHES[refusal]
    with Gateway.open(db_url) as gw:
        for key in (WATCHER, BEHIND):
            gw.create_session(key)
        gw.create_session("plain-watcher", agent_id="w")  # it exists: only being unqualified is refused
        with pytest.raises(InvalidArgument) as refused:
            gw.watch(watcher, target)
        assert str(refused.value) == message


def test_an_unqualified_target_is_watched_under_the_agent_id_given(db_url):
    """Two agents each have a session named "shared": the agent id says which one is meant."""
    with Gateway.open(db_url) as gw:
        gw.create_session(WATCHER)
        for agent in ("a", "b"):
            gw.create_session("shared", agent_id=agent)
        assert gw.watch(WATCHER, "shared", target_agent_id="b") is True
        since = gw.session_status("shared", agent_id="b")["stateVersion"]
        gw.record_event("shared", "human_direct_message", agent_id="a", actor_type="human", summary="to a")
        assert gw.pending_system_events(WATCHER) == []
        gw.record_event("shared", "human_direct_message", agent_id="b", actor_type="human", summary="to b")
        assert gw.pending_system_events(WATCHER) == [notice_text("shared", since)]


# -- owed wakes: which lines they fire for (R12, R27, WAKE1) ----------------------------------

WINDOW = 20.0


class FakeClock:
    """The gateway's clock, moved by the test: an owed wake falls due when it is moved."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def human(gw: Gateway, target: str) -> None:
    gw.record_event(target, "human_direct_message", actor_type="human", summary="typed upstream")


def test_an_owed_wake_whose_new_notice_was_withdrawn_does_not_fire(db_url):
    """Woken for BEHIND's notice; CAUGHT_UP's notice, inside the window, is owed a wake and
    then withdrawn by an unwatch: what is left is the line the watcher was woken for."""
    clock, woken = FakeClock(), []
    with Gateway.open(db_url, clock=clock, on_wake=lambda watcher, reason: woken.append(reason)) as gw:
        for key in (WATCHER, BEHIND, CAUGHT_UP):
            gw.create_session(key)
        gw.watch(WATCHER, BEHIND)
        gw.watch(WATCHER, CAUGHT_UP)
        start = clock.now
        human(gw, BEHIND)
        assert woken == [f"session-state: {BEHIND}"]
        clock.now = start + 5
        human(gw, CAUGHT_UP)
        assert gw.ops.diagnostics().owed_wakes == {WATCHER: start + WINDOW}
        clock.now = start + 10
        gw.unwatch(WATCHER, CAUGHT_UP)
        assert [line.split('"')[1] for line in gw.pending_system_events(WATCHER)] == [BEHIND]
        clock.now = start + WINDOW
        assert gw.ops.fire_due_wakes() == 0
        assert woken == [f"session-state: {BEHIND}"]


def test_an_announcement_after_the_drain_does_not_fire_an_owed_wake(db_url):
    """R27's line never asks for a wake, so it cannot be what an owed wake fires for."""
    clock, woken = FakeClock(), []
    manager, worker = "agent:main:main", "agent:main:worker"
    with Gateway.open(db_url, clock=clock, on_wake=lambda watcher, reason: woken.append(reason)) as gw:
        for key in (manager, BEHIND):
            gw.create_session(key)
        gw.watch(manager, BEHIND)
        start = clock.now
        human(gw, BEHIND)
        assert len(woken) == 1
        clock.now = start + 5
        assert len(gw.drain_system_events(manager)) == 1
        clock.now = start + 8
        human(gw, BEHIND)  # inside the window: owed
        assert gw.ops.diagnostics().owed_wakes == {manager: start + WINDOW}
        clock.now = start + 10
        assert len(gw.drain_system_events(manager)) == 1
        clock.now = start + 12
        gw.create_session(worker)
        assert gw.pending_system_events(manager) == ['[session created] "agent:main:worker" (kind main)']
        clock.now = start + WINDOW
        assert gw.ops.fire_due_wakes() == 0
        assert len(woken) == 1


def test_a_plain_line_queued_again_is_no_new_line_and_wakes_nobody(db_url):
    clock, woken = FakeClock(), []
    with Gateway.open(db_url, clock=clock, on_wake=lambda watcher, reason: woken.append(reason)) as gw:
        gw.create_session(WATCHER)
        assert gw.ops.enqueue_system_event(WATCHER, PLAIN) is True
        assert woken == ["system-event"]
        clock.now += 3 * WINDOW  # the window is long over: only the line's being new could wake
        assert gw.ops.enqueue_system_event(WATCHER, PLAIN) is False
        assert woken == ["system-event"] and gw.pending_system_events(WATCHER) == [PLAIN]


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
        human(gw, late)
        human(gw, early)
        assert gw.drain_system_events(WATCHER) == [notice_text(late, since[late]), notice_text(early, since[early])]


def test_each_process_delivers_from_the_durable_cursor_and_drops_what_another_acknowledged(db_url):
    """Two gateways on one database; only the recording one queued the notice. The other's
    drain delivers the pair's line from the cursor; the recorder's queued copy is then stale."""
    with Gateway.open(db_url) as recorder, Gateway.open(db_url) as other:
        for key in (WATCHER, BEHIND):
            recorder.create_session(key)
        recorder.watch(WATCHER, BEHIND)
        since = recorder.ops.cursor_positions(WATCHER, BEHIND).last_seen
        human(recorder, BEHIND)
        assert other.pending_system_events(WATCHER) == []
        assert recorder.pending_system_events(WATCHER) == [notice_text(BEHIND, since)]
        assert other.drain_system_events(WATCHER) == [notice_text(BEHIND, since)]
        assert recorder.drain_system_events(WATCHER) == []
        assert recorder.pending_system_events(WATCHER) == []


# -- R26 with R23: a promoted pair's queued notice ---------------------------------------------


def test_a_promoted_pairs_only_queued_notice_is_woken_for_by_the_next_event(db_url):
    clock, woken = FakeClock(), []
    with Gateway.open(db_url, clock=clock, on_wake=lambda watcher, reason: woken.append(reason)) as gw:
        for key in (WATCHER, BEHIND):
            gw.create_session(key)
        gw.watch(WATCHER, BEHIND, ambient=True)
        since = gw.ops.cursor_positions(WATCHER, BEHIND).last_seen
        human(gw, BEHIND)
        assert gw.watch(WATCHER, BEHIND) is False  # the promotion: no wake for it yet
        assert woken == [] and gw.pending_system_events(WATCHER) == [notice_text(BEHIND, since)]
        clock.now += 2 * WINDOW
        human(gw, BEHIND)  # folded into the pending notice: no new line, but a wake
        assert woken == [f"session-state: {BEHIND}"]
        assert gw.pending_system_events(WATCHER) == [notice_text(BEHIND, since)]


def test_a_watcher_with_nothing_queued_is_promoted_reset_and_deleted_without_an_error(db_url, caplog):
    """The queue holds no entry at all for the watcher at each step."""
    woken: list[str] = []
    with caplog.at_level(logging.ERROR, logger="sessionstate"), Gateway.open(db_url, on_wake=lambda watcher, reason: woken.append(reason)) as gw:
        for key in (WATCHER, BEHIND, CAUGHT_UP):
            gw.create_session(key)
        gw.watch(WATCHER, BEHIND, ambient=True)
        assert gw.watch(WATCHER, BEHIND) is False  # promoted, caught up
        assert gw.ops.cursor_positions(WATCHER, BEHIND).provenance == "explicit"
        gw.ops.reset_session(WATCHER)
        assert gw.ops.cursor_positions(WATCHER, BEHIND) is None
        gw.watch(CAUGHT_UP, BEHIND)
        gw.ops.delete_session(CAUGHT_UP)
        assert gw.ops.cursor_positions(CAUGHT_UP, BEHIND) is None
        assert not gw.ops.session_exists(CAUGHT_UP)
        assert woken == [] and gw.pending_system_events(WATCHER) == []
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []


# -- the protocol trace: notices withdrawn and cleared ------------------------------------------


def test_the_trace_records_each_notice_an_unwatch_withdraws_and_a_reset_clears(db_url, tmp_path, caplog):
    path = tmp_path / "trace.jsonl"
    with caplog.at_level(logging.ERROR, logger="sessionstate"), Gateway.open(db_url, trace=path) as gw:
        for key in (WATCHER, BEHIND, CAUGHT_UP):
            gw.create_session(key)
        gw.watch(WATCHER, BEHIND)
        gw.watch(WATCHER, CAUGHT_UP)
        human(gw, BEHIND)
        human(gw, CAUGHT_UP)
        withdrawn, cleared = gw.pending_system_events(WATCHER)
        gw.unwatch(WATCHER, BEHIND)
        gw.ops.reset_session(WATCHER)
        gw.ops.reset_session(WATCHER)  # again, with nothing queued: nothing to record
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []
    unqueued = [
        (line["watcher"], line["target"], line["text"])
        for line in map(json.loads, path.read_text().splitlines())
        if line.get("op") == "unqueue"
    ]
    # agent-qualified keys carry their agent id: agent:<id>:main
    assert unqueued == [
        (WATCHER, [BEHIND, "behind"], withdrawn),
        (WATCHER, [CAUGHT_UP, "calm"], cleared),
    ]


# -- R20: an attach keeps the plain lines --------------------------------------------------------


def test_an_attach_requeues_the_notices_and_keeps_the_plain_lines(db_url):
    with Gateway.open(db_url, pump=True) as gw:
        notice = owing_watcher(gw)
        gw.cluster.attach(WATCHER)
        assert gw.pending_system_events(WATCHER) == [PLAIN, notice]
