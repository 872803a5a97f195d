"""A lone record on PostgreSQL in one round trip (issue 49; spec R9, R22, R29).

Outside a caller's transaction one event is one message and one answer: ``BEGIN``, the
record function (lock, append, head, the table's decision on the caught-up cursors, the
change feed's ``NOTIFY``, the commit witness) and ``COMMIT``. Round trips are counted from
libpq's trace (``trace_round_trips``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sessionstate import Gateway, notice_text
from sessionstate.errors import UnknownSession
from sessionstate.store import commit_outcome, postgres_record
from sessionstate.store.commit_outcome import ABORTED, COMMITTED, UNKNOWN
from trials.pgproxy import AFTER_COMMIT, CommitDroppingProxy
from tests.store.second_connection import run_beside

T = "agent:a:target"
WATCHERS = ("agent:a:w1", "agent:a:w2", "agent:a:w3")


@pytest.fixture
def gw(pg_url: str) -> Iterator[Gateway]:
    gateway = Gateway.open(pg_url, clock=lambda: 1_800_000_000.0, notify_on_create=False, record_created=False)
    try:
        for key in (T, *WATCHERS):
            gateway.create_session(key)
        for watcher in WATCHERS:
            gateway.watch(watcher, T)
        yield gateway
    finally:
        gateway.close()


def cursors(url: str) -> list[tuple]:
    return run_beside(url, "SELECT watcher_session_key, last_seen_sequence, notified_sequence, material_sequence"
                           f" FROM session_watch_cursors WHERE target_session_key = '{T}' ORDER BY 1")


def one_message(trips: list[list[str]]) -> str:
    """The one statement of the one round trip ``trips`` holds (fails otherwise)."""
    assert len(trips) == 1 and len(trips[0]) == 1, trips
    return trips[0][0]


def test_a_lone_record_that_freezes_three_watchers_is_one_round_trip(gw: Gateway, pg_url: str) -> None:
    with gw.store.trace_round_trips() as trips:
        sequence = gw.record_event(T, "goal_changed", actor_type="human", summary="first")
    sent = one_message(trips)
    assert sent.startswith("BEGIN; SELECT * FROM " + gw.store.record_function), sent
    assert sequence is not None
    # freeze: (L, s, s), one notice since L each
    assert cursors(pg_url) == [(w, 0, sequence, sequence) for w in WATCHERS]
    for watcher in WATCHERS:
        assert gw.pending_system_events(watcher) == [notice_text(T, 0)]


def test_a_steady_state_record_and_a_log_only_one_are_one_round_trip_each(gw: Gateway, pg_url: str) -> None:
    first = gw.record_event(T, "goal_changed", actor_type="human", summary="first")
    with gw.store.trace_round_trips() as trips:
        later = gw.record_event(T, "goal_changed", actor_type="human", summary="later")
    one_message(trips)
    with gw.store.trace_round_trips() as trips:
        log_only = gw.record_event(T, "compacted", actor_type="system", summary="log only")
    one_message(trips)
    assert first is not None and later is not None and log_only is not None and first < later < log_only
    # Pending cursors are not written (R7): still frozen at the first event.
    assert cursors(pg_url) == [(w, 0, first, first) for w in WATCHERS]
    for watcher in WATCHERS:
        assert gw.pending_system_events(watcher) == [notice_text(T, 0)]


def test_the_actors_own_cursor_gets_self_event_and_stays_caught_up(gw: Gateway, pg_url: str) -> None:
    sequence = gw.record_event(T, "goal_changed", actor_type="agent", actor_id=WATCHERS[1], summary="mine")
    assert sequence is not None
    assert cursors(pg_url) == [(WATCHERS[0], 0, sequence, sequence), (WATCHERS[1], 0, 0, 0),
                               (WATCHERS[2], 0, sequence, sequence)]
    assert gw.pending_system_events(WATCHERS[1]) == []


def test_after_a_drain_the_next_record_freezes_from_the_new_last_seen(gw: Gateway, pg_url: str) -> None:
    first = gw.record_event(T, "goal_changed", actor_type="human", summary="first")
    assert gw.drain_system_events(WATCHERS[0]) == [notice_text(T, 0)]
    second = gw.record_event(T, "goal_changed", actor_type="human", summary="second")
    assert first is not None and second is not None
    assert cursors(pg_url)[0] == (WATCHERS[0], first, second, second)
    assert gw.pending_system_events(WATCHERS[0]) == [notice_text(T, first)]


def test_a_lone_record_on_an_unknown_session_raises_and_writes_nothing(gw: Gateway, pg_url: str) -> None:
    before = run_beside(pg_url, f"SELECT count(*), max(sequence) FROM session_state_events")
    witness = run_beside(pg_url, f"SELECT owner, witnessed FROM {commit_outcome.WITNESS_TABLE} ORDER BY 1")
    with pytest.raises(UnknownSession):
        gw.record_event("agent:a:nobody", "goal_changed", actor_type="human", summary="x")
    assert run_beside(pg_url, "SELECT count(*), max(sequence) FROM session_state_events") == before
    assert run_beside(pg_url, f"SELECT owner, witnessed FROM {commit_outcome.WITNESS_TABLE} ORDER BY 1") == witness
    assert gw.record_event(T, "goal_changed", actor_type="human", summary="after") is not None  # the connection is fine


def test_inside_a_callers_transaction_the_record_goes_statement_by_statement(gw: Gateway) -> None:
    """R9: a caller's transaction holds the commit, so nothing may commit on its own."""
    with gw.store.trace_round_trips() as trips:
        with gw.transaction():
            assert gw.record_event(T, "goal_changed", actor_type="human", summary="held") is not None
    sent = [s for trip in trips for s in trip]
    assert not any(gw.store.record_function in s for s in sent), sent
    assert len(trips) > 1


