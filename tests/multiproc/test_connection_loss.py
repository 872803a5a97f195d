"""R22 and INV11 after a lost connection (issue 20): ``pg_terminate_backend`` of each of a
pumped gateway's connections while it is idle; the next notice for the watcher it serves is
still queued there and wakes it, soon, and so is the one after.

The main connection was the broken case: the sweep took the feed's notifications, then the
read on the dead connection raised, and what it had taken was gone with no resync.
"""

from __future__ import annotations

import time

import pytest

from sessionstate import Gateway
from sessionstate import notice_text
from tests.backends import admin_connection

W, T = "agent:a:main", "agent:b:main"
# Each session logs its own `created` first (R27): W is 1, T is 2, so a watch of T made after
# both starts at 2, and its first notice says changesSince 2.
SEED = 2
# A liveness bound, generous for a loaded machine (the issue asks for 1 s once the server
# is back; the pump retries a failed sweep after 0.25 s).
SERVED_WITHIN_SECONDS = 2.5


def _backend_pid(gateway: Gateway, connection: str) -> int:
    if connection == "main":
        return gateway.store.backend_pid()
    feed = gateway.cluster.feed
    pid = feed.backend_pid() if feed is not None else None
    assert pid is not None
    return pid


def _terminate(pid: int) -> None:
    with admin_connection() as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        deadline = time.monotonic() + 10
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline, "the backend did not end"
            time.sleep(0.01)


def _await_notice(serving: Gateway, wakes: list[str] | None, text: str) -> float:
    """Seconds until ``text`` is queued in ``serving`` (and the watcher woken, given ``wakes``)."""
    began = time.monotonic()
    while not (serving.pending_system_events(W) == [text] and (wakes is None or W in wakes)):
        if time.monotonic() - began > 30:  # a stuck pump, not a timing assertion
            break
        time.sleep(0.01)
    return time.monotonic() - began


@pytest.mark.parametrize("connection", ["main", "listener"])
def test_a_pumped_gateway_queues_and_wakes_after_losing_a_connection(pg_url, connection):
    with Gateway.open(pg_url) as setup:
        setup.create_session(W)
        setup.create_session(T)
        setup.watch(W, T)
    wakes: list[str] = []
    with Gateway.open(pg_url, serve=[]) as recorder, \
            Gateway.open(pg_url, serve=[], pump=True, on_wake=lambda w, r: wakes.append(w)) as serving:
        serving.cluster.attach(W)
        _terminate(_backend_pid(serving, connection))
        first = recorder.record_event(T, "human_direct_message", actor_type="human", summary="one")
        assert first is not None
        took = _await_notice(serving, wakes, notice_text(T, SEED))
        assert serving.pending_system_events(W) == [notice_text(T, SEED)] and W in wakes
        assert took < SERVED_WITHIN_SECONDS, f"queued {took:.2f} s after the commit"
        # Healed for good: the next episode is queued too (its wake waits for R23's window).
        assert serving.drain_system_events(W) == [notice_text(T, SEED)]
        second = recorder.record_event(T, "human_direct_message", actor_type="human", summary="two")
        assert second is not None
        _await_notice(serving, None, notice_text(T, first))
        assert serving.pending_system_events(W) == [notice_text(T, first)]


def test_a_sweep_that_fails_on_a_dead_main_connection_is_redone_in_full(pg_url):
    """R22 without the pump: the failed sweep had taken the notifications; the next one
    resynchronises instead of finding nothing."""
    from sessionstate.errors import StorageUnavailable

    with Gateway.open(pg_url) as setup:
        setup.create_session(W)
        setup.create_session(T)
        setup.watch(W, T)
    with Gateway.open(pg_url, serve=[]) as recorder, Gateway.open(pg_url) as server:
        with server.locked():
            server.cluster.register()
        _terminate(_backend_pid(server, "main"))
        assert recorder.record_event(T, "human_direct_message", actor_type="human", summary="x") is not None
        with pytest.raises(StorageUnavailable):
            server.cluster.sweep()
        assert server.cluster.sweep() == 1
        assert server.pending_system_events(W) == [notice_text(T, SEED)]
