"""R22 on PostgreSQL: the notification goes with the commit, never with a rollback; a lost
listening connection or an oversized change turns into a resynchronisation; one schema's
servers do not hear another's. The payloads: split under the byte limit without loss, whatever
the width of an item. The feed itself: what ``take`` makes of notifications it cannot use,
which cursors it reports frozen, how ``wait`` and ``sync`` behave on an idle, a stopped and a
failing listening connection, and that a closed feed lets its connection go (notifications
sent with ``pg_notify`` from a connection of their own, the way another server's commit
reaches the feed)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from sessionstate import Gateway, notice_text
from sessionstate.errors import StorageUnavailable
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import open_store
from sessionstate.store.postgres_feed import (
    CHANNEL_PREFIX,
    MAX_IDENTIFIER_BYTES,
    MAX_PAYLOAD_BYTES,
    RESYNC_PAYLOAD,
    PostgresChangeFeed,
    channel_for,
    encode_changes,
    quoted_channel,
)
from sessionstate.store.records import ChangeSet, PendingCursor
from tests.backends import admin_connection, postgres_database
from tests.helpers import SEED, T, W, human, populate


def test_a_commit_notifies_with_its_events_and_watchers(pg_url):
    url = populate(pg_url, (W,))
    with Gateway.open(url, serve=[]) as recorder, Gateway.open(url) as server, server.locked():
        server.cluster.register()
        feed = server.cluster.feed
        sequence = human(recorder)  # freezes W's cursor on T: found through the event
        feed.sync()
        assert feed.take() == ([PendingCursor(W, T, "b", SEED)], [], [(T, "b", None)], False)
        recorder.drain_system_events(W)  # the ack is a cursor change outside the hot path
        feed.sync()
        assert feed.take() == ([], [W], [], False)
        assert server.ops.cursor_positions(W, T).last_seen == sequence


def test_a_rolled_back_transaction_notifies_nothing(pg_url):
    url = populate(pg_url, (W,))
    with Gateway.open(url, serve=[]) as recorder, Gateway.open(url) as server, server.locked():
        server.cluster.register()
        feed = server.cluster.feed

        class Boom(Exception):
            pass

        with pytest.raises(Boom), recorder.locked(), recorder.store.transaction():
            recorder.store.serving.note_cursor_changes([W], 0.0)
            raise Boom
        feed.sync()
        assert feed.take() == ([], [], [], False)


def test_a_lost_listening_connection_resynchronises(pg_url):
    url = populate(pg_url, (W,))
    with Gateway.open(url, serve=[]) as recorder, Gateway.open(url) as server:
        with server.locked():
            server.cluster.register()
        with admin_connection() as admin:  # the server ends every listening backend
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE query LIKE 'LISTEN %%' AND pid <> pg_backend_pid()"
            ).fetchall()
        assert ended and all(row[0] for row in ended)
        human(recorder)  # its notification reaches nobody
        assert server.cluster.sweep() == 1  # reconnects, resynchronises, queues the notice
        assert server.cluster.feed.reconnects == 1
        assert server.pending_system_events(W) == [notice_text(T, SEED)]


def test_two_schemas_do_not_hear_each_other(pg_url):
    url = populate(pg_url, (W,))
    with postgres_database() as other_url:
        populate(other_url, (W,))
        with Gateway.open(url) as server, Gateway.open(other_url, serve=[]) as elsewhere, server.locked():
            server.cluster.register()
            human(elsewhere)
            server.cluster.feed.sync()
            assert server.cluster.feed.take() == ([], [], [], False)


def test_payloads_stay_under_the_limit_and_lose_nothing():
    watchers = [f"agent:w{i}:main" for i in range(400)]
    events = [(f"agent:t{i}:main", f"t{i}", None, i) for i in range(300)]
    assert_split_without_loss(watchers, events)


def assert_split_without_loss(watchers: list[str], events: list[Any]) -> None:
    """``encode_changes`` needs more than one payload for these, each within the limit, and
    together they carry every watcher and event in order."""
    payloads = encode_changes(watchers, events)
    assert len(payloads) > 1
    assert all(len(p.encode()) <= MAX_PAYLOAD_BYTES for p in payloads)
    messages = [json.loads(p) for p in payloads]
    assert [w for m in messages for w in m.get("w", [])] == watchers
    assert [tuple(e) for m in messages for e in m.get("e", [])] == events


_text = st.text(max_size=12)  # every code point: quotes, backslashes, controls, beyond the BMP
_events = st.lists(st.tuples(_text, _text, st.none() | _text, st.integers(0, 2**63 - 1)), max_size=4)


@given(watchers=st.lists(_text, max_size=4), events=_events)
def test_a_payload_is_the_json_text_of_its_changes(watchers, events):
    """The payload is written by hand on the commit path: it must be exactly the text
    ``json.dumps`` gives (compact, unescaped), and read back to the same changes."""
    named = list(dict.fromkeys(watchers))
    listed = [list(e) for e in events]
    expected = {"w": named, "e": listed} if named and listed else {"w": named} if named else {"e": listed}
    (payload,) = encode_changes(watchers, events)
    assert payload == json.dumps(expected, ensure_ascii=False, separators=(",", ":"))
    assert json.loads(payload) == expected


def test_a_change_too_large_for_one_notification_becomes_a_resync():
    huge = "agent:" + "\u4e00" * 3000 + ":main"  # 9 KB in UTF-8
    assert encode_changes([huge, W], []) == [RESYNC_PAYLOAD]
    assert encode_changes([], [(huge, "a", None, 1)]) == [RESYNC_PAYLOAD]


def test_the_pump_heals_a_lost_listening_connection(pg_url):
    import time

    url = populate(pg_url, (W,))
    with Gateway.open(url, serve=[]) as recorder, Gateway.open(url, pump=True) as server:
        with admin_connection() as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE query LIKE 'LISTEN %%' AND pid <> pg_backend_pid()"
            )
        human(recorder)
        deadline = time.monotonic() + 30  # a bound for a stuck pump, not a timing assertion
        while not server.pending_system_events(W) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.pending_system_events(W) == [notice_text(T, SEED)]
        assert server.cluster.feed.reconnects >= 1


KINDS = tuple(NOTIFYING_KINDS)


TARGET = "agent:a:target"


@pytest.fixture
def feed(pg_store: Any) -> Iterator[PostgresChangeFeed]:
    opened = pg_store.open_change_feed(KINDS)
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


def test_an_unreadable_notification_resynchronises_and_keeps_the_readable_ones(pg_store, feed, caplog):
    notify(pg_store, "not json", '{"w":["agent:a:w1"]}', '{"e":[["agent:a:t","a",null,4]]}')
    feed.sync()
    with caplog.at_level(logging.WARNING, logger="sessionstate"):
        changes = feed.take()
    # Frozen cursors are not read when everything is brought in step anyway.
    assert changes == ChangeSet([], ["agent:a:w1"], [("agent:a:t", "a", None)], True)
    assert "change feed: an unreadable notification; resynchronising" in caplog.messages


@pytest.mark.parametrize("odd", ['{"r":1}', "[1]", "7"], ids=["resync-payload", "a-list", "a-number"])
def test_a_resync_or_a_notification_that_is_no_object_resynchronises(pg_store, feed, odd):
    notify(pg_store, odd, '{"w":["agent:a:w1"]}')
    feed.sync()
    assert feed.take() == ChangeSet([], ["agent:a:w1"], [], True)
    notify(pg_store, '{"w":["agent:a:w2"]}')  # and only that take: the next is in step again
    feed.sync()
    assert feed.take() == ChangeSet([], ["agent:a:w2"], [], False)


def put_pending(store: Any, cursors: dict[str, int]) -> None:
    """Pending cursors on TARGET (nothing seen, notified at the given sequence): what freezes leave."""
    with store.transaction():
        store.put_cursors(TARGET, "a", [(w, (0, n, n)) for w, n in cursors.items()], 1.0)


def test_an_event_reports_the_cursors_frozen_at_or_after_its_sequence_only(pg_store, feed):
    """A freeze sets N to its event's sequence: a cursor frozen by an earlier event (N below
    it) is not this event's doing."""
    put_pending(pg_store, {"agent:a:early": 4, "agent:a:now": 5})
    notify(pg_store, f'{{"e":[["{TARGET}","a",null,5]]}}')
    feed.sync()
    assert feed.take().frozen == [PendingCursor("agent:a:now", TARGET, "a", 0)]


