"""Writer scaling on one PostgreSQL primary: 1, 2, 4, 8, 16 writer processes (docs/scaling.md).

Backs docs/scaling.md, "Writer scaling on one primary".

Run: scripts/pg-test-server run ./dev run .venv/bin/python benchmarks/studies/writer_scaling.py
         [--writers 1,2,4,8,16] [--seconds S] [--layout own,shared]

Per writer count W and layout, W processes each open a gateway on a fresh schema and, from
one start time, record events for S seconds (``record_event``, one commit per call, the
store's default durability ``synchronous_commit = on``); a time box rather than a count, so
one writer the scheduler holds back does not stretch the run:

- ``own``: every writer on a session of its own (each watched by one watcher): the head rows
  never contend; what they share is the global sequence, the WAL and the server's CPU;
- ``shared``: every writer on one session: each append locks that session's head row, so the
  appends to it are serialised by design (commit order = sequence order, spec section 16).

The baseline (``raw``) is the same processes with bare psycopg: one ``INSERT`` into a table
with a ``bigserial`` key and one commit per event, the database's own ceiling on this machine
and this server. Printed as JSON: per W and side, events/s (every writer's events over S),
the p50 and p99 of each call, and the project/raw throughput ratio. Nothing is
asserted. The test server runs with ``fsync = off``: a commit's WAL flush costs nothing there,
so the WAL's share is what it costs on a real disk, not measured here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

KIND = "human_direct_message"
WATCHER = "agent:watcher:main"
START_DELAY_SECONDS = 1.0  # after the last worker is ready


def connect(url: str):  # type: ignore[no-untyped-def]
    """A bare autocommit psycopg connection to the SQLAlchemy URL ``url``."""
    import psycopg
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    query = {k: v for k, v in parsed.query.items() if isinstance(v, str)}
    return psycopg.connect(dbname=parsed.database, user=parsed.username, password=parsed.password,
                           host=parsed.host or query.pop("host", None), port=parsed.port, autocommit=True, **query)


def session(layout: str, index: int) -> str:
    return "agent:shared:main" if layout == "shared" else f"agent:writer{index}:main"


def worker(side: str, url: str, layout: str, index: int, seconds: float) -> None:
    """Open, say ready, wait for the start time on stdin, record, print the timings."""
    if side == "project":
        from sessionstate import Gateway

        gw = Gateway.open(url, serve=[])
        key = session(layout, index)

        def append() -> None:
            gw.record_event(key, KIND, actor_type="human", summary="hello")
    else:
        conn = connect(url)
        conn.execute("SET synchronous_commit = on")

        def append() -> None:
            conn.execute("INSERT INTO raw_log (session_key, summary) VALUES (%s, 'hello')", (session(layout, index),))
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    while time.time() < start:
        time.sleep(0.001)
    latencies = []
    end = start + seconds
    while time.time() < end:
        t = time.perf_counter()
        append()
        latencies.append(time.perf_counter() - t)
    print(json.dumps({"latencies": latencies}), flush=True)


def prepare(side: str, url: str, layout: str, writers: int) -> None:
    if side == "project":
        from sessionstate import Gateway

        with Gateway.open(url, serve=[]) as gw:
            gw.create_session(WATCHER)
            for key in sorted({session(layout, i) for i in range(writers)}):
                gw.create_session(key)
                gw.watch(WATCHER, key)
    else:
        with connect(url) as conn:
            conn.execute("CREATE TABLE raw_log (sequence bigserial PRIMARY KEY, session_key text NOT NULL,"
                         " summary text NOT NULL)")


def one_point(side: str, url: str, layout: str, writers: int, seconds: float) -> dict[str, float]:
    prepare(side, url, layout, writers)
    children = [subprocess.Popen([sys.executable, __file__, "--worker", side, url, layout, str(i), str(seconds)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(writers)]
    for child in children:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise SystemExit(f"a {side} writer did not start")
    start = time.time() + START_DELAY_SECONDS
    results = []
    for child in children:
        out, _ = child.communicate(f"{start}\n", timeout=600)
        if child.returncode != 0:
            raise SystemExit(f"a {side} writer failed ({child.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    latencies = sorted(x for r in results for x in r["latencies"])
    return {
        "events_per_s": round(len(latencies) / seconds),
        "p50_ms": round(latencies[len(latencies) // 2] * 1e3, 2),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1e3, 2),
    }


def main(args: list[str]) -> None:
    if args[:1] == ["--worker"]:
        worker(args[1], args[2], args[3], int(args[4]), float(args[5]))
        return
    from multiproc_latency import pg_schema

    options = {"--writers": "1,2,4,8,16", "--seconds": "3", "--layout": "own,shared"}
    for name in list(options):
        if name in args:
            i = args.index(name)
            options[name] = args[i + 1]
    counts = [int(n) for n in options["--writers"].split(",")]
    seconds = float(options["--seconds"])
    report: dict[str, object] = {"backend": "postgresql", "seconds": seconds, "points": []}
    for layout in options["--layout"].split(","):
        for writers in counts:
            point: dict[str, object] = {"layout": layout, "writers": writers}
            for side in ("raw", "project"):
                with ExitStack() as stack:
                    url = stack.enter_context(pg_schema())
                    point[side] = one_point(side, url, layout, writers, seconds)
            point["project_vs_raw"] = round(point["project"]["events_per_s"]  # type: ignore[index]
                                            / point["raw"]["events_per_s"], 2)  # type: ignore[index]
            report["points"].append(point)  # type: ignore[attr-defined]
            print(json.dumps(point), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
