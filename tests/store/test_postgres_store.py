"""What only a database server adds: concurrent writers, lost connections, refused logins; and
the PostgreSQL store's own answers beyond the conformance suite: the cursor writes' one-row and
two-row forms, a dedupe key won by another session during a batch, the heads a watcher's lock
takes, the integrity check, vacuum's refusals, what a closed store's translation says, the
feature tables' ``executemany``, a prune's observer, and the URL scheme test without a server.

Each test runs against the server named by SESSIONSTATE_TEST_PG_URL (tests/backends.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sessionstate import Gateway, notice_text
from sessionstate.errors import StorageConflict, StorageError, StorageUnavailable
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord
from sessionstate.store.commit_outcome import WITNESS_TABLE
from sessionstate.store.factory import is_postgres_url, open_store
from tests.backends import admin_connection
from tests.store.helpers import event, opened_store, positions
from tests.store.sessions import A, B, W

KEYS = ("agent:a:one", "agent:a:two")


@pytest.fixture
def stores(pg_url):
    opened = [open_store(pg_url, notifying_kinds=NOTIFYING_KINDS) for _ in range(2)]
    with opened[0].transaction():
        for key in KEYS:
            opened[0].insert_session(SessionRecord(key, "a", "main", None, None, None, 1.0, 1.0))
    yield opened
    for s in opened:
        s.close()


def append(store, key="agent:a:one", dedupe=None):
    return store.append_event(key, "a", "compacted", "system", None, None, "s", None, 1.0, 1.0, dedupe)


def backend_pid(store) -> int:
    return int(store.db.execute("SELECT pg_backend_pid()").fetchone()[0])


def terminate(pid: int) -> None:
    with admin_connection() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


# Without a dedupe key the head lock and the insert are one statement (LOCK_AND_APPEND_SQL);
# with one the lock is a statement of its own before the key's lookup: both must wait.
@pytest.mark.parametrize("dedupe", [None, "second-writer"], ids=["lock-in-append", "lock-then-dedupe"])
def test_appends_to_one_session_commit_in_sequence_order(stores, dedupe):
    first, second = stores
    done: list[int] = []
    with first.transaction():
        held = append(first, dedupe=None if dedupe is None else "first-writer")[0]
        worker = threading.Thread(target=lambda: done.append(_append_in_transaction(second, dedupe)))
        worker.start()
        worker.join(0.3)
        # The second writer waits on the head row: its sequence is not taken yet.
        assert worker.is_alive() and done == []
        # Another session's head is free, and the next sequence is held + 1: the waiting
        # writer has not taken one (it takes it only once it holds the head's lock).
        with second_store_for_other_session(first) as other:
            assert other == held + 1
    worker.join(10)
    assert done and done[0] == held + 2
    assert first.head("agent:a:one", "a").last_sequence == done[0]


def _append_in_transaction(store, dedupe=None) -> int:
    with store.transaction():
        return append(store, dedupe=dedupe)[0]


class second_store_for_other_session:
    """A third connection appending to the other session while the first holds its lock."""

    def __init__(self, like):
        self.store = open_store(like.url, notifying_kinds=NOTIFYING_KINDS)

    def __enter__(self) -> int:
        with self.store.transaction():
            return append(self.store, key="agent:a:two")[0]

    def __exit__(self, *exc):
        self.store.close()


def test_same_dedupe_key_from_two_sessions_at_once_records_one_event(stores):
    first, second = stores
    results: list[tuple[int, bool]] = []
    with first.transaction():
        mine = append(first, dedupe="shared")
        worker = threading.Thread(target=lambda: results.append(_append_dedupe(second)))
        worker.start()
        worker.join(0.3)
    worker.join(10)
    assert mine[1] is True
    assert results == [(mine[0], False)]
    assert first.event_count() == 1
    assert first.head("agent:a:two", "a").last_sequence == 0


def _append_dedupe(store) -> tuple[int, bool]:
    with store.transaction():
        return append(store, key="agent:a:two", dedupe="shared")


def test_a_deadlock_is_a_retryable_conflict(stores):
    first, second = stores
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def cross(store, keys):
        try:
            with store.transaction():
                append(store, key=keys[0])
                barrier.wait()
                append(store, key=keys[1])
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=cross, args=(first, KEYS)),
               threading.Thread(target=cross, args=(second, KEYS[::-1]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(errors) == 1
    assert isinstance(errors[0], StorageConflict) and errors[0].retry_safe
    assert errors[0].__cause__ is not None  # the driver's error
    assert first.integrity_check() == "ok"


def test_connection_killed_mid_transaction_rolls_back_and_the_store_reconnects(stores):
    store = stores[0]
    before = store.dump()
    with pytest.raises(StorageUnavailable) as error:
        with store.transaction():
            append(store)
            terminate(backend_pid(store))
            append(store)
    assert error.value.retry_safe
    assert store.dump() == before  # reconnected; nothing of the killed transaction stayed
    with store.transaction():
        assert append(store)[1]


def test_record_event_survives_a_server_side_disconnect(pg_url):
    with Gateway.open(pg_url) as gw:
        gw.create_session("agent:a:one")
        terminate(backend_pid(gw.store))
        sequence = gw.record_event("agent:a:one", "compacted", actor_type="system", summary="after restart")
        assert sequence is not None
        assert gw.ops.state_version("agent:a:one") == sequence
        assert gw.ops.stats["append_failures"] == 0


def test_record_event_returns_none_when_the_server_stays_away(pg_url, monkeypatch):
    with Gateway.open(pg_url) as gw:
        gw.create_session("agent:a:one")
        gone = make_url(pg_url).update_query_dict({"host": "/nonexistent-sessionstate"})
        monkeypatch.setattr(gw.store, "_engine", __import__("sqlalchemy").create_engine(gone))
        terminate(backend_pid(gw.store))
        # R15: the turn goes on.
        assert gw.record_event("agent:a:one", "compacted", actor_type="system", summary="lost") is None
        assert gw.ops.stats["append_failures"] == 1


def test_refused_connection_and_unknown_role_are_typed(pg_url):
    refused = make_url(pg_url).update_query_dict({"host": "/nonexistent-sessionstate"})
    with pytest.raises(StorageUnavailable, match="unavailable") as error:
        Gateway.open(refused.render_as_string(hide_password=False))
    assert error.value.__cause__ is not None
    stranger = make_url(pg_url).set(username="no_such_role")
    with pytest.raises(StorageUnavailable, match="refused the login"):
        Gateway.open(stranger.render_as_string(hide_password=False))


def test_postgres_urls_without_the_driver_name_open_with_psycopg(pg_url):
    plain = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with Gateway.open(plain) as gw:
        gw.create_session("agent:a:one")
        assert gw.ops.session_exists("agent:a:one")


@pytest.mark.parametrize("url", ["postgresql://a\x00b@/x", "postgresql://u@/x\ud800", "postgresql://u@h:notaport/x"])
def test_malformed_postgres_urls_are_invalid_database_urls(url):
    from sessionstate.errors import InvalidDatabaseUrl

    with pytest.raises(InvalidDatabaseUrl):
        Gateway.open(url)


def test_a_read_only_connection_opens_with_owed_notices_in_memory(pg_url):
    """Issue 20's read-only open on a server: transactions that default to read-only (a
    standby, or a role set so) answer status and changesSince; the startup sweep writes
    nothing (it failed the open before)."""
    w, t = "agent:w:main", "agent:t:main"
    with Gateway.open(pg_url) as gw:
        gw.create_session(w)
        gw.create_session(t)
        gw.watch(w, t)
        for summary in ("one", "two", "three"):
            assert gw.record_event(t, "goal_changed", actor_type="human", summary=summary) is not None
        before = gw.store.dump()
    url = make_url(pg_url)
    read_only = url.update_query_dict({"options": url.query["options"] + " -cdefault_transaction_read_only=on"})
    with Gateway.open(read_only.render_as_string(hide_password=False), create=False) as gw:
        assert gw.store.read_only
        # w's and t's own `created` (R27) are 1 and 2: the watch starts at 2, the goals are 3-5.
        assert gw.pending_system_events(w) == [notice_text(t, 2)]
        assert gw.session_status(t, changes_since=1)["stateVersion"] == 5
        assert gw.store.dump() == before


def test_a_urls_application_name_passes_to_libpq_as_given(pg_url):
    """Issue 20: the store replaced it with its own; its own stays the default."""
    with Gateway.open(pg_url) as gw:
        assert gw.store.setting("application_name") == "sessionstate"
    named = make_url(pg_url).update_query_dict({"application_name": "billing-gateway"})
    with Gateway.open(named.render_as_string(hide_password=False), pump=True) as gw:
        assert gw.store.setting("application_name") == "billing-gateway"
        with admin_connection() as admin:
            names = {row[0] for row in admin.execute(
                "SELECT application_name FROM pg_stat_activity WHERE pid = ANY(%s)",
                ([gw.store.backend_pid(), gw.cluster.feed.backend_pid()],),
            ).fetchall()}
        assert names == {"billing-gateway"}  # the listening connection too


def _record_events_round_trips(url: str, count: int) -> list[list[str]]:
    """What one ``record_events`` call of ``count`` events on two sessions sends the server,
    round trip by round trip."""
    gw = Gateway.open(url, clock=lambda: 1_800_000_000.0)
    try:
        for key in KEYS:
            gw.create_session(key)
        events = [
            {"session_key": KEYS[i % 2], "kind": "compacted", "actor_type": "system", "summary": f"e{i}"}
            for i in range(count)
        ]
        with gw.store.trace_round_trips() as trips:
            sequences = gw.record_events(events)
        # The two sessions' own `created` (R27) are 1 and 2.
        assert sequences == list(range(3, count + 3))
        return trips
    finally:
        gw.close()


@pytest.mark.parametrize("count", [4, 24])
def test_a_batch_of_events_is_one_append_statement_in_two_round_trips(pg_url, count):
    """Group commit on PostgreSQL: the batch's appends go to the server as one statement, so
    a batch's statements do not grow with its events; and they go pipelined: BEGIN, the head
    locks and the append in one round trip, COMMIT in the other. The append returns the
    transaction's id (R29), so no read of it is sent before COMMIT."""
    trips = _record_events_round_trips(pg_url, count)
    sent = [s for trip in trips for s in trip]
    appends = [s for s in sent if "INSERT INTO session_state_events" in s]
    assert len(appends) == 1, sent
    assert not any("pg_current_xact_id_if_assigned" in s for s in sent), sent
    assert len(trips) == 2, trips
    assert trips[0][0] == "BEGIN" and "FOR UPDATE" in trips[0][1] and trips[0][2] == appends[0], trips
    assert trips[1] == ["COMMIT"], trips


