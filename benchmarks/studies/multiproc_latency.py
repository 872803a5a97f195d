"""Several processes: commit-to-drainable latency across processes, the pump's idle CPU.

Backs docs/performance.md, "Several processes", and docs/performance-postgres.md, "Several
processes on PostgreSQL".

Run: ./dev run .venv/bin/python benchmarks/studies/multiproc_latency.py [episodes]
     scripts/pg-test-server run ./dev run .venv/bin/python benchmarks/studies/multiproc_latency.py --postgres [episodes]

Process A (a child process) records one material event per episode and reports the wall-clock
time right after its commit; process B (this one) serves the watcher with the change pump and
notes when the notice enters its queue. Episodes are spaced 0.4-0.7 s apart, so every event
meets a pump that has backed off to its idle interval (250 ms): the worst case. The raw
baseline runs the same two processes with a bare ``sqlite3`` writer and a bare
``PRAGMA data_version`` poller with the same back-off, so the ratio shows what the sweep adds
over the polling itself. Idle CPU: B with its pump and nothing happening, for 20 s, against
the bare poller.

With ``--postgres`` (a server named by SESSIONSTATE_TEST_PG_URL; each run in a schema of its
own) B's pump listens for the notification A's commit carries; the raw baseline is a bare
psycopg writer that inserts and sends ``NOTIFY`` in one transaction, and a bare listener.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import os
import uuid
from contextlib import contextmanager
from typing import Any, Iterator

from sessionstate import Gateway
from sessionstate.services.change_pump import MIN_POLL_SECONDS
from sessionstate.store.postgres_feed import PostgresChangeFeed
from sessionstate.store.sqlite_feed import SqliteChangeFeed

MAX_POLL_SECONDS = SqliteChangeFeed.longest_wait
LISTEN_WAIT_SECONDS = PostgresChangeFeed.longest_wait

PG_URL_ENV = "SESSIONSTATE_TEST_PG_URL"
PROBE_CHANNEL = "latency_probe"

W, T = "agent:a:main", "agent:b:main"


def writer(mode: str, path: str) -> None:
    """Process A: one commit per line read; prints the time after the commit."""
    if mode == "project":
        gw = Gateway.open(path if "://" in path else f"sqlite:///{path}", serve=[])
        record = lambda: gw.record_event(T, "human_direct_message", actor_type="human", summary="hi")  # noqa: E731
    elif "://" in path:  # the raw PostgreSQL writer
        pg = _pg_connect(path)

        def record() -> None:
            with pg.transaction():
                pg.execute("INSERT INTO probe (at) VALUES (0)")
                pg.execute(f"NOTIFY {PROBE_CHANNEL}, 'x'")
    else:
        db = sqlite3.connect(path, isolation_level=None)

        def record() -> None:
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO probe (at) VALUES (0)")
            db.execute("COMMIT")
    for _ in sys.stdin:
        record()
        print(time.time(), flush=True)


class RawPoller:
    """The baseline: a bare data_version poller with the pump's back-off."""

    def __init__(self, path: str, on_change) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.on_change = on_change
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        version = self.db.execute("PRAGMA data_version").fetchone()[0]
        interval = MIN_POLL_SECONDS
        while not self.stop.wait(interval):
            now = self.db.execute("PRAGMA data_version").fetchone()[0]
            if now != version:
                version = now
                self.db.execute("SELECT max(id) FROM probe").fetchone()
                self.on_change()
                interval = MIN_POLL_SECONDS
            else:
                interval = min(interval * 2, MAX_POLL_SECONDS)


def _pg_connect(url: str) -> Any:
    import psycopg
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    query = {k: v for k, v in parsed.query.items() if isinstance(v, str)}
    return psycopg.connect(dbname=parsed.database, user=parsed.username, password=parsed.password,
                           host=parsed.host or query.pop("host", None), port=parsed.port,
                           autocommit=True, **query)


@contextmanager
def pg_schema() -> Iterator[str]:
    """A schema of its own in the server named by SESSIONSTATE_TEST_PG_URL, dropped afterwards."""
    from sqlalchemy.engine import make_url

    url = os.environ.get(PG_URL_ENV)
    if not url:
        raise SystemExit(f"--postgres needs {PG_URL_ENV} (scripts/pg-test-server run ...)")
    schema = f"latency_{uuid.uuid4().hex[:12]}"
    with _pg_connect(url) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield make_url(url).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
            hide_password=False
        )
    finally:
        with _pg_connect(url) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


