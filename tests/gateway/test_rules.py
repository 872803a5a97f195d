"""One test (or a few) per rule of spec/notice-protocol.md, on a real SQLite file."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from sessionstate import Gateway, InvalidArgument, Positions, notice_text

MANAGER = "agent:main:main"
CHILD = "agent:main:subagent:child"
PEER = "agent:main:peer"
NOW = 1_800_000_000.0
DAY = 86_400.0
# These tests pin R1-R16 to the small numbers of the spec's examples (the spawn at version 1,
# an empty main queue). R27's `created` event and announcement line, on by default, would
# shift every number by one and add lines to MANAGER's queue; test_created.py pins what the
# defaults do to those numbers.
WITHOUT_R27 = {"record_created": False, "notify_on_create": False}


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def wakes():
    return []


@pytest.fixture
def gw(db_url, clock, wakes):
    gateway = Gateway.open(db_url, clock=clock, on_wake=lambda w, r: wakes.append((w, r)), **WITHOUT_R27)
    gateway.create_session(MANAGER)
    gateway.create_session(CHILD, kind="subagent", parent=MANAGER, run_id="r1")
    yield gateway
    gateway.close()


def human(gw, key=CHILD, **kw):
    return gw.record_event(key, "human_direct_message", actor_type="human", summary="human message via telegram", **kw)


def test_r1_only_notifying_kinds_open_notices(gw):
    for kind in ("run_completed", "run_failed", "compacted", "adopted"):
        assert gw.record_event(CHILD, kind, actor_type="system", summary=f"{kind} happened") is not None
    assert gw.pending_system_events(MANAGER) == []
    gw.record_event(CHILD, "goal_changed", actor_type="agent", summary="goal updated", actor_id=PEER)
    assert len(gw.pending_system_events(MANAGER)) == 1


def test_r2_self_caused_events_never_notify_their_actor(gw):
    gw.record_event(CHILD, "goal_changed", actor_type="agent", summary="goal set by manager", actor_id=MANAGER)
    assert gw.pending_system_events(MANAGER) == []
    assert gw.ops.cursor_positions(MANAGER, CHILD) == Positions(1, 1, 1)


def test_r2_self_event_does_not_hide_a_later_material_event(gw):
    own = gw.record_event(CHILD, "goal_changed", actor_type="agent", summary="goal set", actor_id=MANAGER)
    other = human(gw)
    assert gw.drain_system_events(MANAGER) == [notice_text(CHILD, 1)]
    changes = gw.session_status(CHILD, changes_since=1)["stateChanges"]["events"]
    assert [e["sequence"] for e in changes] == [own, other]


def test_r3_global_sessions_hold_no_cursor_but_keep_the_log(gw):
    gw.create_session("global", agent_id="main")
    with pytest.raises(InvalidArgument, match="agent-qualified"):
        gw.watch("global", CHILD)
    gw.create_session("agent:main:subagent:g-child", kind="subagent", parent="global")
    sequence = human(gw, key="agent:main:subagent:g-child")
    assert gw.pending_system_events("global") == []
    status = gw.session_status("global", changes_since=0)
    assert status["stateVersion"] == 0
    assert gw.session_status("agent:main:subagent:g-child")["stateVersion"] == sequence


def test_r3_two_agents_global_sessions_do_not_collide(gw):
    gw.create_session("global", agent_id="main")
    gw.create_session("global", agent_id="ops")
    seq = gw.record_event("global", "compacted", actor_type="system", summary="compacted", agent_id="ops")
    assert gw.session_status("global", agent_id="ops")["stateVersion"] == seq
    assert gw.session_status("global", agent_id="main")["stateVersion"] == 0
    with pytest.raises(Exception, match="ambiguous"):
        gw.session_status("global")


def test_r4_spawn_seeds_the_parent_at_the_spawn_version(gw):
    assert gw.ops.cursor_positions(MANAGER, CHILD) == Positions(1, 1, 1)
    events = gw.session_status(CHILD, changes_since=0)["stateChanges"]["events"]
    assert [(e["kind"], e["actorId"], e["runId"]) for e in events] == [("child_spawned", MANAGER, "r1")]


def test_r4_explicit_watch_starts_at_the_current_version(gw):
    gw.create_session(PEER)
    human(gw)
    head = gw.ops.state_version(CHILD)
    assert gw.watch(PEER, CHILD) is True
    assert gw.ops.cursor_positions(PEER, CHILD) == Positions(head, head, head)
    assert gw.pending_system_events(PEER) == []
    assert gw.watch(PEER, CHILD) is False  # already watched: kept as it is


def test_r4_rewatch_keeps_a_pending_notice(gw):
    human(gw)
    before = gw.ops.cursor_positions(MANAGER, CHILD)
    assert gw.watch(MANAGER, CHILD) is False
    assert gw.ops.cursor_positions(MANAGER, CHILD) == before
    assert gw.pending_system_events(MANAGER) == [notice_text(CHILD, 1)]


def test_r5_twenty_changes_give_one_byte_identical_line(gw):
    for _ in range(20):
        human(gw)
        assert gw.pending_system_events(MANAGER) == [notice_text(CHILD, 1)]
    assert gw.drain_system_events(MANAGER) == [
        'Session "agent:main:subagent:child" changed (other actor). Reconcile before acting: '
        'session_status sessionKey "agent:main:subagent:child" changesSince 1.'
    ]


def stored_cursor_row(gw):
    """The cursor row as stored (read directly: no effective positions)."""
    sql = "SELECT last_seen_sequence, notified_sequence, material_sequence FROM session_watch_cursors"
    if type(gw.store).__name__ == "PostgresStore":
        return tuple(gw.store.db.execute(sql).fetchone())
    with sqlite3.connect(gw.store.path) as raw:  # a second connection on the file
        return raw.execute(sql).fetchone()


def test_r6_r7_frozen_watermark_and_lazy_material(gw):
    first = human(gw)
    store_row = stored_cursor_row(gw)
    later = [human(gw) for _ in range(3)]
    assert gw.ops.cursor_positions(MANAGER, CHILD) == Positions(1, first, later[-1])
    # R7: the pending cursor's row was not written by the later events.
    assert stored_cursor_row(gw) == store_row


def test_r8_ack_stops_at_the_frozen_watermark_and_reopens_once(gw):
    first = human(gw)
    second = human(gw)
    assert gw.drain_system_events(MANAGER) == [notice_text(CHILD, 1)]
    assert gw.ops.cursor_positions(MANAGER, CHILD) == Positions(first, second, second)
    assert gw.pending_system_events(MANAGER) == [notice_text(CHILD, first)]
    assert gw.drain_system_events(MANAGER) == [notice_text(CHILD, first)]
    assert gw.ops.cursor_positions(MANAGER, CHILD) == Positions(second, second, second)
    assert gw.drain_system_events(MANAGER) == []


def test_r8_no_reopen_without_interleaved_work(gw):
    human(gw)
    gw.drain_system_events(MANAGER)
    assert gw.pending_system_events(MANAGER) == []


def driver_error(gw):
    """A failure as the store's own driver raises it."""
    if gw.store.path is None and gw.store.url.startswith("postgres"):
        import psycopg

        return psycopg.errors.DiskFull("could not extend file: No space left on device")
    return sqlite3.OperationalError("disk I/O error")