def test_one_event_in_a_callers_transaction_learns_its_transaction_id_from_its_append(pg_url):
    """R29 needs the transaction's id before COMMIT; an event recorded in its caller's
    transaction (R9: statement by statement, decided in Python) has its append return it in
    its own round trip, so no extra read is sent: one statement a round trip (BEGIN, the
    record's savepoint, the locked append, the caught-up read, the cursor write, its release,
    NOTIFY + COMMIT). A
    transaction that wrote no event still reads it, before COMMIT is sent. (Outside a
    transaction a lone event is one round trip: test_postgres_lone_record.py.)"""
    gw = Gateway.open(pg_url, clock=lambda: 1_800_000_000.0, notify_on_create=False)
    try:
        for key in KEYS:
            gw.create_session(key)
        gw.watch(KEYS[0], KEYS[1])
        # Once untraced: a statement's first use prepares it in a round trip of its own.
        with gw.transaction():
            assert gw.record_event(KEYS[1], "goal_changed", actor_type="human", summary="x") is not None
        gw.drain_system_events(KEYS[0])  # caught up again
        with gw.store.trace_round_trips() as trips:
            with gw.transaction():
                assert gw.record_event(KEYS[1], "goal_changed", actor_type="human", summary="x") is not None
        sent = [s for trip in trips for s in trip]
        assert not any("pg_current_xact_id_if_assigned" in s for s in sent), sent
        assert [len(trip) for trip in trips] == [1] * 7, trips  # the record's own savepoint: two more
        assert trips[:2] == [["BEGIN"], ["SAVEPOINT sp1"]] and "pg_current_xact_id()" in trips[2][0], trips
        assert trips[5] == ["RELEASE sp1"], trips
        assert trips[-1][0].startswith("NOTIFY"), trips  # NOTIFY ...; COMMIT: one message
        with gw.store.trace_round_trips() as watched:
            gw.watch(KEYS[1], KEYS[0])  # writes a cursor, appends nothing, reads nothing back
        txid_read = [i for i, trip in enumerate(watched) if any("pg_current_xact_id_if_assigned" in s for s in trip)]
        assert txid_read == [len(watched) - 2], watched
        assert watched[-1][-1].startswith("NOTIFY "), watched  # NOTIFY ...; COMMIT (traced to its first quote)
    finally:
        gw.close()


