"""R19, R20, R22 inside one test process: two gateways on one database (each backend), sweeps
run by hand (``sweep_changes``) so every step is deterministic; the pump thread has its own
test. Cluster in detail (services/cluster.py), two gateways on one SQLite file registered by hand
(``cluster.register``, as the replays do) so every sweep and heartbeat is a step of the test:
the refusals' words, ``serve`` and ``attached``, a claim's effect on this process's queue before
any sweep, an attach that re-queues the notices and keeps the plain lines, a server declared
dead that heartbeats again, the sweep's counts, and the sweep's view of claims."""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import time

import pytest

from sessionstate import Gateway, InvalidArgument, UnknownSession, notice_text
from sessionstate.store import serving as serving_sql
from tests.gateway.helpers import PLAIN, WATCHER, owing_watcher
from tests.helpers import Clock
from tests.helpers import SEED, W2, T, W, human, populate


@pytest.fixture
def url(db_url):
    return populate(db_url)


@pytest.fixture
def sqlite_url(tmp_path):
    return populate(f"sqlite:///{tmp_path / 'state.db'}")


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


LOST_TRACK_WARNING = "change feed lost track: resynchronising every watcher"


@pytest.fixture
def path(tmp_path):
    populate(f"sqlite:///{tmp_path / 'state.db'}")
    return tmp_path / "state.db"


def opened(path, **options) -> Gateway:
    """A gateway that is a server without the pump thread: the test sweeps and heartbeats."""
    gw = Gateway.open(f"sqlite:///{path}", **options)
    gw.cluster.register()
    return gw


def server_id(gw: Gateway) -> str:
    sid = gw.ops.diagnostics().server_id
    assert sid is not None
    return sid


def declare_dead(by: Gateway, victim: Gateway) -> None:
    """What another process's heartbeat does to a server whose lease ran out."""
    with by.locked(), by.store.transaction():
        by.store.serving.remove_server(server_id(victim), time.time())


def refusal(call) -> str:
    with pytest.raises(InvalidArgument) as refused:
        call()
    return str(refused.value)


def test_serve_patterns_are_refused_in_words_that_say_what_is_wanted(path):
    url = f"sqlite:///{path}"
    assert refusal(lambda: Gateway.open(url, serve="*")) == "serve must be a list of session key patterns"
    assert refusal(lambda: Gateway.open(url, serve=[3])) == (
        "serve pattern must be a non-empty printable string, not int"
    )
    # A non-printable pattern is quoted, cut at 80 characters (the 81st is the bad one).
    long_bad = "p" * 80 + "\n"
    assert refusal(lambda: Gateway.open(url, serve=[long_bad])) == (
        f"serve pattern {'p' * 80!r} must be a non-empty printable string"
    )


def test_serve_replaces_the_patterns_and_refuses_what_is_not_a_list(path):
    with Gateway.open(f"sqlite:///{path}", serve=["agent:a:*"]) as gw:
        assert gw.cluster.serves(W) and not gw.cluster.serves(W2)
        gw.cluster.serve(["agent:c:*"])
        assert not gw.cluster.serves(W) and gw.cluster.serves(W2)
        with pytest.raises(InvalidArgument):
            gw.cluster.serve("agent:a:*")
        assert gw.cluster.serves(W2)  # a refused call changes nothing


def test_attach_without_the_pump_says_how_to_get_it(path):
    with Gateway.open(f"sqlite:///{path}") as gw:
        # `pump=True` is the keyword to pass, written as Python spells it.
        assert refusal(lambda: gw.cluster.attach(W)) == (
            "attach needs the change pump: open the gateway with pump=True"
        )


