"""R22 on PostgreSQL: the notification goes with the commit, never with a rollback; a lost
listening connection or an oversized change turns into a resynchronisation; one schema's
servers do not hear another's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionstate import Gateway
from sessionstate import notice_text
from sessionstate.store.records import PendingCursor
from sessionstate.store.postgres_feed import MAX_PAYLOAD_BYTES, RESYNC_PAYLOAD, encode_changes
from tests.backends import admin_connection, postgres_database

W, T = "agent:a:main", "agent:b:main"
# W's and T's own `created` (R27) are sequences 1 and 2: W's watch of T starts at T's head.
SEED = 2


def populate(url: str) -> str:
    with Gateway.open(url) as gw:
        gw.create_session(W)
        gw.create_session(T)
        gw.watch(W, T)
        assert gw.ops.cursor_positions(W, T).last_seen == SEED
    return url


def human(gw: Gateway) -> int:
    sequence = gw.record_event(T, "human_direct_message", actor_type="human", summary="hi")
    assert sequence is not None
    return sequence


def test_a_commit_notifies_with_its_events_and_watchers(pg_url):
    url = populate(pg_url)
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
    url = populate(pg_url)
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
    url = populate(pg_url)
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
    url = populate(pg_url)
    with postgres_database() as other_url:
        populate(other_url)
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

    url = populate(pg_url)
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