def broke_alone(gw, monkeypatch) -> None:
    """A lone record decided in the database (PostgreSQL, ``record_alone``) is one call: its
    storage failure is that call's, translated as the store translates (SQLite's returns
    ``None`` and records statement by statement, where the other injections fail it)."""

    def broken_alone(row):
        raise gw.store.storage_error(driver_error(gw))

    if gw.store.path is None:
        monkeypatch.setattr(gw.store, "record_alone", broken_alone)


def test_r9_failed_commit_queues_nothing(gw, monkeypatch):
    def broken(*args, **kwargs):
        raise driver_error(gw)

    monkeypatch.setattr(gw.store, "put_cursors", broken)
    broke_alone(gw, monkeypatch)
    before = gw.store.dump()
    assert human(gw) is None
    assert gw.store.dump() == before
    assert gw.pending_system_events(MANAGER) == []


def test_r10_duplicate_dedupe_key_returns_the_existing_sequence(gw):
    first = human(gw, dedupe_key="upstream:telegram:42")
    gw.drain_system_events(MANAGER)
    before = gw.store.dump()
    assert human(gw, dedupe_key="upstream:telegram:42") == first
    assert gw.store.dump() == before
    assert gw.pending_system_events(MANAGER) == []
    assert human(gw) == first + 1  # no sequence was consumed by the duplicate