def test_several_events_on_one_target_report_what_the_first_of_them_froze_onward(pg_store, feed):
    put_pending(pg_store, {"agent:a:first": 4, "agent:a:later": 6, "agent:a:before": 3})
    notify(pg_store, f'{{"e":[["{TARGET}","a",null,4]]}}', f'{{"e":[["{TARGET}","a","agent:a:x",6]]}}')
    feed.sync()
    changes = feed.take()
    assert changes.frozen == [PendingCursor("agent:a:first", TARGET, "a", 0), PendingCursor("agent:a:later", TARGET, "a", 0)]
    assert changes.material == [(TARGET, "a", None), (TARGET, "a", "agent:a:x")]


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


def test_a_wait_returns_a_notification_and_take_reads_it(pg_store, feed):
    notify(pg_store, '{"w":["agent:a:w1"]}')
    assert timed_wait(feed, 5)[0] is True
    assert feed.take() == ChangeSet([], ["agent:a:w1"], [], False)


def test_another_servers_sync_marker_is_no_change_and_a_collected_one_ends_a_wait_at_once(pg_store, feed):
    other = pg_store.open_change_feed(KINDS)
    try:
        other.sync()  # its marker reaches this feed too
        feed.sync()  # collects the other's marker on the way to its own
        answer, took = timed_wait(feed, 3)
        assert answer is True and took < 2  # something was collected: no waiting for more
        assert feed.take() == ChangeSet([], [], [], False)
    finally:
        other.close()


