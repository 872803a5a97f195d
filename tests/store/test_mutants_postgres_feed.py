"""The PostgreSQL change feed (R22) beyond tests/store/test_postgres_feed.py: what ``take`` makes
of notifications it cannot use, which cursors it reports frozen, how ``wait`` and ``sync`` behave
on an idle, a stopped and a failing listening connection, and that a closed feed lets its
connection go. Written for the survivors of a mutmut run (docs/mutants/store-postgres.md).

Notifications are sent with ``pg_notify`` from a connection of their own, the way another
server's commit reaches the feed."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from sessionstate.errors import StorageUnavailable
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import Store, open_store
from sessionstate.store.postgres_feed import PostgresChangeFeed
from sessionstate.store.records import ChangeSet, PendingCursor
from tests.backends import admin_connection

KINDS = tuple(NOTIFYING_KINDS)
T = "agent:a:target"


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    opened = open_store(pg_url, notifying_kinds=NOTIFYING_KINDS)
    yield opened
    opened.close()


@pytest.fixture
def feed(store: Any) -> Iterator[PostgresChangeFeed]:
    opened = store.open_change_feed(KINDS)
    yield opened
    opened.close()


def notify(store: Any, *payloads: str) -> None:
    """Another server's commits: one notification each, in order, on the store's channel."""
    with admin_connection() as other:
        for payload in payloads:
            other.execute("SELECT pg_notify(%s, %s)", (store.channel, payload))


def terminate(pid: int) -> None:
    with admin_connection() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def listening_pids() -> set[int]:
    with admin_connection() as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %%' AND pid <> pg_backend_pid()"
        ).fetchall()
    return {int(row[0]) for row in rows}


# -- take: what cannot be used becomes a resynchronisation, the rest is kept ---------------------


def test_an_unreadable_notification_resynchronises_and_keeps_the_readable_ones(store, feed, caplog):
    notify(store, "not json", '{"w":["agent:a:w1"]}', '{"e":[["agent:a:t","a",null,4]]}')
    feed.sync()
    with caplog.at_level(logging.WARNING, logger="sessionstate"):
        changes = feed.take()
    # Frozen cursors are not read when everything is brought in step anyway.
    assert changes == ChangeSet([], ["agent:a:w1"], [("agent:a:t", "a", None)], True)
    assert "change feed: an unreadable notification; resynchronising" in caplog.messages


@pytest.mark.parametrize("odd", ['{"r":1}', "[1]", "7"], ids=["resync-payload", "a-list", "a-number"])
def test_a_resync_or_a_notification_that_is_no_object_resynchronises(store, feed, odd):
    notify(store, odd, '{"w":["agent:a:w1"]}')
    feed.sync()
    assert feed.take() == ChangeSet([], ["agent:a:w1"], [], True)
    notify(store, '{"w":["agent:a:w2"]}')  # and only that take: the next is in step again
    feed.sync()
    assert feed.take() == ChangeSet([], ["agent:a:w2"], [], False)


def put_pending(store: Any, cursors: dict[str, int]) -> None:
    """Pending cursors on T (nothing seen, notified at the given sequence): what freezes leave."""
    with store.transaction():
        store.put_cursors(T, "a", [(w, (0, n, n)) for w, n in cursors.items()], 1.0)


def test_an_event_reports_the_cursors_frozen_at_or_after_its_sequence_only(store, feed):
    """A freeze sets N to its event's sequence: a cursor frozen by an earlier event (N below
    it) is not this event's doing."""
    put_pending(store, {"agent:a:early": 4, "agent:a:now": 5})
    notify(store, f'{{"e":[["{T}","a",null,5]]}}')
    feed.sync()
    assert feed.take().frozen == [PendingCursor("agent:a:now", T, "a", 0)]


def test_several_events_on_one_target_report_what_the_first_of_them_froze_onward(store, feed):
    put_pending(store, {"agent:a:first": 4, "agent:a:later": 6, "agent:a:before": 3})
    notify(store, f'{{"e":[["{T}","a",null,4]]}}', f'{{"e":[["{T}","a","agent:a:x",6]]}}')
    feed.sync()
    changes = feed.take()
    assert changes.frozen == [PendingCursor("agent:a:first", T, "a", 0), PendingCursor("agent:a:later", T, "a", 0)]
    assert changes.material == [(T, "a", None), (T, "a", "agent:a:x")]


# -- wait ---------------------------------------------------------------------------------------


def timed_wait(feed: PostgresChangeFeed, timeout: float) -> tuple[bool | None, float]:
    """``feed.wait(timeout)`` on a thread, bounded: a wait that never returns is interrupted
    (and reported as ``None``) instead of hanging the test."""
    answer: list[bool] = []
    started = time.monotonic()
    waiter = threading.Thread(target=lambda: answer.append(feed.wait(timeout)), daemon=True)
    waiter.start()
    waiter.join(5)
    if waiter.is_alive():
        feed.interrupt()
        waiter.join(5)
        return None, time.monotonic() - started
    return answer[0], time.monotonic() - started


def test_an_idle_wait_returns_nothing_once_its_timeout_is_over(feed):
    answer, took = timed_wait(feed, 0.05)
    assert answer is False
    assert took < 0.9  # its timeout, not a second of its own
    assert feed.reconnects == 0 and feed.take() == ChangeSet([], [], [], False)


def test_a_wait_returns_a_notification_and_take_reads_it(store, feed):
    notify(store, '{"w":["agent:a:w1"]}')
    assert timed_wait(feed, 5)[0] is True
    assert feed.take() == ChangeSet([], ["agent:a:w1"], [], False)