def test_an_attach_queues_the_owed_notice_and_a_detach_withdraws_it_at_once(path):
    with opened(path, serve=[]) as gw:
        human(gw)  # W owes a notice, not queued: nobody serves W here
        assert gw.pending_system_events(W) == []
        assert gw.cluster.attach(W) == 1
        assert gw.cluster.attached() == [W]
        assert gw.pending_system_events(W) == [notice_text(T, SEED)]
        assert gw.cluster.detach(W)
        assert gw.cluster.attached() == []
        assert gw.pending_system_events(W) == []  # not served here any more


def test_a_process_that_attaches_and_detaches_again_serves_by_its_patterns_before_any_sweep(path):
    with opened(path) as a, opened(path) as b:
        b.cluster.attach(W)
        human(a)
        a.cluster.sweep()
        assert not a.cluster.serves(W) and a.pending_system_events(W) == []
        a.cluster.attach(W)
        a.cluster.detach(W)
        assert a.cluster.serves(W)  # no claim left anywhere: its pattern decides
        assert a.pending_system_events(W) == [notice_text(T, SEED)]


def test_a_line_held_from_an_earlier_spell_wakes_again_when_the_watcher_is_attached(path):
    clock = Clock()
    wakes: list[str] = []
    with opened(path, clock=clock, serve=[W], on_wake=lambda w, r: wakes.append(w)) as a, \
         opened(path, clock=clock) as b:
        human(a)
        assert wakes == [W] and a.pending_system_events(W) == [notice_text(T, SEED)]
        b.cluster.attach(W)  # a has not swept: it still holds its line
        clock.now += 25  # past the wake window
        a.cluster.attach(W)
        # The line re-entered now: the process now serving W wakes it for the notice.
        assert wakes == [W, W]
        assert a.pending_system_events(W) == [notice_text(T, SEED)]


def servers_row(path, sid: str) -> tuple[int, str, float, float]:
    with sqlite3.connect(path) as db:
        row = db.execute(
            "SELECT pid, host, started_at, heartbeat_at FROM session_servers WHERE server_id = ?", (sid,)
        ).fetchone()
    assert row is not None, sid
    return row