def test_an_interrupted_feed_reports_nothing_more(pg_store, feed):
    notify(pg_store, '{"w":["agent:a:w1"]}')
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


def test_a_wait_on_a_lost_connection_reconnects_logs_it_and_resynchronises(pg_store, feed, caplog):
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
    assert caplog.messages.count(f"change feed: listening again on {pg_store.channel}; resynchronising") == 2


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


def test_a_sync_that_fails_twice_says_the_server_is_unavailable_and_the_next_take_resynchronises(pg_store):
    feed = PostgresChangeFeed(lambda: DroppedAtEveryNotify(admin_connection()), pg_store.channel, pg_store.serving,
                              pg_store.storage_error)
    try:
        with pytest.raises(StorageUnavailable, match="PostgreSQL unavailable: server closed the connection") as raised:
            feed.sync()
        assert raised.value.retry_safe
        assert feed.reconnects == 1  # tried once more on a new connection
        assert feed.take().resync is True
    finally:
        feed.close()


def test_a_sync_that_cannot_listen_again_names_the_channel(pg_url, pg_store, feed, monkeypatch):
    gone = make_url(pg_url).update_query_dict({"host": "/nonexistent-sessionstate"})
    monkeypatch.setattr(pg_store, "_engine", create_engine(gone))  # the server stays away
    terminate(feed.backend_pid())
    with pytest.raises(StorageUnavailable, match=f"^change feed: cannot listen on {pg_store.channel}$"):
        feed.sync()


def test_a_sync_marker_that_does_not_come_back_in_time_names_the_channel(feed, monkeypatch):
    monkeypatch.setattr("sessionstate.store.postgres_feed.SYNC_TIMEOUT_SECONDS", 0.0)
    with pytest.raises(StorageUnavailable, match="^change feed: the sync marker did not come back on sessionstate:"):
        feed.sync()


def test_a_watcher_named_with_an_apostrophe_reaches_the_other_servers_as_written(pg_store, feed):
    pg_store.serving.note_cursor_changes(["agent:o'neil:main", "agent:a:''"], 1.0)  # outside a transaction: at once
    feed.sync()
    assert feed.take().watchers == ["agent:o'neil:main", "agent:a:''"]


def test_a_batchs_notifying_events_are_told_with_their_sessions_and_actors(pg_store, feed):
    from sessionstate.store import SessionRecord

    with pg_store.transaction():
        for key in ("agent:a:one", "agent:b:two"):
            pg_store.insert_session(SessionRecord(key, key.split(":")[1], "main", None, None, None, 1.0, 1.0))
    rows = [("agent:a:one", "a", "human_direct_message", "agent", "agent:b:two", "run-1", "s", None, 1.0, 1.0, None),
            ("agent:b:two", "b", "human_direct_message", "human", None, "run-2", "s", None, 1.0, 1.0, None)]
    with pg_store.transaction():
        pg_store.append_events(rows)
    feed.sync()
    assert feed.take().material == [("agent:a:one", "a", "agent:b:two"), ("agent:b:two", "b", None)]


def test_a_lone_events_actor_is_told_with_it(pg_store, feed):
    from sessionstate.store import SessionRecord

    with pg_store.transaction():
        pg_store.insert_session(SessionRecord(TARGET, "a", "main", None, None, None, 1.0, 1.0))
    row = (TARGET, "a", "human_direct_message", "agent", "agent:b:actor", "run-1", "s", None, 1.0, 1.0, None)
    with pg_store.transaction():
        pg_store.append_event(*row)
    feed.sync()
    assert feed.take().material == [(TARGET, "a", "agent:b:actor")]


def test_a_closed_feed_can_be_interrupted_and_closed_again(feed, capfd):
    feed.close()
    feed.interrupt()
    feed.close()
    assert capfd.readouterr().out == ""


def test_split_payloads_of_wide_characters_stay_under_the_limit_and_lose_nothing():
    """The limit is in bytes of the text sent: a name in another script is counted as its UTF-8
    bytes, and the payload must hold it as such (not as longer escapes)."""
    han, accented = "\u4e00" * 40, "\u00e9" * 30  # three and two bytes each in UTF-8
    watchers = [f"agent:{han}{i}:main" for i in range(300)]
    events = [(f"agent:{accented}{i}:main", "a", None, i) for i in range(100)]
    assert_split_without_loss(watchers, events)


