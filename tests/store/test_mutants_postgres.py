"""The PostgreSQL store beyond the conformance suite: the cursor writes' one-row and two-row
forms, a lone batch append, a dedupe key won by another session during a batch, the integrity
check, vacuum's refusals, what a closed store's translation says, the statement counts the
batch paths promise, the feature tables' ``executemany``, and the helpers without a server (URL
scheme, trace parsing, payload sizes). Written for the survivors of a mutmut run
(docs/mutants/store-postgres.md)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from sessionstate.errors import StorageError, StorageUnavailable
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord, open_store
from sessionstate.store.factory import is_postgres_url
from sessionstate.store.postgres_feed import MAX_PAYLOAD_BYTES, encode_changes
from sessionstate.store.postgres_trace import sent_round_trips, sent_statements
from tests.backends import admin_connection
from tests.store.sessions import A, B, W
from tests.store.test_postgres_feed import assert_split_without_loss


@pytest.fixture
def store(pg_url: str) -> Iterator[Any]:
    opened = open_store(pg_url, notifying_kinds=NOTIFYING_KINDS)
    with opened.transaction():
        for key in (A, B, W):
            opened.insert_session(SessionRecord(key, "a", "main", None, None, None, 1.0, 1.0))
    yield opened
    opened.close()


def event(key: str, dedupe: str | None = None) -> tuple[Any, ...]:
    """An event row (``records.EventRow``): a notifying kind by a human."""
    return (key, "a", "human_direct_message", "human", None, None, "s", None, 1.0, 1.0, dedupe)


def positions(store: Any, target: str = "t") -> dict[str, tuple[int, int, int]]:
    return {c.watcher: c.positions for c in store.cursors_naming(target, "a")}


# -- cursor writes ----------------------------------------------------------------------------


def test_a_put_of_two_watchers_writes_both(store):
    with store.transaction():
        store.put_cursors("t", "a", [("w1", (1, 1, 1)), ("w2", (0, 2, 2))], 1.0)
    assert positions(store) == {"w1": (1, 1, 1), "w2": (0, 2, 2)}


def test_a_put_naming_one_watcher_twice_ends_at_its_second_positions(store):
    with store.transaction():
        store.put_cursors("t", "a", [("w1", (1, 1, 1)), ("w1", (0, 3, 3))], 1.0)
    assert positions(store) == {"w1": (0, 3, 3)}


def test_a_pair_write_of_two_pairs_writes_both(store):
    with store.transaction():
        store.put_pair_cursors([("w1", ("t1", "a"), (1, 1, 1)), ("w2", ("t2", "a"), (0, 2, 2))], 2.0)
    got = {(c.watcher, c.target_key): (c.positions, c.updated_at) for c in store.all_cursors()}
    assert got == {("w1", "t1"): ((1, 1, 1), 2.0), ("w2", "t2"): ((0, 2, 2), 2.0)}


# -- statements the batch paths promise (docs/performance-postgres.md) ----------------------------


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


# -- a dedupe key another session's transaction commits during a batch --------------------------


def test_a_batch_row_whose_dedupe_key_another_session_commits_meanwhile_finds_that_event(store, pg_url):
    other = open_store(pg_url, notifying_kinds=NOTIFYING_KINDS)
    outcome: list[Any] = []

    def batch() -> None:
        try:
            with other.transaction():
                outcome.append(other.append_events([event(B), event(B, "shared"), event(B)]))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion
            outcome.append(exc)

    try:
        with store.transaction():
            mine, inserted = store.append_event(*event(A, "shared"))
            worker = threading.Thread(target=batch)
            worker.start()
            worker.join(0.5)  # its insert waits for this transaction's key
            assert worker.is_alive()
        worker.join(10)
        first, _, third = outcome[0]
        assert inserted and outcome[0][1] == (mine, False)
        assert first[1] and third[1] and store.head(B, "a").last_sequence == third[0]
        assert store.event_count() == 3
    finally:
        other.close()


# -- inspection and maintenance ---------------------------------------------------------------


def test_the_integrity_check_counts_events_above_their_heads(store):
    with store.transaction():
        store.append_events([event(A), event(A)])
    assert store.integrity_check() == "ok"
    store.db.execute("UPDATE session_state_heads SET last_sequence = 1 WHERE session_key = %s", (A,))
    assert store.integrity_check() == "1 event(s) above their session's head or without one"


def test_vacuum_inside_a_transaction_is_refused_naming_the_database(store):
    with pytest.raises(StorageUnavailable) as raised, store.transaction():
        store.vacuum()
    assert str(raised.value) == f"{store.where}: vacuum cannot run inside a transaction"


def test_a_vacuum_the_server_refuses_says_why(store):
    schema = store.db.execute("SELECT current_schema()").fetchone()[0]
    store.db.execute("SET lock_timeout = '100ms'")
    with admin_connection() as holder, holder.transaction():
        holder.execute(f"LOCK TABLE {schema}.sessions IN ACCESS SHARE MODE")
        with pytest.raises(StorageError, match="lock timeout") as raised:
            store.vacuum()
    assert isinstance(raised.value.__cause__, psycopg.Error)


def test_a_closed_stores_translation_says_it_is_closed(store):
    store.close()
    error = store.storage_error(psycopg.OperationalError("server closed the connection"))
    assert isinstance(error, StorageUnavailable) and str(error) == f"{store.where}: the store is closed"


# -- the feature tables' executemany ---------------------------------------------------------


def test_the_feature_tables_executemany_writes_in_the_transaction_and_translates_errors(store):
    store.db.execute("CREATE TEMP TABLE scratch (k text, v integer)")
    with pytest.raises(RuntimeError), store.transaction():
        store.db.executemany("INSERT INTO scratch VALUES (%s, %s)", [["x", 0]])
        raise RuntimeError("rolled back")
    with store.transaction():
        store.db.executemany("INSERT INTO scratch VALUES (%s, %s)", iter([["a", 1], ("b", 2)]))
    assert store.db.execute("SELECT k, v FROM scratch ORDER BY k").fetchall() == [("a", 1), ("b", 2)]
    with pytest.raises(StorageError, match='relation "no_such_table" does not exist'), store.transaction():
        store.db.executemany("INSERT INTO no_such_table VALUES (%s)", [[1]])


# -- without a server -------------------------------------------------------------------------


@pytest.mark.parametrize("url, expected", [
    ("postgresql+psycopg://u@h/db", True), ("postgres://u@h/db", True), ("PostgreSQL://u@h/db", True),
    ("sqlite:///state.db", False), ("/var/state.db", False), (None, False), (5, False),
])
def test_is_postgres_url_by_the_scheme_alone(url, expected):
    assert is_postgres_url(url) is expected


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


# -- batches: what is remembered, what comes back -------------------------------------------------


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


def heads_locked_elsewhere(store: Any, keys: tuple[str, ...]) -> set[str]:
    """Which of ``keys``' head rows another connection finds locked (``NOWAIT``)."""
    schema = store.db.execute("SELECT current_schema()").fetchone()[0]
    locked = set()
    with admin_connection() as other:
        for key in keys:
            try:
                with other.transaction():
                    other.execute(f"SELECT 1 FROM {schema}.session_state_heads WHERE session_key = %s"
                                  " FOR UPDATE NOWAIT", (key,))
            except psycopg.errors.LockNotAvailable:
                locked.add(key)
    return locked


