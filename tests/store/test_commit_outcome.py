"""R29: a commit whose answer was lost is resolved, not guessed (PostgreSQL).

The unknown outcome is injected deterministically by a proxy in front of the test server
(trials/pgproxy.py): the COMMIT reaches the server and its answer is cut off
(the transaction committed), or the COMMIT is cut off (it rolled back), or, after the cut, no
server answers the resolution (unknown). Each case checks the drained lines, the log (raw
SQL) and what a later drain returns: no notice lost, no event acknowledged twice or dropped.
Also resolved: a batch (group commit) by its own transaction, a new store's first transaction;
a commit that wrote nothing counts as committed, one whose connection is gone before it is sent
is retryably unavailable, one lost before the server had it says its transaction rolled back.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import parse_qs

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sessionstate import Gateway
from sessionstate.errors import StorageError, StorageUnavailable
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import ChangeSet, SessionRecord, commit_outcome
from sessionstate.store.commit_outcome import ABORTED, COMMITTED, UNKNOWN, classify
from sessionstate.store.factory import open_store
from tests.backends import admin_connection
from tests.store.helpers import end_backend
from tests.store.sessions import A
from trials.pgproxy import AFTER_COMMIT, BEFORE_COMMIT

W = "agent:main:main"
T = "agent:main:group:lobby"


# -- the classification (pure) ----------------------------------------------------------------


def test_classify_trusts_committed_only_on_the_timeline_the_transaction_began_on() -> None:
    assert classify("committed", "00000001", "00000001") == COMMITTED
    assert classify("committed", "00000001", "00000002") == UNKNOWN  # a failover: maybe reissued
    assert classify("aborted", "00000001", "00000002") == ABORTED
    assert classify("in progress", "00000001", "00000001") is None  # ask again
    assert classify("in progress", "00000001", "00000002") == ABORTED  # another's transaction
    assert classify(None, "00000001", "00000001") == UNKNOWN  # history truncated
    assert classify("committed", None, None) == UNKNOWN


# -- the resolution's loop (pure: a fake connection, clock and sleep) -------------------------


class _Server:
    """``connect`` for ``resolve``: fails ``failures`` times, then answers ``row``; the clock
    moves one second per sleep."""

    def __init__(self, failures: int, row: tuple[object, ...] | None, error: Exception | None = None) -> None:
        self.failures, self.row, self.connects, self.sleeps = failures, row, 0, 0
        self.error = error or psycopg.OperationalError("connection refused")

    def connect(self) -> "_Server":
        self.connects += 1
        if self.connects <= self.failures:
            raise self.error
        return self

    def execute(self, sql: str, params: tuple[str]) -> "_Server":
        assert sql == commit_outcome.STATUS_SQL and params == ("741",)
        return self

    def fetchone(self) -> tuple[object, ...] | None:
        return self.row

    def sleep(self, seconds: float) -> None:
        assert seconds == commit_outcome.PAUSE_SECONDS
        self.sleeps += 1

    def clock(self) -> float:
        return float(self.sleeps)


def _resolve(server: _Server, seconds: float | None) -> str:
    return commit_outcome.resolve(server.connect, "741", "00000001", seconds=seconds,
                                  sleep=server.sleep, clock=server.clock)


def test_resolve_asks_again_until_a_server_answers() -> None:
    server = _Server(failures=2, row=("committed", "00000001"))
    assert _resolve(server, 5.0) == COMMITTED
    assert (server.connects, server.sleeps) == (3, 2)


def test_resolve_gives_up_unknown_at_its_deadline_and_not_before() -> None:
    # Four tries at t = 0, 1, 2, 3: the deadline (3 s) is reached at the fourth.
    server = _Server(failures=99, row=None)
    assert _resolve(server, 3.0) == UNKNOWN
    assert (server.connects, server.sleeps) == (4, 3)
    default = _Server(failures=10**6, row=None)
    assert _resolve(default, None) == UNKNOWN
    assert default.sleeps == commit_outcome.RESOLVE_SECONDS


def test_resolve_asks_again_while_the_transaction_is_in_progress() -> None:
    server = _Server(failures=0, row=("in progress", "00000001"))
    assert _resolve(server, 2.0) == UNKNOWN
    assert server.connects == 3


def test_an_id_the_answering_server_never_issued_is_aborted_at_once() -> None:
    future = psycopg.errors.lookup("22023")("transaction ID 741 is in the future")
    server = _Server(failures=99, row=None, error=future)
    assert _resolve(server, 5.0) == ABORTED
    assert (server.connects, server.sleeps) == (1, 0)


# -- the commit witness (pure: a fake connection) ---------------------------------------------


class _WitnessServer:
    """``connect`` for ``witnessed``: the owner's row holds ``number`` (None: no row), or
    the connection fails."""

    def __init__(self, number: int | None, *, fails: bool = False) -> None:
        self.number, self.fails, self.asked = number, fails, []

    def connect(self) -> "_WitnessServer":
        if self.fails:
            raise psycopg.OperationalError("connection refused")
        return self

    def execute(self, sql: str, params: tuple[str]) -> "_WitnessServer":
        assert sql == commit_outcome.WITNESS_READ_SQL
        self.asked.append(params)
        return self

    def fetchone(self) -> tuple[int] | None:
        return None if self.number is None else (self.number,)


def test_a_witness_holding_the_transactions_number_says_committed_and_any_other_aborted() -> None:
    own = _WitnessServer(7)
    assert commit_outcome.witnessed(own.connect, "ab12", 7) == COMMITTED
    assert own.asked == [("ab12",)]
    assert commit_outcome.witnessed(_WitnessServer(6).connect, "ab12", 7) == ABORTED  # an earlier drain's
    assert commit_outcome.witnessed(_WitnessServer(None).connect, "ab12", 7) == ABORTED  # never written
    assert commit_outcome.witnessed(_WitnessServer(7, fails=True).connect, "ab12", 7) == UNKNOWN


def test_a_witness_statement_names_its_owner_and_number_and_refuses_anything_but_a_plain_name() -> None:
    sql = commit_outcome.witness_statement("ab12", 3)
    assert sql.startswith(f"INSERT INTO {commit_outcome.WITNESS_TABLE} (owner, witnessed) VALUES ('ab12', 3)")
    assert "ON CONFLICT (owner) DO UPDATE SET witnessed = excluded.witnessed" in sql
    with pytest.raises(ValueError, match="a witness owner is a plain name, not \"x'; DROP"):
        commit_outcome.witness_statement("x'; DROP TABLE sessions; --", 1)


# -- a record's own rows as its witness (pure: a fake connection) ------------------------------


class _RowsServer:
    """``connect`` for ``rows_found``: holds ``found`` of the rows asked for, or fails."""

    def __init__(self, found: int, *, fails: bool = False) -> None:
        self.found, self.fails, self.asked = found, fails, []

    def connect(self) -> "_RowsServer":
        if self.fails:
            raise psycopg.OperationalError("connection refused")
        return self

    def execute(self, sql: str, params: tuple[list[object], ...]) -> "_RowsServer":
        assert sql == commit_outcome.ROWS_FOUND_SQL
        self.asked.append(params)
        return self

    def fetchone(self) -> tuple[int]:
        return (self.found,)


ROWS = [(41, T, 1700000000.25), (42, W, 1700000000.25)]


def test_a_records_rows_all_found_say_committed_none_aborted_and_some_or_no_answer_unknown() -> None:
    every = _RowsServer(2)
    assert commit_outcome.rows_found(every.connect, ROWS) == COMMITTED
    # one array per column, in the statement's order: sequences, sessions, recording times
    assert every.asked == [([41, 42], [T, W], [1700000000.25, 1700000000.25])]
    assert commit_outcome.rows_found(_RowsServer(0).connect, ROWS) == ABORTED
    assert commit_outcome.rows_found(_RowsServer(1).connect, ROWS) == UNKNOWN  # not one transaction's
    assert commit_outcome.rows_found(_RowsServer(2, fails=True).connect, ROWS) == UNKNOWN
    nothing = _RowsServer(0)
    assert commit_outcome.rows_found(nothing.connect, []) == UNKNOWN and nothing.asked == []


def test_settle_asks_the_rows_only_when_the_id_is_unknown_and_no_witness_was_written(monkeypatch) -> None:
    statuses = iter([COMMITTED, ABORTED, UNKNOWN, UNKNOWN, UNKNOWN])
    monkeypatch.setattr(commit_outcome, "resolve", lambda *args, **kwargs: next(statuses))
    rows, written = _RowsServer(0), _WitnessServer(5)
    witness = commit_outcome.CommitWitness()
    witness.owner, witness.number = "ab12", 5
    # the id's own answer stands: neither is asked
    assert commit_outcome.settle(rows.connect, "741", "t", None, ROWS) == COMMITTED
    assert commit_outcome.settle(rows.connect, "741", "t", None, ROWS) == ABORTED
    assert rows.asked == []
    # unknown: the witness decides when there is one (a drain), else the rows (a record)
    assert commit_outcome.settle(written.connect, "741", "t", witness, ROWS) == COMMITTED
    assert commit_outcome.settle(rows.connect, "741", "t", None, ROWS) == ABORTED and len(rows.asked) == 1
    assert commit_outcome.settle(rows.connect, "741", "t", None, []) == UNKNOWN and len(rows.asked) == 1
    # a transaction that wrote nothing has no id: committed without a question
    assert commit_outcome.settle(rows.connect, None, "t", None, ROWS) == COMMITTED


# -- the injected cases -----------------------------------------------------------------------


@pytest.fixture
def ids_unknown(monkeypatch) -> None:
    """The failover window (R29) without a failover: every transaction id's status answers
    only unknown, so a witness, or a record's own rows, must decide."""
    monkeypatch.setattr(commit_outcome, "resolve", lambda *args, **kwargs: UNKNOWN)


