"""The statements and round trips the PostgreSQL store sends for its batch paths
(docs/performance.md): cursor upserts, a batch's append, the caught-up read of several targets
each one statement; a lone event through the batch entry; the head locks a transaction
remembers; a dedupe key shared by a batch's rows sent once; and how the libpq trace the
statement counts come from is read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sessionstate.store.postgres_trace import sent_round_trips, sent_statements
from tests.store.helpers import event, opened_store, positions
from tests.store.sessions import A, B, W


@pytest.fixture
def store(pg_url: str) -> Iterator[Any]:
    with opened_store(pg_url, A, B, W) as opened:
        yield opened


def writes_to(statements: list[str], table: str) -> list[str]:
    return [s for s in statements if f"INSERT INTO {table}" in s]


def test_sixteen_cursor_upserts_are_one_statement(store):
    with store.transaction(), store.trace_statements() as sent:
        store.put_cursors("t", "a", [(f"w{i:02}", (0, i, i)) for i in range(1, 17)], 1.0)
    assert len(writes_to(sent, "session_watch_cursors")) == 1, sent
    assert positions(store)["w16"] == (0, 16, 16) and len(positions(store)) == 16


def test_a_batch_of_two_events_is_one_append_statement(store):
    with store.transaction(), store.trace_statements() as sent:
        assert store.append_events([event(A), event(B)]) == [(1, True), (2, True)]
    assert len(writes_to(sent, "session_state_events")) == 1, sent


def test_a_lone_event_through_the_batch_entry_is_appended(store):
    with store.transaction():
        assert store.append_events([event(A)]) == [(1, True)]
    assert store.head(A, "a").last_sequence == 1


def test_the_caught_up_read_of_two_targets_is_one_statement(store):
    with store.transaction():
        store.put_cursors(A, "a", [(W, (0, 0, 0))], 1.0)
        store.put_cursors(B, "a", [(W, (0, 0, 0)), ("w2", (0, 1, 1))], 1.0)
    with store.trace_statements() as sent:
        found = store.caught_up_watchers_of([(A, "a"), (B, "a")])
    assert found == {(A, "a"): [(W, (0, 0, 0), "explicit")], (B, "a"): [(W, (0, 0, 0), "explicit")]}
    assert len([s for s in sent if "FROM session_watch_cursors" in s]) == 1, sent


def test_trace_statements_lists_what_was_sent(store):
    with store.trace_statements() as sent:
        store.head(A, "a")
    assert len(sent) == 1 and "FROM session_state_heads" in sent[0], sent


# A libpq trace (REGRESS_MODE), the frontend's side: what the trace helpers read.
TRACE = "\n".join([
    "F\t10\tBind\t \"\" \"\" 0 0 0 1 0",  # a statement parsed before the trace began
    "F\t9\tExecute\t \"\" 0",
    "F\t4\tSync",
    "B\t5\tReadyForQuery\t I",
    "F\t14\tQuery\t \"BEGIN\"",
    "F\t30\tParse\t \"_pg3_0\" \"SELECT 2\" 0",  # prepared on its own: an empty round trip
    "F\t4\tSync",
    "F\t20\tBind\t \"\" \"_pg3_0\" 0 0 0 1 0",
    "F\t9\tExecute\t \"\" 0",
    "F\t20\tBind\t \"\" \"_pg3_9\" 0 0 0 1 0",  # prepared before the trace
    "F\t9\tExecute\t \"\" 0",
    "F\t4\tSync",
    "F\t4\tFlush",  # right after a Sync: the same wait
    "F\t20\tBind\t \"\" \"_pg3_5\" 0 0 0 1 0",  # deallocated since: known by its name only
    "F\t9\tExecute\t \"\" 0",
    "F\t4\tFlush",
    "F\t12\tParse\t \"\" \"\" 0",  # an empty statement
    "F\t10\tBind\t \"\" \"\" 0 0 0 1 0",
    "F\t9\tExecute\t \"\" 0",
    "F\t4\tSync",
    "F\t20\tParse\t \"\" \"SELECT 3\" 0",
    "F\t10\tBind\t \"\" \"\" 0 0 0 1 0",
    "F\t9\tExecute\t \"\" 0",  # not waited for yet when the trace ended
])


def test_the_trace_is_read_as_round_trips_of_the_statements_they_sent():
    trips = sent_round_trips(TRACE, {"_pg3_9": "SELECT 9"})
    assert trips == [[""], ["BEGIN"], [], ["SELECT 2", "SELECT 9"], ["_pg3_5"], [""], ["SELECT 3"]]
    assert sent_statements(TRACE, {"_pg3_9": "SELECT 9"}) == ["", "BEGIN", "SELECT 2", "SELECT 9", "_pg3_5", "",
                                                              "SELECT 3"]


def test_a_lone_event_appended_and_read_returns_its_targets_caught_up_watchers(store):
    with store.transaction():
        store.put_cursors(A, "a", [(W, (0, 0, 0))], 1.0)
    with store.transaction():
        appended, found = store.append_and_read([event(A)], [(A, "a"), (A, "a")])
    assert appended == [(1, True)]
    assert found == {(A, "a"): [(W, (0, 0, 0), "explicit")]}


def test_a_batch_reads_no_cursor_when_nothing_is_watched_and_appends_two_rows_in_one_statement(store):
    with store.transaction(), store.trace_statements() as sent:
        assert store.append_and_read([event(A)], []) == ([(1, True)], {})
        assert store.append_and_read([event(A), event(B)], []) == ([(2, True), (3, True)], {})
    assert not [s for s in sent if "session_watch_cursors" in s], sent
    assert len(writes_to(sent, "session_state_events")) == 2, sent  # one per call


def test_a_transaction_remembers_every_head_it_locked_and_never_locks_one_again(store):
    with store.transaction():
        store.lock_targets([(W, "a")])
        store.lock_targets([(A, "a")])
        store.append_events([event(B), event(B)])
        with store.trace_statements() as sent:
            for key in (W, A, B):
                store.append_event(*event(key))
    assert not [s for s in sent if "FOR UPDATE" in s], sent
    with store.transaction():
        store.append_event(*event(A))  # the head lock and the append in one statement
        with store.trace_statements() as again:
            store.append_event(*event(A))
    assert not [s for s in again if "FOR UPDATE" in s], again


def test_a_batch_whose_rows_share_one_dedupe_key_sends_it_once(store):
    with store.transaction():
        assert store.append_events([event(A, "k"), event(A, "k")]) == [(1, True), (1, False)]
    assert store.event_count() == 1