def test_a_drain_is_two_round_trips_and_learns_its_transaction_id_from_its_read(pg_url):
    """Issue 49: BEGIN with the drain's lock-and-read function (its rows carry the
    transaction's id, R29), then one message: the acknowledgement, the commit witness,
    NOTIFY and COMMIT (traced up to its first quote)."""
    gw = Gateway.open(pg_url, clock=lambda: 1_800_000_000.0, notify_on_create=False)
    try:
        for key in KEYS:
            gw.create_session(key)
        gw.watch(KEYS[0], KEYS[1])
        seeded = gw.store.head(KEYS[1], "a")
        assert seeded is not None and gw.record_event(KEYS[1], "goal_changed", actor_type="human", summary="x")
        with gw.store.trace_round_trips() as drained:
            assert gw.drain_system_events(KEYS[0]) == [notice_text(KEYS[1], seeded.last_sequence)]
        assert len(drained) == 2 and all(len(trip) == 1 for trip in drained), drained
        assert drained[0][0].startswith("BEGIN; SELECT * FROM sessionstate_drain_read_"), drained
        assert drained[1][0].startswith("INSERT INTO session_watch_cursors "), drained
        assert not any("pg_current_xact_id_if_assigned" in s for trip in drained for s in trip), drained
        assert gw.drain_system_events(KEYS[0]) == []
        head = gw.store.head(KEYS[1], "a")
        assert head is not None
        assert gw.store.cursor(KEYS[0], KEYS[1], "a").positions == (head.last_sequence,) * 3  # acknowledged
    finally:
        gw.close()