class RawListener:
    """The PostgreSQL baseline: a bare listening connection, blocking on its socket."""

    def __init__(self, url: str, on_change) -> None:
        self.conn = _pg_connect(url)
        self.conn.execute(f"LISTEN {PROBE_CHANNEL}")
        self.on_change = on_change
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.conn.close()

    def run(self) -> None:
        while not self.stop.is_set():
            for _ in self.conn.notifies(timeout=LISTEN_WAIT_SECONDS, stop_after=1):
                self.on_change()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(mode: str, episodes: int, directory: Path, pg_url: str | None = None) -> list[float]:
    path = pg_url or str(directory / f"{mode}.db")
    url = pg_url or f"sqlite:///{path}"
    arrived = threading.Event()
    stamp: list[float] = []
    if mode == "project":
        with Gateway.open(url) as setup:
            setup.create_session(W)
            setup.create_session(T)
            setup.watch(W, T)
        b = Gateway.open(url, serve=[W], pump=True)

        class Noting:  # a GatewayObserver that hears only the queued notice
            def queued(self) -> None:
                stamp.append(time.time())
                arrived.set()

            def recorded(self, *args: object) -> None: ...
            def spawned(self) -> None: ...
            def drained(self, count: int) -> None: ...
            def wake_fired(self, *args: object) -> None: ...
            def wake_owed(self, *args: object) -> None: ...

        b.ops.observe(Noting())
        reset = lambda: b.drain_system_events(W)  # noqa: E731
        stop = b.close
    elif pg_url is not None:
        with _pg_connect(pg_url) as setup:
            setup.execute("CREATE TABLE probe (id serial PRIMARY KEY, at double precision)")

        def heard() -> None:
            stamp.append(time.time())
            arrived.set()

        listener = RawListener(pg_url, heard)
        reset = lambda: None  # noqa: E731
        stop = listener.close
    else:
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE probe (id INTEGER PRIMARY KEY, at REAL)")
        db.close()

        def changed() -> None:
            stamp.append(time.time())
            arrived.set()

        poller = RawPoller(path, changed)
        reset = lambda: None  # noqa: E731
        stop = poller.stop.set
    a = subprocess.Popen([sys.executable, __file__, "--writer", mode, path],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    samples = []
    try:
        for _ in range(episodes):
            time.sleep(random.uniform(0.4, 0.7))
            arrived.clear()
            stamp.clear()
            a.stdin.write("go\n")  # type: ignore[union-attr]
            a.stdin.flush()  # type: ignore[union-attr]
            committed = float(a.stdout.readline())  # type: ignore[union-attr]
            if not arrived.wait(10):
                raise RuntimeError("the notice never arrived")
            samples.append(stamp[0] - committed)
            reset()
    finally:
        a.stdin.close()  # type: ignore[union-attr]
        a.wait()
        stop()
    return samples


def idle_cpu(mode: str, seconds: float, directory: Path, pg_url: str | None = None) -> float:
    path = str(directory / f"idle-{mode}.db")
    if mode == "project":
        gw = Gateway.open(pg_url or f"sqlite:///{path}", pump=True)
        stop = gw.close
    elif pg_url is not None:
        listener = RawListener(pg_url, lambda: None)
        stop = listener.close
    else:
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE IF NOT EXISTS probe (id INTEGER PRIMARY KEY, at REAL)")
        poller = RawPoller(path, lambda: None)
        stop = poller.stop.set
    time.sleep(1)
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.monotonic()
    time.sleep(seconds)
    after = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.monotonic() - start
    stop()
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / wall


def main() -> None:
    if sys.argv[1:2] == ["--writer"]:
        writer(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description="commit-to-drainable latency across processes, and the pump's idle CPU")
    parser.add_argument("--postgres", action="store_true", help="on the server named by SESSIONSTATE_TEST_PG_URL")
    parser.add_argument("episodes", nargs="?", type=int, default=150, help="events recorded, 0.4-0.7 s apart, per side")
    options = parser.parse_args()
    postgres, episodes = options.postgres, options.episodes
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for mode in ("raw", "project"):
            if postgres:
                with pg_schema() as url:
                    samples = latency(mode, episodes, directory, url)
                with pg_schema() as url:
                    cpu = idle_cpu(mode, 20, directory, url)
            else:
                samples = latency(mode, episodes, directory)
                cpu = idle_cpu(mode, 20, directory)
            results[mode] = {
                "p50_ms": round(percentile(samples, 0.50) * 1000, 1),
                "p99_ms": round(percentile(samples, 0.99) * 1000, 1),
                "max_ms": round(max(samples) * 1000, 1),
                "idle_cpu_percent": round(cpu * 100, 3),
            }
    results["ratio_p99"] = round(results["project"]["p99_ms"] / results["raw"]["p99_ms"], 2)
    backend = "postgresql" if postgres else "sqlite"
    print(json.dumps({"backend": backend, "episodes": episodes,
                      "poll_ms": [MIN_POLL_SECONDS * 1000, (LISTEN_WAIT_SECONDS if postgres else MAX_POLL_SECONDS) * 1000],
                      **results}, indent=2))


if __name__ == "__main__":
    main()