def test_a_decision_sees_a_cursor_seeded_while_it_waited_for_the_head_lock(gw: Gateway, pg_url: str) -> None:
    """The function's statements each take a fresh snapshot: a watch committed by a
    transaction that held the target's head while this record waited for it is frozen by
    the record, as statement by statement it would be."""
    late = "agent:a:late"
    gw.create_session(late)
    url = make_url(pg_url)
    options = dict(url.query)
    holder = psycopg.connect(host=str(options["host"]), dbname=url.database, user=url.username,
                             options=str(options["options"]))
    try:
        holder.execute("SELECT 1 FROM session_state_heads WHERE session_key = %s FOR UPDATE", (T,))
        holder.execute(
            "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key, target_agent_id,"
            " last_seen_sequence, notified_sequence, material_sequence, updated_at, provenance)"
            " VALUES (%s, %s, 'a', 0, 0, 0, 1, 'explicit')", (late, T))
        result: list[int | None] = []
        recorder = threading.Thread(target=lambda: result.append(
            gw.record_event(T, "goal_changed", actor_type="human", summary="waited")))
        recorder.start()
        time.sleep(0.3)  # the record is waiting for the head's lock
        assert recorder.is_alive()
        holder.commit()
        recorder.join(10)
    finally:
        holder.close()
    sequence = result[0]
    assert sequence is not None
    assert (late, 0, sequence, sequence) in cursors(pg_url)


def test_a_lost_answer_that_committed_returns_the_sequence_and_queues_the_frozen_notices(pg_url: str) -> None:
    url = make_url(pg_url)
    host = url.query["host"]
    proxy = CommitDroppingProxy(host if isinstance(host, str) else host[0])
    try:
        through = url.update_query_dict({"host": proxy.directory}).render_as_string(hide_password=False)
        gateway = Gateway.open(through, notify_on_create=False, record_created=False)
        try:
            for key in (T, *WATCHERS):
                gateway.create_session(key)
            for watcher in WATCHERS:
                gateway.watch(watcher, T)
            proxy.arm(AFTER_COMMIT)
            sequence = gateway.record_event(T, "goal_changed", actor_type="human", summary="lost")
            assert proxy.dropped == 1
            assert gateway.store.commit_resolutions == {COMMITTED: 1, ABORTED: 0, UNKNOWN: 0}  # type: ignore[attr-defined]
            assert run_beside(pg_url, "SELECT sequence FROM session_state_events WHERE summary = 'lost'") == [(sequence,)]
            for watcher in WATCHERS:
                assert gateway.pending_system_events(watcher) == [notice_text(T, 0)]
        finally:
            gateway.close()
    finally:
        proxy.close()


class _Server:
    """``connect`` for ``postgres_record.settle``: the old process is alive ``alive`` times."""

    def __init__(self, alive: int, witnessed: tuple[int, int] | None) -> None:
        self.alive, self.witnessed, self.ended = alive, witnessed, []
        self._row: tuple | None = None

    def connect(self) -> "_Server":
        return self

    def execute(self, sql: str, params: tuple = ()) -> "_Server":
        if sql == commit_outcome.TIMELINE_SQL:
            self._row = ("run-1",)
        elif sql.startswith("SELECT 1 FROM pg_stat_activity"):
            self._row = (1,) if self.alive > 0 else None
        elif sql.startswith("SELECT pg_terminate_backend"):
            self.ended.append(params[0])
            self.alive -= 1
            self._row = (True,)
        else:
            self._row = self.witnessed
        return self

    def fetchone(self) -> tuple | None:
        return self._row


