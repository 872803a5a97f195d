"""Issue 20 on a real PostgreSQL server restarted with ``pg_ctl -m immediate``: nothing
acknowledged is lost or reissued by default, whatever the server's ``synchronous_commit``,
and a pumped gateway's feed is live again soon after the server is back.

The server is the test's own (``trials.pgserver``), tuned ``fsync = off`` and
``synchronous_commit = off`` as the project's test servers are: with those, the gateway's
default used to lose acknowledged events and reissue their sequences on every restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from sessionstate import Gateway
from sessionstate import notice_text
from trials.pgserver import ThrowawayServer, server_binaries
from tests.backends import need_psycopg, skip_or_fail_without_postgres

W, T = "agent:a:main", "agent:b:main"
# A liveness bound, generous for a loaded machine: the pump used to sleep a whole 5 s
# heartbeat after the first failed sweep on the stale main connection.
FEED_BACK_SECONDS = 2.5


@pytest.fixture(scope="module")
def server() -> Iterator[ThrowawayServer]:
    if server_binaries() is None:
        skip_or_fail_without_postgres("no PostgreSQL server binaries (apt-get install postgresql)")
    need_psycopg()
    with ThrowawayServer() as started:
        yield started


def test_an_immediate_restart_under_load_loses_reissues_and_repeats_nothing(server):
    from trials.restart import run_restart_trials

    report = run_restart_trials(2, seed=20)
    assert report.failures == []
    assert report.trials == 2 and report.acknowledged > 0 and report.delivered > 0


def test_the_default_commits_durably_on_a_server_tuned_not_to(server):
    with Gateway.open(server.url) as gw:
        assert gw.store.setting("synchronous_commit") == "on"
    with Gateway.open(server.url, synchronous="OFF") as gw:  # the faster mode, by name
        assert gw.store.setting("synchronous_commit") == "off"


def test_an_idle_pumped_gateway_serves_again_soon_after_a_restart(server):
    with Gateway.open(server.url) as gw:
        for key in (W, T):
            if not gw.ops.session_exists(key):
                gw.create_session(key)
        gw.watch(W, T)
        gw.drain_system_events(W)
    with Gateway.open(server.url, serve=[], pump=True) as serving:
        serving.cluster.attach(W)
        serving.drain_system_events(W)
        back = server.restart_immediately()
        with Gateway.open(server.url, serve=[]) as recorder:
            sequence = recorder.record_event(T, "human_direct_message", actor_type="human", summary="after")
            assert sequence is not None
            recorded = time.monotonic()
            while not serving.pending_system_events(W) and time.monotonic() - recorded < 30:
                time.sleep(0.01)
            live = time.monotonic()
            last_seen = recorder.ops.cursor_positions(W, T).last_seen
        assert serving.pending_system_events(W) == [notice_text(T, last_seen)]
        assert live - back < FEED_BACK_SECONDS, f"the feed was live {live - back:.2f} s after the server"