def test_locking_a_watchers_targets_locks_the_heads_it_holds_cursors_on(store):
    with store.transaction():
        store.put_cursors(A, "a", [(W, (0, 0, 0))], 1.0)
    with store.transaction():
        store.lock_watcher_targets(W)
        assert heads_locked_elsewhere(store, (A, B)) == {A}


def test_a_cursor_delete_the_server_refuses_says_why(store):
    with store.transaction():
        store.put_cursors(A, "a", [(W, (0, 0, 0)), (B, (0, 0, 0))], 1.0)
    schema = store.db.execute("SELECT current_schema()").fetchone()[0]
    store.db.execute("SET lock_timeout = '100ms'")
    with admin_connection() as holder, holder.transaction():
        holder.execute(f"SELECT 1 FROM {schema}.session_watch_cursors WHERE watcher_session_key = %s FOR UPDATE", (W,))
        with pytest.raises(StorageError, match="lock timeout"), store.transaction():
            store.put_cursors(A, "a", [(W, None), (B, None)], 2.0)


def test_a_rolled_back_transaction_that_sent_nothing_leaves_the_connection_out_of_any(store):
    with pytest.raises(RuntimeError), store.transaction():
        raise RuntimeError("nothing was sent")
    store.head(A, "a")
    with admin_connection() as admin:
        state = admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (store.backend_pid(),)).fetchone()
    assert state == ("idle",)


def test_a_change_feed_the_server_refuses_is_a_storage_error(store, pg_url, monkeypatch):
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    gone = make_url(pg_url).update_query_dict({"host": "/nonexistent-sessionstate"})
    monkeypatch.setattr(store, "_engine", create_engine(gone))
    with pytest.raises(StorageUnavailable, match="PostgreSQL unavailable") as raised:
        store.open_change_feed(tuple(NOTIFYING_KINDS))
    assert isinstance(raised.value.__cause__, psycopg.Error)


def test_a_prune_tells_its_observer_each_chunks_watermarks_pending_cursors_and_count(store):
    """The trace's view of a prune (R13, R7): per chunk, inside its transaction."""
    with store.transaction():
        store.append_events([event(A), event(A), event(B)])
        store.put_cursors(A, "a", [(W, (0, 1, 2))], 1.0)
    told: list[tuple[Any, ...]] = []
    counts = store.prune_events(cutoff=100.0, max_rows=1_000, on_chunk=lambda *chunk: told.append(chunk))
    assert counts == {"events": 3, "chunks": 1}
    assert told == [([(A, "a", 2), (B, "a", 3)], [(W, A, "a", (0, 1, 2))], 3)]


def test_the_store_reclaims_no_pages_itself_the_servers_autovacuum_does(store):
    assert store.reclaim_free_pages() == 0