def test_a_change_of_exactly_the_limit_goes_as_one_notification():
    watcher = "w" * (MAX_PAYLOAD_BYTES - len('{"w":[""]}'))
    assert encode_changes([watcher], []) == [json.dumps({"w": [watcher]}, separators=(",", ":"))]


def test_an_item_that_fits_alone_is_sent_alone_not_as_a_resync():
    # The largest item a payload can hold: its JSON text plus {"w":[]} is the limit (less the
    # size's own bound of 12 the split allows for an item).
    fits, other = "w" * (MAX_PAYLOAD_BYTES - 12 - 3), "x" * 20  # together over the limit
    assert [json.loads(p) for p in encode_changes([fits, other], [])] == [{"w": [fits]}, {"w": [other]}]
    assert encode_changes(["w" + fits, other], []) == ['{"r":1}']


def test_an_event_that_would_overflow_the_watchers_payload_gets_one_of_its_own():
    # The watcher and the event together are 8 bytes over the limit; each alone fits.
    watcher, event_ = "w" * (MAX_PAYLOAD_BYTES - 30), ("e0000", "a", None, 0)
    payloads = encode_changes([watcher], [event_])
    assert [json.loads(p) for p in payloads] == [{"w": [watcher]}, {"e": [list(event_)]}]


@pytest.mark.parametrize("field", ["w", "e", "both"])
def test_no_split_payload_is_over_the_limit_whatever_the_item_width(field):
    """Every item width up to ~1,200 bytes, so that some batch fills to each byte near the limit."""
    for width in range(6, 1200):
        count = 2 * MAX_PAYLOAD_BYTES // width + 2
        names = [f"{i:05}".ljust(width, "x") for i in range(count)]
        watchers = names if field != "e" else []
        # With both, narrow events follow: the first of them fills what the watchers left.
        keys = names if field == "e" else [f"e{i:04}" for i in range(40)] if field == "both" else []
        events = [(key, "a", None, i) for i, key in enumerate(keys)]
        payloads = encode_changes(watchers, events)
        assert all(len(p.encode()) <= MAX_PAYLOAD_BYTES for p in payloads), width
        messages = [json.loads(p) for p in payloads]
        assert [w for m in messages for w in m.get("w", [])] == watchers, width
        assert [tuple(e) for m in messages for e in m.get("e", [])] == events, width


def test_a_schema_whose_channel_fits_an_identifier_names_it_as_is():
    fits = "s" * (MAX_IDENTIFIER_BYTES - len(CHANNEL_PREFIX))  # exactly 63 bytes with the prefix
    assert channel_for(fits) == CHANNEL_PREFIX + fits
    assert channel_for("t_1") == CHANNEL_PREFIX + "t_1"


def test_a_schema_too_long_for_a_channel_is_named_by_a_fixed_digest():
    long_schema = "s" * (MAX_IDENTIFIER_BYTES - len(CHANNEL_PREFIX) + 1)
    # Pinned: servers of different releases on one schema must meet on one channel.
    assert channel_for(long_schema) == "sessionstate:b2b346c6c3fb8f567b6f3daa07c02f20"
    wide = "é" * 26  # 39 characters with the prefix, but 65 bytes: the limit counts bytes
    assert channel_for(wide) != CHANNEL_PREFIX + wide and len(channel_for(wide).encode()) <= MAX_IDENTIFIER_BYTES
    assert len(channel_for("x" * 200).encode()) <= MAX_IDENTIFIER_BYTES
    assert channel_for(long_schema + "a") != channel_for(long_schema + "b")


def test_a_channel_with_a_double_quote_is_quoted_by_doubling_it():
    assert quoted_channel('sessionstate:a"b') == '"sessionstate:a""b"'
    assert quoted_channel("sessionstate:plain") == '"sessionstate:plain"'


@pytest.fixture
def long_schema_url(pg_url: str) -> Iterator[str]:
    schema = "t_" + "l" * 58  # 60 bytes: the channel's name would be 73
    with admin_connection() as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield make_url(pg_url).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    finally:
        with admin_connection() as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def test_a_store_on_a_schema_too_long_for_a_channel_name_tells_its_changes(long_schema_url):
    store = open_store(long_schema_url, notifying_kinds=NOTIFYING_KINDS)
    try:
        assert store.channel == channel_for("t_" + "l" * 58) and len(store.channel) < len(CHANNEL_PREFIX) + 60
        feed = store.open_change_feed(tuple(NOTIFYING_KINDS))
        try:
            store.note_changed_watchers(["agent:w:main"])
            feed.sync()
            assert feed.take().watchers == ["agent:w:main"]
        finally:
            feed.close()
    finally:
        store.close()