def claims_rows(path) -> list[tuple[str, str, float]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT session_key, server_id, claimed_at FROM session_claims").fetchall()


def test_a_server_declared_dead_that_heartbeats_again_registers_anew_with_its_claims(path):
    clock = Clock()
    with opened(path, serve=[], clock=clock) as a, opened(path) as b:
        a.cluster.attach(W)
        declare_dead(b, a)
        assert claims_rows(path) == []
        before = time.time()
        a.cluster.heartbeat()
        pid, host, started, beat = servers_row(path, server_id(a))
        assert (pid, host) == (os.getpid(), socket.gethostname())
        assert before <= started == beat <= time.time()
        assert claims_rows(path) == [(W, server_id(a), clock.now)]
        assert a.cluster.attached() == [W]


def test_a_heartbeat_releases_only_the_servers_whose_lease_ran_out_and_names_them(path, caplog):
    with opened(path) as a, opened(path) as b:
        b.cluster.attach(W)
        a.cluster.heartbeat()
        assert {key: sid for key, sid, _ in claims_rows(path)} == {W: server_id(b)}  # b is alive
        with b.locked(), b.store.transaction():
            b.store.serving.heartbeat(server_id(b), 0.0)  # b stalls past its lease
        with caplog.at_level(logging.WARNING, logger="sessionstate"):
            a.cluster.heartbeat()
        assert claims_rows(path) == []
        assert [r.getMessage() for r in caplog.records] == [
            f"gateway server {server_id(b)} missed its lease; its sessions are released"
        ]


def test_a_sweep_counts_what_it_queued(path):
    with opened(path, serve=[]) as recorder, opened(path) as a, opened(path) as b:
        b.cluster.attach(W2)
        human(recorder)
        assert a.cluster.sweep() == 1  # W; W2 is b's
        recorder.drain_system_events(W)  # W acks, and a follow-up turns it pending again
        follow_up = human(recorder)
        b.cluster.detach(W2)  # W2 falls back to a's patterns
        assert a.cluster.sweep() == 2
        assert a.pending_system_events(W) == [notice_text(T, follow_up - 1)]
        assert a.pending_system_events(W2) == [notice_text(T, SEED)]


def test_the_first_sweep_is_a_full_one_and_counts_every_watcher_it_queued_for(path):
    url = f"sqlite:///{path}"
    with Gateway.open(url) as gw, Gateway.open(url, serve=[]) as recorder:
        human(recorder)  # after gw's startup sweep, before its first sweep opened its feed
        assert gw.cluster.sweeps == 0
        assert gw.cluster.sweep() == 2  # W and W2, both owed
        assert gw.cluster.sweeps == 1
        assert gw.cluster.sweep() == 0
        assert gw.cluster.sweeps == 2


def test_a_resynchronising_sweep_reads_whose_claims_are_whose(path, caplog):
    with opened(path) as a, opened(path) as b:
        a.cluster.attach(W)
        b.cluster.attach(W2)
        a.cluster.sweep()
        a.cluster.feed.lost()
        with caplog.at_level(logging.WARNING, logger="sessionstate"):
            a.cluster.sweep()
        assert [r.getMessage() for r in caplog.records] == [LOST_TRACK_WARNING]
        assert a.cluster.attached() == [W]
        assert a.cluster.serves(W) and not a.cluster.serves(W2)


def test_a_sweep_keeps_this_process_own_claim(path):
    with opened(path, serve=[]) as a:
        a.cluster.attach(W)
        a.cluster.sweep()  # the feed reports a's own claim too
        assert a.cluster.attached() == [W] and a.cluster.serves(W)


def test_a_claim_lost_to_a_dead_declaration_is_dropped_by_the_sweep(path):
    with opened(path, serve=[]) as a, opened(path) as b:
        a.cluster.attach(W)
        declare_dead(b, a)
        a.cluster.sweep()
        assert a.cluster.attached() == [] and not a.cluster.serves(W)


def test_a_server_declared_dead_takes_back_its_claims_even_when_its_sweep_saw_them_released_first(path):
    # R20: a stalled process resumes wherever its pump stood; a sweep that runs before the
    # heartbeat stops serving the released claims, and the heartbeat still takes them back.
    with opened(path, serve=[]) as a, opened(path, serve=[]) as b:
        a.cluster.attach(W)
        a.cluster.attach(W2)
        declare_dead(b, a)
        b.cluster.attach(W2)  # taken meanwhile: it stays with b
        a.cluster.sweep()
        assert a.cluster.attached() == [] and not a.cluster.serves(W)
        a.cluster.heartbeat()
        assert a.store.serving.claimant(W) == (server_id(a), 1)
        assert a.store.serving.claimant(W2) == (server_id(b), 1)
        assert a.cluster.attached() == [W] and a.cluster.serves(W) and not a.cluster.serves(W2)
        declare_dead(b, a)  # once taken back, a later removal is a new spell: the same again
        a.cluster.sweep()
        a.cluster.heartbeat()
        assert a.cluster.attached() == [W]


def test_a_take_back_whose_heartbeat_rolled_back_is_made_by_the_next_heartbeat(path, monkeypatch):
    # R20 with a rollback: the heartbeat that registered anew fails before its commit; the
    # claims the sweep saw lost stay remembered, and the next heartbeat of the same gateway
    # commits the take-back.
    from sessionstate import StorageUnavailable

    with opened(path, serve=[]) as a, opened(path, serve=[]) as b:
        a.cluster.attach(W)
        declare_dead(b, a)
        a.cluster.sweep()
        claim = a.store.serving.claim

        def refused(*args, **kwargs):
            raise StorageUnavailable("the store went away")

        monkeypatch.setattr(a.store.serving, "claim", refused)  # after it registered anew
        with pytest.raises(StorageUnavailable):
            a.cluster.heartbeat()
        assert a.store.serving.claimant(W) is None and a.cluster.attached() == []
        monkeypatch.setattr(a.store.serving, "claim", claim)
        a.cluster.heartbeat()
        assert a.store.serving.claimant(W) == (server_id(a), 1)
        assert a.cluster.attached() == [W] and a.cluster.serves(W)


def test_a_claim_released_while_its_server_lives_is_not_taken_back_later(path):
    # Only a removal of this server's row releases its claims without a detach; a heartbeat
    # that finds the row in place forgets what the sweep saw released.
    with opened(path, serve=[]) as a, opened(path, serve=[]) as b:
        a.cluster.attach(W)
        with b.locked(), b.store.transaction():
            b.store.serving.unclaim(W, server_id(a), time.time())
        a.cluster.sweep()
        a.cluster.heartbeat()
        declare_dead(b, a)
        a.cluster.heartbeat()
        assert a.store.serving.claimant(W) is None and a.cluster.attached() == []


def test_a_sweep_says_which_server_took_a_session_this_process_held(path, caplog):
    with opened(path) as a, opened(path) as b:
        a.cluster.attach(W)
        b.cluster.attach(W)
        b.cluster.attach(W2)  # never a's: nothing to say about it
        with caplog.at_level(logging.INFO, logger="sessionstate"):
            a.cluster.sweep()
        assert [r.getMessage() for r in caplog.records] == [
            f"session {W} was attached by server {server_id(b)} (generation 2)"
        ]
        assert a.cluster.attached() == [] and not a.cluster.serves(W)


def test_another_process_event_re_wakes_a_pending_watcher_unless_the_watcher_made_it(path):
    clock = Clock()
    wakes: list[str] = []
    url = f"sqlite:///{path}"
    with Gateway.open(url, clock=clock, serve=[]) as recorder, \
         Gateway.open(url, clock=clock, serve=[W], on_wake=lambda w, r: wakes.append(w)) as server:
        human(recorder)
        server.cluster.sweep()
        assert wakes == [W]
        clock.now += 25  # past the window
        assert recorder.record_event(T, "human_direct_message", actor_type="human", summary="me", actor_id=W)
        server.cluster.sweep()
        assert wakes == [W]  # W's own event is not material to W (R2)
        human(recorder)
        server.cluster.sweep()
        assert wakes == [W, W]


def test_every_sweep_of_an_in_memory_gateway_is_a_full_one_and_counted():
    with Gateway.open("sqlite://") as gw:  # no change feed on an in-memory database
        gw.cluster.sweep()
        gw.cluster.sweep()
        assert gw.cluster.feed is None and gw.cluster.sweeps == 2


def test_a_closed_gateway_reports_no_server_id(path):
    gw = opened(path)
    assert gw.ops.diagnostics().server_id is not None
    gw.close()
    assert gw.ops.diagnostics().server_id is None


def test_a_server_declared_dead_does_not_take_back_a_session_attached_elsewhere_since(path):
    # R20: the last attach wins, also over a stalled server that comes back.
    with opened(path, serve=[]) as a, opened(path, serve=[]) as b:
        a.cluster.attach(W)
        a.cluster.attach(W2)
        declare_dead(b, a)
        assert b.cluster.attach(W) == 1  # b attached W last; nobody took W2
        a.cluster.heartbeat()
        assert a.store.serving.claimant(W) == (server_id(b), 1)
        assert a.store.serving.claimant(W2) == (server_id(a), 1)
        a.cluster.sweep()
        b.cluster.sweep()
        assert (a.cluster.serves(W), b.cluster.serves(W)) == (False, True)
        assert a.cluster.attached() == [W2]


def test_an_attach_requeues_the_notices_and_keeps_the_plain_lines(db_url):
    with Gateway.open(db_url, pump=True) as gw:
        notice = owing_watcher(gw)
        gw.cluster.attach(WATCHER)
        assert gw.pending_system_events(WATCHER) == [PLAIN, notice]
