"""The PostgreSQL backend against raw psycopg doing the same SQL, in the same run.

Needs a server: ``SESSIONSTATE_TEST_PG_URL`` (``scripts/pg-test-server run ./dev bench``);
without it every benchmark here skips. Each module run gets its own schema.

The raw baseline (``RawPg``) is one autocommit psycopg connection running, at the same
transaction boundaries, the very statements ``PostgresStore`` runs (imported from it, so they
cannot drift apart), prepared on the server: head lock with insert + head bump (one
statement), the caught-up read, the cursor upsert (one statement for up to 16 rows); and
for ``changesSince`` the head with the earliest sequence, then the page. It does that SQL and
nothing else: no validation, no protocol machine, no queue, no ``NOTIFY``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from typing import Any, Iterator

import pytest
from _support import KIND, NOW, SMOKE, TARGET, clear_queue, paired, scaled, watcher_key

PG_URL = os.environ.get("SESSIONSTATE_TEST_PG_URL")
pytestmark = pytest.mark.skipif(not PG_URL, reason="needs SESSIONSTATE_TEST_PG_URL (scripts/pg-test-server)")

AGENT = "main"
EVENT = {"actor_type": "human", "summary": "hello"}
PENDING = scaled(1_000, 50)
PAGE_ROWS = scaled(50_000, 2_000)
PRUNE_ROWS, PRUNE_KEEP = scaled(60_000, 3_000), scaled(50_000, 2_500)
THROUGHPUT_EVENTS = scaled(400, 20)


def _connect(url: str) -> Any:
    import psycopg
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    query = {k: v for k, v in parsed.query.items() if isinstance(v, str)}
    return psycopg.connect(dbname=parsed.database, user=parsed.username, password=parsed.password,
                           host=parsed.host or query.pop("host", None), port=parsed.port, autocommit=True, **query)


@pytest.fixture
def pg_schema() -> Iterator[str]:
    from sqlalchemy.engine import make_url

    assert PG_URL is not None
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with _connect(PG_URL) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    yield make_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False)
    with _connect(PG_URL) as admin:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")


def _gateway(url: str, **kwargs: Any) -> Any:
    from sessionstate import Gateway

    return Gateway.open(url, clock=lambda: NOW, **kwargs)


def _populate(url: str, *, watchers: int, rows: int = 1_000, sessions: int = 10, pending: int = 0) -> None:
    """Sessions, ``rows`` events round-robin (a quarter notifying), ``watchers`` caught-up
    cursors on TARGET and ``pending`` more that already hold a notice. The log holds the bulk
    rows only (no R27 ``created`` events), so the sizes below count rows exactly."""
    gw = _gateway(url, record_created=False, notify_on_create=False)
    keys = [TARGET] + [f"agent:main:subagent:s{i}" for i in range(1, sessions)]
    for key in keys:
        gw.create_session(key)
    gw.close()
    with _connect(url) as db:
        db.execute(
            "INSERT INTO session_state_events (session_key, agent_id, kind, actor_type, summary,"
            " occurred_at, recorded_at) SELECT (%s::text[])[1 + (i %% %s)], %s,"
            " CASE WHEN i %% 4 = 0 THEN %s ELSE 'run_completed' END, 'human', 'bulk', %s, %s"
            " FROM generate_series(0, %s - 1) AS i",
            (keys, len(keys), AGENT, KIND, NOW, NOW, rows),
        )
        db.execute(
            "UPDATE session_state_heads h SET last_sequence = coalesce((SELECT max(sequence)"
            " FROM session_state_events e WHERE e.session_key = h.session_key), 0)"
        )
        head = db.execute("SELECT last_sequence FROM session_state_heads WHERE session_key = %s",
                          (TARGET,)).fetchone()[0]
        with db.cursor() as cur:
            cur.executemany(
                "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key, target_agent_id,"
                " last_seen_sequence, notified_sequence, material_sequence, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [(watcher_key(i), TARGET, AGENT, head, head, head, NOW) for i in range(watchers)]
                + [(watcher_key(watchers + i), TARGET, AGENT, head - 1, head, head, NOW) for i in range(pending)],
            )
        db.execute("ANALYZE")


_RESET_CAUGHT_UP = (
    "UPDATE session_watch_cursors c SET last_seen_sequence = h.last_sequence,"
    " notified_sequence = h.last_sequence, material_sequence = h.last_sequence"
    " FROM session_state_heads h WHERE h.session_key = c.target_session_key"
    " AND c.target_session_key = {p} AND ({p}::text IS NULL OR c.watcher_session_key = {p})"
)


def _reset_caught_up(side: Any, watcher: str | None = None, target: str = TARGET) -> None:
    """Put every cursor on ``target`` (or just ``watcher``'s) back to caught up at the head,
    through the connection about to be timed: a raw psycopg connection, or a gateway's own
    store connection (``store.db``). A reset through another connection leaves the timed
    connection's server process idle meanwhile, and its next transaction then ran ~50 %
    slower (every statement, BEGIN included), which the raw side, resetting on its own
    connection, never paid."""
    args = (target, watcher, watcher)
    db = side.store.db if hasattr(side, "store") else side
    db.execute(_RESET_CAUGHT_UP.format(p="%s"), args)


class RawPg:
    """PostgresStore's statements on a raw psycopg connection, same transaction boundaries."""

    def __init__(self, url: str) -> None:
        from sessionstate.statemachine import NOTIFYING_KINDS
        from sessionstate.store import postgres_statements
        from sessionstate.store.dialect import POSTGRES
        from sessionstate.store.statements import CoreStatements

        self.pg_sql = postgres_statements
        self.sql = CoreStatements(POSTGRES, sorted(NOTIFYING_KINDS))
        self.db = _connect(url)
        self.cur = self.db.cursor()

    def close(self) -> None:
        self.db.close()

    def record(self, key: str = TARGET) -> None:
        sql, cur = self.sql, self.cur
        cur.execute("BEGIN")
        sequence = cur.execute(
            self.pg_sql.LOCK_AND_APPEND_SQL,
            (key, AGENT, key, AGENT, KIND, "human", None, None, "hello", None, NOW, NOW, None, NOW, key, AGENT),
            prepare=True,
        ).fetchone()[0]
        rows = cur.execute(sql.caught_up_watchers, (key, AGENT), prepare=True).fetchall()
        changes = [(w, key, AGENT, last, sequence, sequence, NOW) for w, last, _, _ in rows]
        if len(changes) == 1:
            cur.execute(sql.put_cursor, changes[0], prepare=True)
        elif 1 < len(changes) <= self.pg_sql.PUT_CURSORS_MAX_ROWS:
            cur.execute(sql.put_cursors(len(changes)), [v for c in changes for v in c], prepare=True)
        elif changes:
            cur.executemany(sql.put_cursor, changes)
        cur.execute("COMMIT")

    def page(self, key: str, after: int, limit: int = 201) -> list[Any]:
        sql, cur = self.sql, self.cur
        head = cur.execute(sql.head_and_earliest, (key, AGENT), prepare=True).fetchone()
        rows = cur.execute(sql.event_page, (key, AGENT, after, limit), prepare=True).fetchall()
        return [head, rows]


@pytest.mark.parametrize("watchers", [1, 3])
def test_pg_record(benchmark, pg_schema, watchers):
    """One material event per transaction; the project's ``record_event`` against ``RawPg.record``
    on the same database, alternately, each from caught-up watchers."""
    _populate(pg_schema, watchers=watchers)
    gw = _gateway(pg_schema)
    raw = RawPg(pg_schema)

    def setup_project() -> None:
        _reset_caught_up(gw)
        clear_queue(gw)

    paired(benchmark, gw.record_event, raw.record, key=f"pg.record.w{watchers}", rounds_full=1000,
           setup_project=setup_project, setup_other=lambda: _reset_caught_up(raw.db),
           args=(TARGET, KIND), kwargs=EVENT)
    assert len(gw.ops.diagnostics().queued) == watchers
    raw.close()
    gw.close()


def test_pg_record_pending(benchmark, pg_schema):
    """TARGET has 1 caught-up watcher plus PENDING watchers already holding a notice; another
    session of the same database has 1 caught-up watcher only. The project records on each,
    alternately: the ratio is what the pending watchers cost."""
    _populate(pg_schema, watchers=1, pending=PENDING)
    alone = "agent:main:subagent:s1"
    admin = _connect(pg_schema)
    head = admin.execute("SELECT last_sequence FROM session_state_heads WHERE session_key = %s", (alone,)).fetchone()[0]
    admin.execute("INSERT INTO session_watch_cursors (watcher_session_key, target_session_key, target_agent_id,"
                " last_seen_sequence, notified_sequence, material_sequence, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                  ("agent:main:subagent:solo", alone, AGENT, head, head, head, NOW))
    gw = _gateway(pg_schema)

    def setup_pending() -> None:
        _reset_caught_up(gw, watcher=watcher_key(0))
        clear_queue(gw)

    def setup_alone() -> None:
        _reset_caught_up(gw, target=alone)
        clear_queue(gw)

    paired(benchmark, gw.record_event, lambda: gw.record_event(alone, KIND, **EVENT), key="pg.record.pending",
           rounds_full=1000, setup_project=setup_pending, setup_other=setup_alone, args=(TARGET, KIND),
           kwargs=EVENT, pending=PENDING)
    admin.close()
    gw.close()


def test_pg_changes_since_page(benchmark, pg_schema):
    """A full page of 200 from the middle of the target's log at PAGE_ROWS rows."""
    _populate(pg_schema, watchers=3, rows=PAGE_ROWS)
    raw = RawPg(pg_schema)
    seqs = [r[0] for r in raw.db.execute(
        "SELECT sequence FROM session_state_events WHERE session_key = %s ORDER BY sequence", (TARGET,))]
    since = seqs[len(seqs) // 2]
    expect = min(200, len(seqs) - len(seqs) // 2 - 1)
    gw = _gateway(pg_schema)
    result = paired(benchmark, gw.session_status, raw.page, key="pg.page.full", rounds_full=1000,
                    args=(TARGET,), kwargs={"changes_since": since}, other_args=(TARGET, since), rows=PAGE_ROWS)
    assert len(result["stateChanges"]["events"]) == expect
    assert len(raw.page(TARGET, since)[1][:200]) == expect
    raw.close()
    gw.close()


def test_pg_prune_chunk_lock(benchmark, pg_schema):
    """Prune PRUNE_ROWS -> PRUNE_KEEP; each chunk is one transaction holding its head-row and
    deleted-row locks until its commit, so the longest chunk transaction is the longest time
    a writer on those sessions can wait."""
    from sessionstate.store.postgres import PostgresStore

    _populate(pg_schema, watchers=3, rows=PRUNE_ROWS)
    gw = _gateway(pg_schema, max_rows=PRUNE_KEEP, auto_prune=False)  # the benchmark prunes (R30 would at open)
    store = gw.store
    durations: list[float] = []
    original = PostgresStore._prune_chunk

    def timed(self: Any, *chunk: Any) -> int:  # whatever the chunk's arguments are
        began = time.perf_counter()
        try:
            return original(self, *chunk)
        finally:
            durations.append(time.perf_counter() - began)

    PostgresStore._prune_chunk = timed  # type: ignore[method-assign]
    try:
        result = benchmark.pedantic(store.prune_events, args=(0.0, PRUNE_KEEP), rounds=1, iterations=1)
    finally:
        PostgresStore._prune_chunk = original  # type: ignore[method-assign]
    benchmark.extra_info.update(key="pg.prune", chunks=result["chunks"], events=result["events"],
                                longest_chunk_ms=max(durations) * 1e3,
                                median_chunk_ms=sorted(durations)[len(durations) // 2] * 1e3, smoke=SMOKE, rows=PRUNE_ROWS)
    assert result["events"] == PRUNE_ROWS - PRUNE_KEEP
    gw.close()


WRITER = """
import random, sys, time
from sessionstate import Gateway
url, index, events, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
rng = random.Random(index)
targets = ["agent:main:subagent:shared", f"agent:main:subagent:own{index}"]
with Gateway.open(url) as gw:
    time.sleep(max(0.0, start - time.time()))
    began = time.perf_counter()
    for _ in range(events):
        assert gw.record_event(rng.choice(targets), "human_direct_message", actor_type="human", summary="x")
    print(time.perf_counter() - began)
"""


@pytest.mark.parametrize("writers", [1, 2, 4])
def test_pg_throughput(benchmark, pg_schema, writers):
    """``writers`` processes appending at once, half to one shared session (their appends
    wait on its head-row lock) and half to their own; appends per second over all of them."""
    gw = _gateway(pg_schema)
    gw.create_session("agent:main:main")
    gw.create_session("agent:main:subagent:shared")
    gw.watch("agent:main:main", "agent:main:subagent:shared")
    for i in range(writers):
        gw.create_session(f"agent:main:subagent:own{i}")
        gw.watch("agent:main:main", f"agent:main:subagent:own{i}")
    gw.close()

    def run() -> float:
        start = time.time() + 1.5
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, pg_schema, str(i), str(THROUGHPUT_EVENTS), str(start)],
                                  stdout=subprocess.PIPE, text=True) for i in range(writers)]
        seconds = [float(p.communicate(timeout=600)[0].strip()) for p in procs]
        assert all(p.returncode == 0 for p in procs)
        return writers * THROUGHPUT_EVENTS / max(seconds)

    rate = benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(key=f"pg.throughput.w{writers}", writers=writers, appends_per_second=rate,
                                events_per_writer=THROUGHPUT_EVENTS, smoke=SMOKE)