def test_r11_restart_rematerialises_pending_notices(db_url, gw, clock):
    human(gw)
    human(gw)
    gw.close()
    reopened = Gateway.open(db_url, clock=clock, **WITHOUT_R27)
    try:
        assert reopened.pending_system_events(MANAGER) == [notice_text(CHILD, 1)]
        assert reopened.drain_system_events(MANAGER) == [notice_text(CHILD, 1)]
        assert reopened.pending_system_events(MANAGER) == []  # the sweep set notified := material
    finally:
        reopened.close()


def test_r11_restart_after_drain_keeps_the_follow_up(db_url, gw, clock):
    first = human(gw)
    human(gw)
    gw.drain_system_events(MANAGER)
    gw.close()
    with Gateway.open(db_url, clock=clock, **WITHOUT_R27) as reopened:
        assert reopened.pending_system_events(MANAGER) == [notice_text(CHILD, first)]


def test_r12_main_watchers_are_woken_once_per_window(gw, clock, wakes):
    gw.create_session(PEER)
    gw.create_session("agent:main:subagent:other", kind="subagent", parent=MANAGER)
    gw.watch(PEER, "agent:main:subagent:other")
    human(gw)
    human(gw, key="agent:main:subagent:other")
    assert wakes == [(MANAGER, f"session-state: {CHILD}"), (PEER, "session-state: agent:main:subagent:other")]
    gw.drain_system_events(MANAGER)
    clock.now += 5
    human(gw)  # reopens for MANAGER within 20 s: no second wake
    assert len([w for w in wakes if w[0] == MANAGER]) == 1
    gw.drain_system_events(MANAGER)
    gw.drain_system_events(MANAGER)
    clock.now += 20
    human(gw)
    assert len([w for w in wakes if w[0] == MANAGER]) == 2


def test_r12_subagent_watchers_get_no_wake(gw, wakes):
    watcher = "agent:main:subagent:observer"
    gw.create_session(watcher, kind="subagent", parent=MANAGER)
    gw.watch(watcher, CHILD)
    wakes.clear()
    human(gw)
    assert gw.pending_system_events(watcher) == [notice_text(CHILD, 1)]
    assert [w for w in wakes if w[0] == watcher] == []


def test_r13_prune_raises_the_watermark_and_keeps_the_head(db_url, clock):
    with Gateway.open(db_url, clock=clock, max_rows=3, **WITHOUT_R27) as gw:
        gw.create_session(MANAGER)
        gw.create_session(CHILD, kind="subagent", parent=MANAGER)
        seqs = [human(gw) for _ in range(5)]
        result = gw.prune()
        assert result["events"] == 3  # 6 rows (spawn + 5) down to the newest 3
        status = gw.session_status(CHILD, changes_since=0)
        assert status["stateVersion"] == seqs[-1]
        assert status["stateChanges"]["historyGap"] is True
        assert status["stateChanges"]["earliestAvailableSequence"] == seqs[2]
        exact = gw.session_status(CHILD, changes_since=seqs[1])["stateChanges"]
        assert exact["historyGap"] is False
        assert [e["sequence"] for e in exact["events"]] == seqs[2:]


def test_r13_prune_keeps_the_pending_notice_owed(db_url, clock):
    with Gateway.open(db_url, clock=clock, max_rows=1, **WITHOUT_R27) as gw:
        gw.create_session(MANAGER)
        gw.create_session(CHILD, kind="subagent", parent=MANAGER)
        human(gw)
        last = [human(gw) for _ in range(3)][-1]
        gw.record_event(MANAGER, "compacted", actor_type="system", summary="compacted")
        gw.prune()  # every event of CHILD is deleted
        assert gw.ops.cursor_positions(MANAGER, CHILD).material == last
        gw.drain_system_events(MANAGER)
        assert gw.pending_system_events(MANAGER) == [notice_text(CHILD, 2)]