def _notifying_batch_round_trips(url: str, count: int) -> list[list[str]]:
    """What one ``record_events`` call of ``count`` notifying events on two watched targets
    sends the server, round trip by round trip: every other event is by a watcher (its own
    cursor gets self_event and stays caught up, so each event still finds a caught-up
    cursor), the rest by nobody."""
    watchers, targets = ("agent:a:w1", "agent:a:w2"), ("agent:a:t1", "agent:a:t2")
    gw = Gateway.open(url, clock=lambda: 1_800_000_000.0, notify_on_create=False)
    try:
        for key in watchers + targets:
            gw.create_session(key)
        for watcher in watchers:
            for target in targets:
                gw.watch(watcher, target)
        events = [
            {"session_key": targets[i % 2], "kind": "goal_changed", "summary": f"e{i}",
             "actor_type": "agent" if i % 2 else "human", "actor_id": watchers[0] if i % 2 else None}
            for i in range(count)
        ]
        with gw.store.trace_round_trips() as trips:
            assert None not in gw.record_events(events)
        # W1 acted on t2 only: still caught up there; every other pair owes a notice.
        assert sorted(gw.pending_system_events(watchers[0])) == [notice_text(targets[0], 3)]
        assert len(gw.pending_system_events(watchers[1])) == 2
        return trips
    finally:
        gw.close()


@pytest.mark.parametrize("count", [4, 24])
def test_a_batchs_notice_decisions_are_one_read_and_one_write_in_two_round_trips(pg_url, count):
    """Issue 25: the caught-up cursors of every target of the batch in one read, every
    cursor change in one write, so a batch's statements do not grow with its notifying
    events. Issue 49: two round trips whatever the batch, the first pipelined (BEGIN, the
    head locks, the append and the read), the second one message: the write, NOTIFY and
    COMMIT (the write is the transaction's last statement, so it travels with the commit)."""
    # A statement's first use outside a pipeline prepares it in a round trip of its own, with
    # no statement run (an empty one here): the gateway is new.
    trips = [trip for trip in _notifying_batch_round_trips(pg_url, count) if trip]
    sent = [s for trip in trips for s in trip]
    reads = [s for s in sent if "FROM session_watch_cursors" in s]
    writes = [s for s in sent if "INSERT INTO session_watch_cursors" in s]
    assert len(reads) == 1 and len(writes) == 1, sent
    assert len(trips) == 2, trips
    assert trips[0][0] == "BEGIN" and "FOR UPDATE" in trips[0][1] and trips[0][3] == reads[0], trips
    # One simple query, traced up to its first quote: the write's literal rows, then NOTIFY, COMMIT.
    assert trips[1] == writes and writes[0].startswith("INSERT INTO session_watch_cursors"), trips
    assert not any("pg_current_xact_id_if_assigned" in s for s in sent), sent


@pytest.fixture
def store(pg_url: str) -> Iterator[Any]:
    with opened_store(pg_url, A, B, W) as opened:
        yield opened


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


@pytest.mark.parametrize("url, expected", [
    ("postgresql+psycopg://u@h/db", True), ("postgres://u@h/db", True), ("PostgreSQL://u@h/db", True),
    ("sqlite:///state.db", False), ("/var/state.db", False), (None, False), (5, False),
])
def test_is_postgres_url_by_the_scheme_alone(url, expected):
    assert is_postgres_url(url) is expected


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
