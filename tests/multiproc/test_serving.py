"""R19, R20, R22 inside one test process: two gateways on one database (each backend), sweeps
run by hand (``sweep_changes``) so every step is deterministic; the pump thread has its own
test."""

from __future__ import annotations

import time

import pytest

from sessionstate import Gateway, InvalidArgument, UnknownSession
from sessionstate import notice_text
from sessionstate.store import serving as serving_sql

W, T, W2 = "agent:a:main", "agent:b:main", "agent:c:main"
# Each session logs its own `created` first (R27): W is 1, T is 2, so a watch of T made after
# both starts at 2, and its first notice says changesSince 2.
SEED = 2


def populate(url: str) -> str:
    with Gateway.open(url) as gw:
        for key in (W, T, W2):
            gw.create_session(key)
        gw.watch(W, T)
        gw.watch(W2, T)
        assert gw.ops.cursor_positions(W, T).last_seen == SEED
    return url


@pytest.fixture
def url(db_url):
    return populate(db_url)


@pytest.fixture
def sqlite_url(tmp_path):
    return populate(f"sqlite:///{tmp_path / 'state.db'}")


def human(gw: Gateway) -> int:
    sequence = gw.record_event(T, "human_direct_message", actor_type="human", summary="hi")
    assert sequence is not None
    return sequence


def test_a_process_queues_only_for_the_sessions_it_serves(url):
    with Gateway.open(url, serve=[]) as recorder, Gateway.open(url, serve=["agent:a:*"], pump=False) as server:
        assert not recorder.cluster.serves(W) and server.cluster.serves(W) and not server.cluster.serves(W2)
        human(recorder)
        assert recorder.pending_system_events(W) == [] and recorder.pending_system_events(W2) == []
        server.cluster.sweep()
        assert server.pending_system_events(W) == [notice_text(T, SEED)]
        assert server.pending_system_events(W2) == []  # not served here


def test_the_sweep_withdraws_a_notice_acknowledged_elsewhere(url):
    with Gateway.open(url, serve=[]) as other, Gateway.open(url) as server:
        human(other)
        server.cluster.sweep()
        assert server.pending_system_events(W) == [notice_text(T, SEED)]
        assert other.drain_system_events(W) == [notice_text(T, SEED)]  # R21: any process drains
        server.cluster.sweep()
        assert server.pending_system_events(W) == []  # INV4 in the serving process
        assert server.drain_system_events(W) == []


def test_the_sweep_queues_a_follow_up_made_by_another_process(url):
    with Gateway.open(url, serve=[]) as other, Gateway.open(url) as server:
        first = human(other)
        server.cluster.sweep()
        human(other)  # pending: raises M only
        assert other.drain_system_events(W) == [notice_text(T, SEED)]  # acks to `first`, follow-up
        server.cluster.sweep()
        assert server.pending_system_events(W) == [notice_text(T, first)]


def test_last_attach_wins_and_the_loser_stops_serving(url):
    with Gateway.open(url, pump=True) as a, Gateway.open(url, pump=True) as b:
        assert a.cluster.attach(W) == 1
        human(a)
        assert a.pending_system_events(W) == [notice_text(T, SEED)]
        b.cluster.sweep()
        assert not b.cluster.serves(W) and b.pending_system_events(W) == []
        assert b.cluster.attach(W) == 2  # the last attach wins; b queues the owed notice (R18)
        assert b.pending_system_events(W) == [notice_text(T, SEED)]
        a.cluster.sweep()
        assert not a.cluster.serves(W) and a.pending_system_events(W) == []
        assert b.drain_system_events(W) == [notice_text(T, SEED)]
        assert b.cluster.detach(W) and not b.cluster.detach(W)
        a.cluster.sweep()
        assert a.cluster.serves(W)  # back to its pattern