def resolved_once(outcome: str) -> dict[str, int]:
    """A store's ``commit_resolutions`` after one lost answer resolved as ``outcome``."""
    return {name: int(name == outcome) for name in (COMMITTED, ABORTED, UNKNOWN)}


def raw(direct_url: str, sql: str) -> list[tuple]:
    url = make_url(direct_url)
    options = parse_qs(url.render_as_string(hide_password=False).split("?", 1)[1])
    with psycopg.connect(host=options["host"][0], dbname=url.database, user=url.username,
                         options=options["options"][0], autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def world(url: str) -> Gateway:
    gw = Gateway.open(url, record_created=False, notify_on_create=False)
    gw.create_session(W)
    gw.create_session(T)
    gw.watch(W, T)
    assert gw.record_event(T, "human_direct_message", actor_type="human", summary="hello") is not None
    assert gw.pending_system_events(W), "the watcher owes a notice"
    return gw


@pytest.mark.parametrize("mode, outcome", [(AFTER_COMMIT, COMMITTED), (BEFORE_COMMIT, ABORTED)])
def test_a_drain_whose_commit_answer_is_lost_delivers_its_lines_once(proxied, mode: str, outcome: str) -> None:
    url, direct, proxy = proxied
    gw = world(url)
    try:
        expected = gw.pending_system_events(W)
        proxy.arm(mode)
        lines = gw.drain_system_events(W)
        assert proxy.dropped == 1, "the proxy cut a COMMIT off"
        assert gw.store.commit_resolutions[outcome] == 1  # type: ignore[attr-defined]
        assert lines == expected  # committed: returned; aborted: drained again
        assert gw.drain_system_events(W) == []  # acknowledged exactly once
        pending = raw(direct, "SELECT count(*) FROM session_watch_cursors WHERE notified_sequence <> last_seen_sequence")
        assert pending == [(0,)]
    finally:
        gw.close()


@pytest.mark.parametrize("mode, outcome", [(AFTER_COMMIT, COMMITTED), (BEFORE_COMMIT, ABORTED)])
def test_a_record_whose_commit_answer_is_lost_is_acknowledged_once_and_stored_once(
    proxied, mode: str, outcome: str
) -> None:
    url, direct, proxy = proxied
    gw = world(url)
    try:
        proxy.arm(mode)
        sequence = gw.record_event(T, "human_direct_message", actor_type="human", summary="again")
        assert proxy.dropped == 1
        assert gw.store.commit_resolutions[outcome] == 1  # type: ignore[attr-defined]
        assert sequence is not None, "resolved: acknowledged, not reported as failed"
        rows = raw(direct, "SELECT sequence FROM session_state_events WHERE summary = 'again'")
        assert rows == [(sequence,)]
    finally:
        gw.close()


def test_a_drain_whose_outcome_stays_unknown_returns_its_lines(proxied, monkeypatch) -> None:
    """No server answers the resolution: the spec's conservative choice, the lines are
    returned (a later drain may repeat them; none is lost)."""
    url, direct, proxy = proxied
    gw = world(url)
    monkeypatch.setattr(commit_outcome, "RESOLVE_SECONDS", 0.5)
    try:
        expected = gw.pending_system_events(W)
        proxy.arm(AFTER_COMMIT)
        proxy.refuse(1.5)
        lines = gw.drain_system_events(W)
        assert gw.store.commit_resolutions[UNKNOWN] == 1  # type: ignore[attr-defined]
        assert lines == expected
        # It did commit (the server had the COMMIT): the pair is acknowledged, nothing repeats.
        assert raw(direct, "SELECT count(*) FROM session_watch_cursors WHERE notified_sequence <> last_seen_sequence") == [(0,)]
    finally:
        gw.close()


@pytest.mark.parametrize("mode, outcome", [(AFTER_COMMIT, COMMITTED), (BEFORE_COMMIT, ABORTED)])
def test_a_claim_whose_commit_answer_is_lost_is_resolved(proxied, mode: str, outcome: str) -> None:
    """R29 for claims (R20): attach's answer lost; committed, the process serves the watcher
    and the row says so; aborted, it does not serve it and no row claims it for it."""
    url, direct, proxy = proxied
    gw = world(url)
    try:
        gw.cluster.register()  # a server without the pump's thread: the proxy sees only this
        proxy.arm(mode)
        if outcome == COMMITTED:
            assert gw.cluster.attach(W) >= 1
        else:
            with pytest.raises(StorageError):
                gw.cluster.attach(W)
        assert proxy.dropped == 1
        assert gw.store.commit_resolutions[outcome] == 1  # type: ignore[attr-defined]
        claimed = raw(direct, f"SELECT count(*) FROM session_claims WHERE session_key = '{W}'")
        assert (W in gw.cluster.attached()) is (outcome == COMMITTED)
        assert claimed == [(1 if outcome == COMMITTED else 0,)]
    finally:
        gw.close()


def test_a_rolled_back_append_does_not_lend_its_id_to_the_next_commit(proxied) -> None:
    """The append returns its transaction's id (R29); after that transaction rolls back, the
    gateway's next commit (a drain, no append) is resolved by its own id: with the stale one
    the server would answer 'aborted' for a drain that committed."""
    url, direct, proxy = proxied
    gw = world(url)
    try:
        expected = gw.pending_system_events(W)
        with pytest.raises(RuntimeError):
            with gw.store.transaction():
                assert gw.record_event(T, "goal_changed", actor_type="human", summary="undone") is not None
                raise RuntimeError("the caller gives up")
        assert raw(direct, "SELECT count(*) FROM session_state_events WHERE summary = 'undone'") == [(0,)]
        proxy.arm(AFTER_COMMIT)
        assert gw.drain_system_events(W) == expected
        assert proxy.dropped == 1
        assert gw.store.commit_resolutions[COMMITTED] == 1  # type: ignore[attr-defined]
        assert gw.store.commit_resolutions[ABORTED] == 0  # type: ignore[attr-defined]
        assert gw.drain_system_events(W) == []
    finally:
        gw.close()


@pytest.mark.parametrize("mode, outcome", [(AFTER_COMMIT, COMMITTED), (BEFORE_COMMIT, ABORTED)])
def test_a_drain_whose_id_answers_only_unknown_is_resolved_by_its_witness(
    proxied, ids_unknown, mode: str, outcome: str
) -> None:
    """The failover window (R29): ``pg_xact_status`` leaves the drain unknown (a `committed`
    answer on another timeline, where the promoted server may have issued the id again). The
    witness decides: committed, its lines are returned; rolled back, it drains again. Either
    way the lines come once and the pair is acknowledged once: no repeat, none lost."""
    url, direct, proxy = proxied
    gw = world(url)
    try:
        expected = gw.pending_system_events(W)
        proxy.arm(mode)
        lines = gw.drain_system_events(W)
        assert proxy.dropped == 1
        assert gw.store.commit_resolutions == resolved_once(outcome)  # type: ignore[attr-defined]
        assert lines == expected
        assert gw.drain_system_events(W) == []
        assert raw(direct, "SELECT count(*) FROM session_watch_cursors WHERE notified_sequence <> last_seen_sequence") == [(0,)]
    finally:
        gw.close()


def test_drains_and_lone_records_write_their_stores_witness_row_and_a_day_old_row_goes_at_the_next_open(
    proxied,
) -> None:
    """The witnessed transactions (a drain; a lone record outside a transaction, with the
    sequence it appended) number themselves in their store's one row; another store's row a
    day old goes when a store opens."""
    url, direct, proxy = proxied
    table = commit_outcome.WITNESS_TABLE
    Gateway.open(url).close()  # the first open creates the table
    raw(direct, f"INSERT INTO {table} (owner, witnessed, written_at) VALUES"
                " ('gone', 1, now() - interval '25 hours'), ('recent', 1, now() - interval '23 hours') RETURNING owner")
    gw = world(url)  # opens (the day-old row goes), creates, watches and records once: no drain yet
    try:
        owner = gw.store.witness.owner  # type: ignore[attr-defined]
        assert raw(direct, f"SELECT owner FROM {table} WHERE owner <> '{owner}'") == [("recent",)]
        first = raw(direct, "SELECT max(sequence) FROM session_state_events")[0][0]
        assert raw(direct, f"SELECT witnessed, sequence FROM {table} WHERE owner = '{owner}'") == [(1, first)]
        assert gw.drain_system_events(W)
        again = gw.record_event(T, "human_direct_message", actor_type="human", summary="again")
        assert raw(direct, f"SELECT witnessed, sequence FROM {table} WHERE owner = '{owner}'") == [(3, again)]
        assert gw.drain_system_events(W)
        assert raw(direct, f"SELECT witnessed FROM {table} WHERE owner = '{owner}'") == [(4,)]
        assert raw(direct, f"SELECT count(*) FROM {table}") == [(2,)]
    finally:
        gw.close()


@pytest.mark.parametrize("mode, outcome", [(AFTER_COMMIT, COMMITTED), (BEFORE_COMMIT, ABORTED)])
def test_a_record_whose_id_answers_only_unknown_is_resolved_by_its_own_rows(
    proxied, ids_unknown, mode: str, outcome: str
) -> None:
    """A record that goes statement by statement (here: one with a dedupe key, which the
    lone record's one round trip does not take) writes no witness: the rows it appended are
    looked for instead, by sequence, session and recording time. Found, it returns its
    sequence; not found, it retries (R15). Either way it is acknowledged once and stored once,
    and its store's witness row (an earlier drain's number) is not what answered for it."""
    url, direct, proxy = proxied
    gw = world(url)
    try:
        assert gw.drain_system_events(W)  # the store's witness row now holds the drain's number
        proxy.arm(mode)
        sequence = gw.record_event(T, "human_direct_message", actor_type="human", summary="lost", dedupe_key="lost-1")
        assert proxy.dropped == 1
        assert gw.store.commit_resolutions == resolved_once(outcome)  # type: ignore[attr-defined]
        assert sequence is not None
        assert raw(direct, "SELECT sequence FROM session_state_events WHERE summary = 'lost'") == [(sequence,)]
        assert gw.ops.stats["append_failures"] == 0
    finally:
        gw.close()


@pytest.mark.parametrize("mode, outcome", [(AFTER_COMMIT, COMMITTED), (BEFORE_COMMIT, ABORTED)])
def test_a_batchs_own_rows_resolve_it_and_a_row_found_by_its_dedupe_key_is_not_its_own(
    proxied, ids_unknown, mode: str, outcome: str
) -> None:
    """A burst of three: one finds its dedupe key already in the log (an earlier event's row,
    committed whatever this transaction did), two are appended. Only those two are looked
    for, so a rolled-back burst is not taken for committed by the earlier row."""
    url, direct, proxy = proxied
    gw = world(url)
    try:
        earlier = gw.record_event(T, "goal_changed", actor_type="human", summary="earlier", dedupe_key="k-1")
        assert earlier is not None
        proxy.arm(mode)
        burst = [
            {"session_key": T, "kind": "goal_changed", "actor_type": "human", "summary": "earlier", "dedupe_key": "k-1"},
            {"session_key": T, "kind": "human_direct_message", "actor_type": "human", "summary": "burst"},
            {"session_key": W, "kind": "goal_changed", "actor_type": "human", "summary": "burst"},
        ]
        sequences = gw.record_events(burst)
        assert proxy.dropped == 1
        assert gw.store.commit_resolutions == resolved_once(outcome)  # type: ignore[attr-defined]
        assert sequences[0] == earlier and None not in sequences
        stored = raw(direct, "SELECT sequence FROM session_state_events WHERE summary = 'burst' ORDER BY sequence")
        assert stored == [(sequences[1],), (sequences[2],)]
    finally:
        gw.close()


def test_a_rolled_back_records_rows_are_not_looked_for_in_the_next_commit(proxied, ids_unknown) -> None:
    """The rollback promise with a later commit from the same gateway: a record in a
    transaction its caller gives up is not in the log; the gateway's next record loses its
    answer and its id answers only unknown. Only the next record's own row is looked for, and
    it is found: committed (with the first one's row still kept, one of two would be found:
    unknown, ``None``)."""
    url, direct, proxy = proxied
    gw = world(url)
    try:
        with pytest.raises(RuntimeError):
            with gw.transaction():
                assert gw.record_event(T, "goal_changed", actor_type="human", summary="undone") is not None
                raise RuntimeError("the caller gives up")
        proxy.arm(AFTER_COMMIT)
        # A dedupe key: statement by statement, so its own rows (not a witness) resolve it.
        sequence = gw.record_event(T, "goal_changed", actor_type="human", summary="kept", dedupe_key="kept-1")
        assert proxy.dropped == 1
        assert gw.store.commit_resolutions == {COMMITTED: 1, ABORTED: 0, UNKNOWN: 0}  # type: ignore[attr-defined]
        assert sequence is not None
        assert raw(direct, "SELECT sequence, summary FROM session_state_events WHERE summary IN ('undone', 'kept')") \
            == [(sequence, "kept")]
    finally:
        gw.close()


def test_a_row_of_a_savepoint_that_rolled_back_is_not_looked_for(proxied, ids_unknown) -> None:
    """Inside one transaction an inner one (a savepoint) appends and rolls back; the outer
    one appends, and its COMMIT's answer is lost. Its own row is there, the inner one's is not
    (and was never to be): committed, not taken for a partial find."""
    url, direct, proxy = proxied
    gw = world(url)
    try:
        proxy.arm(AFTER_COMMIT)
        with gw.transaction():
            with pytest.raises(RuntimeError):
                with gw.transaction():
                    assert gw.record_event(T, "goal_changed", actor_type="human", summary="inner") is not None
                    raise RuntimeError("the inner one gives up")
            kept = gw.record_event(W, "goal_changed", actor_type="human", summary="outer")
        assert proxy.dropped == 1
        assert gw.store.commit_resolutions == {COMMITTED: 1, ABORTED: 0, UNKNOWN: 0}  # type: ignore[attr-defined]
        assert raw(direct, "SELECT sequence, summary FROM session_state_events WHERE summary IN ('inner', 'outer')") \
            == [(kept, "outer")]
    finally:
        gw.close()


def test_a_stores_first_write_carries_no_witness_unless_it_asks_for_one(pg_url) -> None:
    store = open_store(pg_url, notifying_kinds=NOTIFYING_KINDS)
    try:
        owner = store.witness.owner  # type: ignore[attr-defined]
        with store.transaction():
            store.insert_session(SessionRecord("agent:a:main", "a", "main", None, None, None, 1.0, 1.0))
        table = commit_outcome.WITNESS_TABLE
        assert raw(pg_url, f"SELECT count(*) FROM {table} WHERE owner = '{owner}'") == [(0,)]
        with store.transaction():
            store.witness_commit()
            store.insert_session(SessionRecord("agent:b:main", "b", "main", None, None, None, 1.0, 1.0))
        assert raw(pg_url, f"SELECT witnessed FROM {table} WHERE owner = '{owner}'") == [(1,)]
    finally:
        store.close()


@pytest.mark.parametrize("mode, outcome", [(AFTER_COMMIT, COMMITTED), (BEFORE_COMMIT, ABORTED)])
def test_an_attach_whose_id_answers_only_unknown_is_resolved_by_its_witness(
    proxied, ids_unknown, mode: str, outcome: str
) -> None:
    """R29 for claims: committed, the process serves the watcher; rolled back, a retry-safe
    error and no claim. Never the unknown outcome's ``retry_safe`` false."""
    url, direct, proxy = proxied
    gw = world(url)
    try:
        gw.cluster.register()
        proxy.arm(mode)
        if outcome == COMMITTED:
            assert gw.cluster.attach(W) >= 1
        else:
            with pytest.raises(StorageError) as raised:
                gw.cluster.attach(W)
            assert raised.value.retry_safe
        assert proxy.dropped == 1
        assert gw.store.commit_resolutions == resolved_once(outcome)  # type: ignore[attr-defined]
        assert (W in gw.cluster.attached()) is (outcome == COMMITTED)
        claimed = raw(direct, f"SELECT count(*) FROM session_claims WHERE session_key = '{W}'")
        assert claimed == [(1 if outcome == COMMITTED else 0,)]
    finally:
        gw.close()


def test_after_a_witnessed_drain_rolled_back_the_next_lost_answer_is_resolved_by_its_own_number(
    proxied, ids_unknown
) -> None:
    """The rollback promise with a later commit from the same gateway: the first drain's
    COMMIT never arrives (its number is used, the row keeps the older one), it drains again;
    then a new notice's drain loses only its answer and is found committed by its own number,
    not taken for rolled back by the gap the first left."""
    url, direct, proxy = proxied
    gw = world(url)
    table = commit_outcome.WITNESS_TABLE
    owner = gw.store.witness.owner  # type: ignore[attr-defined]
    try:
        first = gw.pending_system_events(W)
        proxy.arm(BEFORE_COMMIT)
        # world's lone record was number 1
        assert gw.drain_system_events(W) == first  # rolled back (number 2), drained again (3)
        assert raw(direct, f"SELECT witnessed FROM {table} WHERE owner = '{owner}'") == [(3,)]
        assert gw.record_event(T, "human_direct_message", actor_type="human", summary="later") is not None
        second = gw.pending_system_events(W)
        assert second and second != first
        proxy.arm(AFTER_COMMIT)
        assert gw.drain_system_events(W) == second  # number 5 (the record was 4), committed
        assert gw.store.commit_resolutions == {COMMITTED: 1, ABORTED: 1, UNKNOWN: 0}  # type: ignore[attr-defined]
        assert proxy.dropped == 2
        assert gw.drain_system_events(W) == []
        # The drain that owed nothing wrote nothing: the row holds the last committed number.
        assert raw(direct, f"SELECT witnessed FROM {table} WHERE owner = '{owner}'") == [(5,)]
    finally:
        gw.close()


def test_a_new_stores_first_transaction_whose_commit_answer_is_lost_is_resolved(proxied, monkeypatch):
    url, _direct, proxy = proxied
    monkeypatch.setattr(commit_outcome, "RESOLVE_SECONDS", 2.0)  # a wrong id is not waited on long
    store = open_store(url, notifying_kinds=NOTIFYING_KINDS)
    try:
        proxy.arm(AFTER_COMMIT)
        with store.transaction():  # the store's first: no earlier one left it an id
            store.insert_session(SessionRecord(A, "a", "main", None, None, None, 1.0, 1.0))
        assert proxy.dropped == 1
        assert store.commit_resolutions == {COMMITTED: 1, ABORTED: 0, UNKNOWN: 0}
        assert store.head(A, "a") is not None
    finally:
        store.close()


def test_a_transaction_that_sent_nothing_commits_its_notification_and_leaves_no_transaction_open(pg_store):
    feed = pg_store.open_change_feed(tuple(NOTIFYING_KINDS))
    try:
        with pg_store.transaction():  # no statement: the notification is all it sends
            pg_store.note_changed_watchers(["agent:a:w1"])
        feed.sync()
        assert feed.take() == ChangeSet([], ["agent:a:w1"], [], False)
    finally:
        feed.close()
    pg_store.head(A, "a")  # a statement outside any transaction
    with admin_connection() as admin:
        state = admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s",
                              (pg_store.backend_pid(),)).fetchone()
    assert state == ("idle",)