def test_r13_old_events_and_idle_cursors_expire(gw, clock):
    human(gw)
    gw.drain_system_events(MANAGER)
    clock.now += 31 * DAY
    result = gw.prune()
    assert result == {"events": 2, "cursors": 1, "chunks": 1, "pages_reclaimed": 0}  # two rows free no page
    assert gw.ops.cursor_positions(MANAGER, CHILD) is None
    assert gw.ops.state_version(CHILD) == 2


def test_r13_cursor_on_an_active_target_does_not_expire(gw, clock):
    clock.now += 29 * DAY
    human(gw)
    gw.drain_system_events(MANAGER)
    clock.now += 2 * DAY
    assert gw.prune()["cursors"] == 0


def test_r14_reset_removes_the_watchers_cursors_only(gw):
    human(gw)
    gw.ops.reset_session(MANAGER)
    assert gw.ops.cursor_positions(MANAGER, CHILD) is None
    assert gw.pending_system_events(MANAGER) == []
    assert gw.ops.state_version(CHILD) == 2
    assert len(gw.session_status(CHILD, changes_since=0)["stateChanges"]["events"]) == 2


def test_r14_delete_removes_events_head_and_every_cursor_naming_it(gw):
    gw.create_session(PEER)
    gw.watch(PEER, CHILD)
    human(gw)
    gw.ops.delete_session(CHILD)
    assert not gw.ops.session_exists(CHILD)
    assert gw.pending_system_events(MANAGER) == [] and gw.pending_system_events(PEER) == []
    dump = gw.store.dump()
    assert dump["session_watch_cursors"] == []
    assert all(CHILD not in row for row in dump["session_state_events"] + dump["session_state_heads"])