def test_another_servers_sync_marker_is_no_change_and_a_collected_one_ends_a_wait_at_once(store, feed):
    other = store.open_change_feed(KINDS)
    try:
        other.sync()  # its marker reaches this feed too
        feed.sync()  # collects the other's marker on the way to its own
        answer, took = timed_wait(feed, 3)
        assert answer is True and took < 2  # something was collected: no waiting for more
        assert feed.take() == ChangeSet([], [], [], False)
    finally:
        other.close()


def test_an_interrupted_feed_reports_nothing_more(store, feed):
    notify(store, '{"w":["agent:a:w1"]}')
    feed.sync()  # collected, not taken
    feed.interrupt()
    assert feed.wait(5) is False


def test_a_closed_feed_lets_its_connection_go_and_never_listens_again(feed):
    pid = feed.backend_pid()
    assert pid is not None and pid in listening_pids()
    feed.close()
    assert feed.backend_pid() is None
    assert pid not in listening_pids()
    assert feed.wait(0.05) is False and feed.reconnects == 0
    assert pid not in listening_pids() and not listening_pids()


def test_a_wait_on_a_lost_connection_reconnects_logs_it_and_resynchronises(store, feed, caplog):
    for round_ in (1, 2):
        terminate(feed.backend_pid())
        with caplog.at_level(logging.WARNING, logger="sessionstate"):
            # The first waits find the connection gone (each at most one short pause), the next
            # listens again; a bound, not a timing assertion.
            deadline = time.monotonic() + 10
            while not feed.wait(0.5) and time.monotonic() < deadline:
                pass
        assert feed.reconnects == round_
        assert feed.take() == ChangeSet([], [], [], True)
    failed = [m for m in caplog.messages if m.startswith("change feed: the listening connection failed (")]
    assert failed and all(m.endswith("); reconnecting") and "server closed the connection" in m for m in failed)
    assert caplog.messages.count(f"change feed: listening again on {store.channel}; resynchronising") == 2


# -- sync on a failing listening connection ------------------------------------------------------


class DroppedAtEveryNotify:
    """A listening connection whose server drops it whenever it sends a notification: what a
    server restarting in a loop looks like to the feed."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith("NOTIFY"):
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_a_sync_that_fails_twice_says_the_server_is_unavailable_and_the_next_take_resynchronises(store):
    feed = PostgresChangeFeed(lambda: DroppedAtEveryNotify(admin_connection()), store.channel, store.serving,
                              store.storage_error)
    try:
        with pytest.raises(StorageUnavailable, match="PostgreSQL unavailable: server closed the connection") as raised:
            feed.sync()
        assert raised.value.retry_safe
        assert feed.reconnects == 1  # tried once more on a new connection
        assert feed.take().resync is True
    finally:
        feed.close()


def test_a_sync_that_cannot_listen_again_names_the_channel(pg_url, store, feed, monkeypatch):
    gone = make_url(pg_url).update_query_dict({"host": "/nonexistent-sessionstate"})
    monkeypatch.setattr(store, "_engine", create_engine(gone))  # the server stays away
    terminate(feed.backend_pid())
    with pytest.raises(StorageUnavailable, match=f"^change feed: cannot listen on {store.channel}$"):
        feed.sync()


def test_a_sync_marker_that_does_not_come_back_in_time_names_the_channel(feed, monkeypatch):
    monkeypatch.setattr("sessionstate.store.postgres_feed.SYNC_TIMEOUT_SECONDS", 0.0)
    with pytest.raises(StorageUnavailable, match="^change feed: the sync marker did not come back on sessionstate:"):
        feed.sync()


# -- what a commit tells the other servers --------------------------------------------------------


def test_a_watcher_named_with_an_apostrophe_reaches_the_other_servers_as_written(store, feed):
    store.serving.note_cursor_changes(["agent:o'neil:main", "agent:a:''"], 1.0)  # outside a transaction: at once
    feed.sync()
    assert feed.take().watchers == ["agent:o'neil:main", "agent:a:''"]


def test_a_batchs_notifying_events_are_told_with_their_sessions_and_actors(store, feed):
    from sessionstate.store import SessionRecord

    with store.transaction():
        for key in ("agent:a:one", "agent:b:two"):
            store.insert_session(SessionRecord(key, key.split(":")[1], "main", None, None, None, 1.0, 1.0))
    rows = [("agent:a:one", "a", "human_direct_message", "agent", "agent:b:two", "run-1", "s", None, 1.0, 1.0, None),
            ("agent:b:two", "b", "human_direct_message", "human", None, "run-2", "s", None, 1.0, 1.0, None)]
    with store.transaction():
        store.append_events(rows)
    feed.sync()
    assert feed.take().material == [("agent:a:one", "a", "agent:b:two"), ("agent:b:two", "b", None)]


def test_a_lone_events_actor_is_told_with_it(store, feed):
    from sessionstate.store import SessionRecord

    with store.transaction():
        store.insert_session(SessionRecord(T, "a", "main", None, None, None, 1.0, 1.0))
    row = (T, "a", "human_direct_message", "agent", "agent:b:actor", "run-1", "s", None, 1.0, 1.0, None)
    with store.transaction():
        store.append_event(*row)
    feed.sync()
    assert feed.take().material == [(T, "a", "agent:b:actor")]


def test_a_closed_feed_can_be_interrupted_and_closed_again(feed, capfd):
    feed.close()
    feed.interrupt()
    feed.close()
    assert capfd.readouterr().out == ""
