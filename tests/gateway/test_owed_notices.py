"""R18: a serving process queues the notices other processes owe its session, writing nothing."""

from __future__ import annotations

import logging

from sessionstate import Gateway, notice_text
from tests.gateway.helpers import BEHIND, CAUGHT_UP, WATCHER, read_only_url

W, T, U = "agent:main:main", "agent:main:subagent:t", "agent:main:subagent:u"


def human(gw: Gateway, target: str = T) -> int:
    sequence = gw.record_event(target, "human_direct_message", actor_type="human", summary="human message")
    assert sequence is not None
    return sequence


def setup(gw: Gateway) -> None:
    gw.create_session(W)
    gw.create_session(T, kind="subagent", parent=W)
    gw.create_session(U, kind="subagent", parent=W)


def test_owed_notices_are_queued_and_drain_exactly_like_the_recording_process(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with Gateway.open(url) as recorder, Gateway.open(url) as server, Gateway.open(f"sqlite:///{tmp_path / 'twin.db'}") as twin:
        for gw in (recorder, twin):
            setup(gw)
        server_seen = server.pending_system_events(W)
        assert server_seen == []
        for gw in (recorder, twin):
            frozen = human(gw)
            human(gw)  # more while the notice is pending: pending_with_more
        before = recorder.store.dump()
        assert server.ops.queue_owed_notices(W) == 1
        assert recorder.store.dump() == before  # read only: no trigger fired, nothing written
        assert server.pending_system_events(W) == recorder.pending_system_events(W) == twin.pending_system_events(W)
        assert server.drain_system_events(W) == twin.drain_system_events(W)
        # R8 held: the drain stopped at the frozen watermark and reopened one follow-up.
        assert server.ops.cursor_positions(W, T) == twin.ops.cursor_positions(W, T)
        assert server.pending_system_events(W) == twin.pending_system_events(W) == [notice_text(T, frozen)]


def test_queueing_owed_notices_is_idempotent_and_skips_queued_targets(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with Gateway.open(url) as recorder, Gateway.open(url) as server:
        setup(recorder)
        human(recorder)
        assert server.ops.queue_owed_notices(W) == 1
        assert server.ops.queue_owed_notices(W) == 0
        human(recorder, U)
        assert server.ops.queue_owed_notices(W) == 1  # only U's is new
        assert server.pending_system_events(W) == recorder.pending_system_events(W)
        assert [line.split('"')[1] for line in server.pending_system_events(W)] == [T, U]
        assert server.ops.queue_owed_notices(T) == 0  # a watcher with no pending pair


def test_a_sweep_would_fold_later_events_which_is_why_r18_reads_only(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with Gateway.open(url) as recorder, Gateway.open(url) as server:
        setup(recorder)
        human(recorder)
        latest = human(recorder)
        frozen = recorder.ops.cursor_positions(W, T)
        server.ops.queue_owed_notices(W)
        assert recorder.ops.cursor_positions(W, T) == frozen
        server.ops.startup_sweep()
        assert recorder.ops.cursor_positions(W, T).notified == latest != frozen.notified


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