def test_settle_ends_the_old_server_process_before_it_reads_the_witness() -> None:
    server = _Server(alive=1, witnessed=(7, 42))
    outcome = postgres_record.settle(server.connect, "run-1", (123, "start"), "owner", 7, sleep=lambda s: None)
    assert outcome == (COMMITTED, 42) and server.ended == [123]
    assert postgres_record.settle(_Server(0, (6, 41)).connect, "run-1", (123, "start"), "owner", 7) == (ABORTED, None)
    assert postgres_record.settle(_Server(0, None).connect, "run-1", (123, "start"), "owner", 7) == (ABORTED, None)


def test_settle_is_unknown_while_the_old_process_cannot_be_ended() -> None:
    clock = iter(range(1000))
    server = _Server(alive=10**6, witnessed=(7, 42))
    outcome = postgres_record.settle(server.connect, "run-1", (123, "start"), "owner", 7, seconds=3,
                                     sleep=lambda s: None, clock=lambda: float(next(clock)))
    assert outcome == (UNKNOWN, None) and server.ended


# Two ways the one message's transaction rolls back: the function's last statement (the
# witness write) fails, or its COMMIT does (a deferred trigger that refuses every event then);
# the SQL that makes it fail, the SQL that mends it, and the server's error.
ROLLBACKS = {
    "the function raises": (
        [f"ALTER TABLE {commit_outcome.WITNESS_TABLE} RENAME TO {commit_outcome.WITNESS_TABLE}_away"],
        [f"ALTER TABLE {commit_outcome.WITNESS_TABLE}_away RENAME TO {commit_outcome.WITNESS_TABLE}"],
        f'relation "{commit_outcome.WITNESS_TABLE}" does not exist',
    ),
    "the COMMIT fails": (
        ["CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS"
         " $$BEGIN RAISE EXCEPTION 'refused at commit'; END$$",
         "CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON session_state_events"
         " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()"],
        ["DROP TRIGGER refuse_at_commit ON session_state_events", "DROP FUNCTION refuse_at_commit()"],
        "refused at commit",
    ),
}


def durable(gw: Gateway, url: str) -> tuple:
    """What a lone record commits: the log, T's head, the cursors on T, the store's witness row."""
    return (run_beside(url, "SELECT count(*), max(sequence) FROM session_state_events"),
            run_beside(url, f"SELECT last_sequence FROM session_state_heads WHERE session_key = '{T}'"),
            cursors(url),
            run_beside(url, f"SELECT witnessed, sequence FROM {commit_outcome.WITNESS_TABLE}"
                            f" WHERE owner = '{gw.store.witness.owner}'"))  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", sorted(ROLLBACKS))
def test_a_lone_record_rolled_back_leaves_nothing_and_the_next_commits_with_its_sequence_and_notices(
    gw: Gateway, pg_url: str, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """R9 and R15 inside the one round trip: the append, the head, the freezes and the witness
    roll back together, nothing is queued and the record returns ``None``; the next record, on
    the same connection, commits as if the failed one had never been sent: a sequence past
    every committed one at T's head, the caught-up cursors frozen from their L, one notice each."""
    first = gw.record_event(T, "goal_changed", actor_type="human", summary="first")
    assert first is not None
    for watcher in WATCHERS:
        assert gw.drain_system_events(watcher) == [notice_text(T, 0)]  # caught up at first
    before = durable(gw, pg_url)
    assert before[1:3] == ([(first,)], [(w, first, first, first) for w in WATCHERS])
    fail, mend, error = ROLLBACKS[how]
    run_beside(pg_url, *fail)
    try:
        with gw.store.trace_round_trips() as trips:
            assert gw.record_event(T, "goal_changed", actor_type="human", summary="rolled back") is None
        # sent as the one message (its ROLLBACK follows where the function failed)
        assert trips[0][0].startswith("BEGIN; SELECT * FROM " + gw.store.record_function), trips
    finally:
        run_beside(pg_url, *mend)
    logged = [str(r.exc_info[1]) for r in caplog.records if r.exc_info]  # R15's log of the failure
    assert any(error in text for text in logged), logged  # it failed the way the case means
    assert durable(gw, pg_url) == before
    for watcher in WATCHERS:
        assert gw.pending_system_events(watcher) == []
    assert gw.ops.stats["append_failures"] == 1
    with gw.store.trace_round_trips() as trips:
        later = gw.record_event(T, "goal_changed", actor_type="human", summary="kept")
    one_message(trips)
    assert later is not None and later > first
    [(count, top)], head, positions, witness = durable(gw, pg_url)
    assert (count, top) == (before[0][0][0] + 1, later) and head == [(later,)]
    assert positions == [(w, first, later, later) for w in WATCHERS]
    assert witness[0][0] > before[3][0][0] and witness[0][1] == later
    assert run_beside(pg_url, f"SELECT summary FROM session_state_events WHERE sequence > {first}") == [("kept",)]
    for watcher in WATCHERS:
        assert gw.pending_system_events(watcher) == [notice_text(T, first)]