def test_a_commit_whose_connection_is_gone_before_it_is_sent_is_retryably_unavailable(pg_store):
    with pytest.raises(StorageUnavailable) as lost, pg_store.transaction():
        pg_store.put_cursors("agent:a:t", "a", [("agent:a:w1", (0, 1, 1))], 1.0)  # a write, not an append
        end_backend(pg_store.backend_pid())
    assert lost.value.retry_safe and "None" not in str(lost.value), str(lost.value)
    assert pg_store.cursors_naming("agent:a:t", "a") == []  # the server rolled it back


def test_lost_commit_answers_of_transactions_that_wrote_nothing_count_as_committed(proxied):
    url, _direct, proxy = proxied
    store = open_store(url, notifying_kinds=NOTIFYING_KINDS)
    try:
        for _ in range(2):
            proxy.arm(AFTER_COMMIT)
            with store.transaction():  # a read only: no transaction id, nothing to resolve
                assert store.head(A, "a") is None
        assert proxy.dropped == 2
        assert store.commit_resolutions == {COMMITTED: 2, ABORTED: 0, UNKNOWN: 0}
    finally:
        store.close()


def test_a_commit_lost_before_the_server_had_it_says_its_transaction_rolled_back(proxied):
    url, _direct, proxy = proxied
    store = open_store(url, notifying_kinds=NOTIFYING_KINDS)
    try:
        proxy.arm(BEFORE_COMMIT)
        with pytest.raises(StorageUnavailable) as lost, store.transaction():
            store.insert_session(SessionRecord(A, "a", "main", None, None, None, 1.0, 1.0))
        assert lost.value.retry_safe
        assert re.fullmatch(r"PostgreSQL connection lost during commit; transaction \d+ rolled back",
                            str(lost.value)), str(lost.value)
        assert store.head(A, "a") is None and store.commit_resolutions[ABORTED] == 1
    finally:
        store.close()


KEYS = ("agent:main:one", "agent:main:two")


@pytest.mark.parametrize("mode, outcome", [(AFTER_COMMIT, COMMITTED), (BEFORE_COMMIT, ABORTED)])
def test_a_batch_whose_commit_answer_is_lost_is_resolved_by_its_own_transaction(proxied, mode, outcome):
    url, _direct, proxy = proxied
    gw = Gateway.open(url, record_created=False, notify_on_create=False)
    try:
        for key in KEYS:
            gw.create_session(key)
        events = [{"session_key": key, "kind": "compacted", "actor_type": "system", "summary": f"batch {i}"}
                  for i, key in enumerate(KEYS * 2)]
        proxy.arm(mode)
        sequences = gw.record_events(events)
        assert proxy.dropped == 1
        assert gw.store.commit_resolutions[outcome] == 1  # type: ignore[attr-defined]
        assert None not in sequences, "resolved: acknowledged, not reported as failed"
        stored = [e.sequence for key in KEYS for e in gw.store.events_after(key, "main", 0, 10)]
        assert sorted(stored) == sorted(sequences)  # each stored once
    finally:
        gw.close()