def test_a_crashed_servers_sessions_are_taken_over(url):
    with Gateway.open(url, pump=True) as a, Gateway.open(url, pump=True) as b:
        b.cluster.attach(W)
        a.cluster.sweep()
        human(a)
        assert a.pending_system_events(W) == []
        # b stops heartbeating (as a crashed process does): its heartbeat ages past the lease.
        with a.locked(), a.store.transaction():
            assert a.store.serving.heartbeat(b.ops.diagnostics().server_id, 0.0)
        with a.locked():
            a.cluster.heartbeat()  # finds b dead and releases its claims
        a.cluster.sweep()
        assert a.cluster.serves(W)
        assert a.pending_system_events(W) == [notice_text(T, SEED)]


def test_a_sweep_behind_a_trimmed_change_log_resynchronises(sqlite_url, monkeypatch):
    url = sqlite_url  # the change log is SQLite's (PostgreSQL notifies instead)
    monkeypatch.setattr(serving_sql, "CHANGE_LOG_KEEP", 2)
    monkeypatch.setattr(serving_sql, "CHANGE_LOG_TRIM_EVERY", 1)
    with Gateway.open(url, serve=[]) as other, Gateway.open(url, pump=True) as server:
        first = human(other)
        human(other)
        server.cluster.sweep()
        assert server.pending_system_events(W) == [notice_text(T, SEED)]
        other.drain_system_events(W)   # follow-up since `first`
        other.watch(W, W2)             # more change rows: the ack's row is trimmed
        other.unwatch(W, W2)
        other.watch(W, W2)
        server.cluster.sweep()
        assert server.pending_system_events(W) == [notice_text(T, first)]


def test_attach_checks_its_input(url):
    with Gateway.open(url) as no_pump, Gateway.open(url, pump=True) as gw:
        with pytest.raises(InvalidArgument):
            no_pump.cluster.attach(W)
        with pytest.raises(UnknownSession):
            gw.cluster.attach("agent:z:main")
        with pytest.raises(InvalidArgument):
            gw.cluster.attach("")
    for bad in ("*", [""], [3], None):
        with pytest.raises(InvalidArgument):
            Gateway.open(url, serve=bad)
    with pytest.raises(InvalidArgument):
        Gateway.open("sqlite://", pump=True)


def test_closing_drops_the_server_and_its_claims(url):
    with Gateway.open(url, pump=True) as gw:
        gw.cluster.attach(W)
        with gw.locked():
            assert gw.store.serving.all_claims() == {W: gw.ops.diagnostics().server_id}
            assert gw.store.serving.dead_servers(float("inf")) == [gw.ops.diagnostics().server_id]
    with Gateway.open(url) as gw, gw.locked():
        assert gw.store.serving.all_claims() == {}
        assert gw.store.serving.dead_servers(float("inf")) == []


def test_the_pump_thread_brings_another_process_notice(url):
    with Gateway.open(url, serve=[]) as recorder, Gateway.open(url, pump=True) as server:
        server.cluster.attach(W)
        human(recorder)
        deadline = time.monotonic() + 30  # a bound for a stuck pump, not a timing assertion
        while not server.pending_system_events(W) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.pending_system_events(W) == [notice_text(T, SEED)]
        assert server._pump.changes >= 1


LOST_TRACK = "change feed lost track"


@pytest.mark.parametrize("pump", [False, True], ids=["swept-by-hand", "pumped"])
def test_a_first_open_on_a_new_database_does_not_warn_of_a_lost_feed(db_url, caplog, pump):
    # The first sweep of a gateway is a full one by design (it opens the feed): nothing was lost.
    with caplog.at_level("WARNING", logger="sessionstate"):
        with Gateway.open(db_url, pump=pump) as gw:
            gw.create_session(W)
            gw.cluster.sweep()
            gw.cluster.sweep()
    assert LOST_TRACK not in caplog.text


def test_a_feed_that_really_lost_track_still_warns(url, caplog):
    with Gateway.open(url) as gw:
        gw.cluster.sweep()  # opens the feed
        gw.cluster.feed.lost()
        with caplog.at_level("WARNING", logger="sessionstate"):
            gw.cluster.sweep()
    assert LOST_TRACK in caplog.text