def test_r15_storage_failure_is_logged_counted_and_returns_none(gw, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise driver_error(gw)

    monkeypatch.setattr(gw.store, "append_event", broken)
    broke_alone(gw, monkeypatch)
    with caplog.at_level(logging.ERROR, logger="sessionstate"):
        assert human(gw) is None
    assert gw.ops.stats["append_failures"] == 1
    assert "human_direct_message" in caplog.text


def test_r16_occurred_at_is_clamped(gw, clock):
    human(gw, occurred_at=clock.now - 3 * DAY)
    human(gw, occurred_at=clock.now + 3 * DAY)
    human(gw, occurred_at=clock.now - 60)
    events = gw.session_status(CHILD, changes_since=1)["stateChanges"]["events"]
    from datetime import datetime, timezone

    def iso(t):
        return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")

    assert [e["occurredAt"] for e in events] == [iso(clock.now - DAY), iso(clock.now), iso(clock.now - 60)]


def test_unwatch_withdraws_the_notice(gw):
    human(gw)
    assert gw.unwatch(MANAGER, CHILD) is True
    assert gw.pending_system_events(MANAGER) == []
    assert gw.unwatch(MANAGER, CHILD) is False
    human(gw)
    assert gw.pending_system_events(MANAGER) == []


def test_record_events_is_one_transaction_with_notices_after_commit(gw, wakes):
    burst = [
        dict(session_key=CHILD, kind="human_direct_message", actor_type="human", summary=f"turn {i}")
        for i in range(5)
    ]
    seqs = gw.record_events(burst)
    assert seqs == list(range(2, 7))
    assert gw.pending_system_events(MANAGER) == [notice_text(CHILD, 1)]
    assert gw.ops.cursor_positions(MANAGER, CHILD) == Positions(1, 2, 6)


def test_record_events_validates_every_item_before_writing(gw):
    before = gw.store.dump()
    good = dict(session_key=CHILD, kind="compacted", actor_type="system", summary="ok")
    for bad in ({**good, "kind": "nope"}, {**good, "colour": "red"}, {**good, "session_key": "agent:main:ghost"}):
        with pytest.raises(Exception) as error:
            gw.record_events([good, bad])
        assert error.value.code in {"invalid_argument", "unknown_session"}
        assert gw.store.dump() == before


def test_record_events_storage_failure_rolls_back_the_burst(gw, monkeypatch):
    original = gw.store.append_event
    calls = []

    def fail_second(*args):
        calls.append(args)
        if len(calls) == 2:
            raise driver_error(gw)
        return original(*args)

    monkeypatch.setattr(gw.store, "append_event", fail_second)
    original_many = gw.store.append_and_read

    def fail_after_the_first(rows, watched):  # a burst appends as one call (one statement on PostgreSQL)
        original_many(rows[:1], watched)
        raise driver_error(gw)

    monkeypatch.setattr(gw.store, "append_and_read", fail_after_the_first)
    before = gw.store.dump()
    item = dict(session_key=CHILD, kind="human_direct_message", actor_type="human", summary="x")
    assert gw.record_events([item, item]) == [None, None]
    assert gw.store.dump() == before
    assert gw.pending_system_events(MANAGER) == []
    assert gw.ops.stats["append_failures"] == 2


def test_r9_transaction_defers_notices_to_the_outermost_commit(gw):
    with gw.transaction():
        human(gw)
        assert gw.pending_system_events(MANAGER) == []  # not yet committed
    assert gw.pending_system_events(MANAGER) == [notice_text(CHILD, 1)]


def test_r9_transaction_rollback_drops_events_and_notices(gw):
    before = gw.store.dump()
    with pytest.raises(RuntimeError):
        with gw.transaction():
            human(gw)
            raise RuntimeError("the extension's own write failed")
    assert gw.store.dump() == before
    assert gw.pending_system_events(MANAGER) == []
    human(gw)  # the gateway is usable afterwards and queues normally
    assert gw.pending_system_events(MANAGER) == [notice_text(CHILD, 1)]


def test_r14_delete_unlinks_children_so_a_reused_key_is_not_their_parent(gw):
    grandchild = "agent:main:subagent:grandchild"
    gw.create_session(grandchild, kind="subagent", parent=CHILD)
    gw.ops.delete_session(CHILD)
    assert gw.store.get_session(grandchild, "main").parent_key is None
    # Re-creating the deleted key as the grandchild's child must not close a parent cycle.
    gw.create_session(CHILD, kind="subagent", parent=grandchild)
    assert gw.store.get_session(CHILD, "main").parent_key == grandchild
    assert gw.store.get_session(grandchild, "main").parent_key is None


GLOBAL = "global"


def _failing_reads(gw, monkeypatch):
    """Every read that resolves a session fails as the store's storage would."""
    from sessionstate import StorageUnavailable

    def unavailable(*args, **kwargs):
        raise StorageUnavailable("the database is unreachable")

    monkeypatch.setattr(gw.store, "get_session", unavailable)
    monkeypatch.setattr(gw.store, "agents_with_session_key", unavailable)


@pytest.mark.parametrize("path", ["dedupe_key", "unqualified_key", "burst_with_dedupe_item"])
def test_r15_holds_on_every_record_path(gw, monkeypatch, caplog, path):
    """Issue 20: the paths that resolve the session through a read raised StorageUnavailable
    on a storage failure instead of returning None."""
    gw.create_session(GLOBAL)
    gw.watch(MANAGER, GLOBAL)
    before = gw.store.dump()
    failures = gw.ops.stats["append_failures"]
    _failing_reads(gw, monkeypatch)
    with caplog.at_level(logging.ERROR, logger="sessionstate"):
        if path == "dedupe_key":
            assert human(gw, dedupe_key="telegram:42") is None
        elif path == "unqualified_key":
            assert human(gw, key=GLOBAL) is None
        else:
            plain = dict(session_key=CHILD, kind="human_direct_message", actor_type="human", summary="a")
            assert gw.record_events([plain, {**plain, "dedupe_key": "telegram:43"}]) == [None, None]
    monkeypatch.undo()
    assert gw.ops.stats["append_failures"] == failures + (2 if path == "burst_with_dedupe_item" else 1)
    assert "failed; the turn goes on" in caplog.text
    assert gw.store.dump() == before
    assert gw.pending_system_events(MANAGER) == []


@pytest.mark.parametrize("item", [
    dict(session_key="agent:main:ghost", dedupe_key="d1"),
    dict(session_key="nobody"),
])
def test_an_unknown_session_still_raises_on_the_resolving_paths(gw, item):
    from sessionstate import UnknownSession

    before = gw.store.dump()
    event = dict(kind="human_direct_message", actor_type="human", summary="x", **item)
    with pytest.raises(UnknownSession):
        gw.record_event(**event)
    good = dict(session_key=CHILD, kind="compacted", actor_type="system", summary="ok")
    with pytest.raises(UnknownSession):
        gw.record_events([good, event])
    assert gw.store.dump() == before
