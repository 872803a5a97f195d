"""Owed wakes (R12, LIV1): what they cost an append, the wake timer's idle CPU, their lateness.

Backs docs/performance.md, "Owed wakes".

Run: ./dev run .venv/bin/python benchmarks/studies/owed_wakes.py [watchers [idle seconds]]

1. Append cost. ``watchers`` (1,000) main-style watchers each watch two targets; a message on
   each target leaves every watcher pending on both and owed one wake (the second notice came
   inside the window). Timed: one more material event on the first target, which all of them
   already hold (R7: nothing is written for them; R23's re-wake heap is looked at once). Three
   sides in alternating rounds, each on a file of its own: the project with the owed wakes,
   the project with the same pending watchers and no wake hook (nothing owed), and raw
   ``sqlite3`` doing the append and head bump in one transaction. Reported as ratios to raw.
2. Idle CPU of the wake timer thread, 10 s each: with ``watchers`` wakes owed an hour ahead
   (it sleeps at most 1 s at a time, so a moved clock is seen), and with nothing owed (it
   blocks without a timeout). Process CPU time by ``getrusage`` while the main thread sleeps.
3. Lateness: ``watchers`` wakes owed at once on the real clock (a 2 s window), fired by the
   timer alone: fire time minus due time, p50, p99 and max.
"""

from __future__ import annotations

import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sessionstate import Gateway

KIND = "human_direct_message"
T1, T2 = "agent:t1:main", "agent:t2:main"
NOW = 1_700_000_000.0


def watcher(i: int) -> str:
    return f"agent:w{i}:main"


def build(url: str, watchers: int, *, on_wake, clock, window: float = 20.0) -> Gateway:
    gw = Gateway.open(url, clock=clock, on_wake=on_wake, wake_window=window)
    gw.create_session(T1)
    gw.create_session(T2)
    with gw.transaction():
        for i in range(watchers):
            gw.create_session(watcher(i))
            gw.watch(watcher(i), T1)
            gw.watch(watcher(i), T2)
    return gw


def raw_side(path: Path) -> tuple[sqlite3.Connection, callable]:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE events (sequence INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT, kind TEXT,"
               " actor_type TEXT, summary TEXT, occurred_at REAL)")
    db.execute("CREATE TABLE heads (session TEXT PRIMARY KEY, last_sequence INTEGER)")
    db.execute("INSERT INTO heads VALUES (?, 0)", (T1,))

    def record() -> None:
        db.execute("BEGIN IMMEDIATE")
        cur = db.execute("INSERT INTO events (session, kind, actor_type, summary, occurred_at) VALUES (?, ?, ?, ?, ?)",
                         (T1, KIND, "human", "hello", time.time()))
        db.execute("UPDATE heads SET last_sequence = ? WHERE session = ?", (cur.lastrowid, T1))
        db.execute("COMMIT")

    return db, record


def append_cost(directory: Path, watchers: int, rounds: int = 2_000) -> dict[str, float]:
    clock = lambda: NOW  # frozen: the owed wakes stay owed, nobody falls due  # noqa: E731
    owed_gw = build(f"sqlite:///{directory / 'owed.db'}", watchers, on_wake=lambda w, r: None, clock=clock)
    plain_gw = build(f"sqlite:///{directory / 'plain.db'}", watchers, on_wake=None, clock=clock)
    for gw in (owed_gw, plain_gw):
        gw.record_event(T1, KIND, actor_type="human", summary="first")   # woken (owed_gw)
        gw.record_event(T2, KIND, actor_type="human", summary="second")  # inside the window: owed
    assert len(owed_gw.ops.diagnostics().owed_wakes) == watchers and not plain_gw.ops.diagnostics().owed_wakes
    raw_db, raw_record = raw_side(directory / "raw.db")
    sides = {
        "owed": lambda: owed_gw.record_event(T1, KIND, actor_type="human", summary="more"),
        "plain": lambda: plain_gw.record_event(T1, KIND, actor_type="human", summary="more"),
        "raw": raw_record,
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, call in sides.items():
            started = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - started)
    owed_gw.close()
    plain_gw.close()
    raw_db.close()
    medians = {name: statistics.median(values) * 1e6 for name, values in times.items()}
    return {
        "owed_us": medians["owed"], "plain_us": medians["plain"], "raw_us": medians["raw"],
        "owed_vs_raw": medians["owed"] / medians["raw"], "plain_vs_raw": medians["plain"] / medians["raw"],
        "owed_vs_plain": medians["owed"] / medians["plain"],
    }


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def idle_cpu(directory: Path, watchers: int, seconds: float = 10.0) -> dict[str, float]:
    ahead = [0.0]  # moved past the owed wakes to empty their heap
    gw = build(f"sqlite:///{directory / 'idle.db'}", watchers, on_wake=lambda w, r: None,
               clock=lambda: time.time() + ahead[0], window=3600.0)
    gw.record_event(T1, KIND, actor_type="human", summary="first")
    gw.record_event(T2, KIND, actor_type="human", summary="second")  # owed an hour ahead
    assert len(gw.ops.diagnostics().owed_wakes) == watchers and gw.ops.diagnostics().wake_timer_running
    time.sleep(1.0)
    before = cpu_seconds()
    time.sleep(seconds)
    owed_share = (cpu_seconds() - before) / seconds
    for i in range(watchers):  # drained: the owed wakes will find nothing; empty the heap
        gw.drain_system_events(watcher(i))
    ahead[0] = 7200.0
    gw.ops.fire_due_wakes()  # pop everything (all cancelled: nothing held)
    assert not gw.ops.diagnostics().owed_wakes
    time.sleep(1.0)
    before = cpu_seconds()
    time.sleep(seconds)
    empty_share = (cpu_seconds() - before) / seconds
    gw.close()
    return {"owed_cpu_pct": owed_share * 100, "empty_cpu_pct": empty_share * 100}


def lateness(directory: Path, watchers: int, window: float = 2.0) -> dict[str, float]:
    fired: dict[str, float] = {}
    gw = build(f"sqlite:///{directory / 'late.db'}", watchers,
               on_wake=lambda w, r: fired.__setitem__(w, time.time()), clock=time.time, window=window)
    gw.record_event(T1, KIND, actor_type="human", summary="first")  # every watcher woken
    for i in range(watchers):
        gw.drain_system_events(watcher(i))
    fired.clear()
    gw.record_event(T2, KIND, actor_type="human", summary="second")  # inside the window: owed
    due = gw.ops.diagnostics().owed_wakes
    assert len(due) == watchers
    deadline = time.monotonic() + window + 30
    while len(fired) < watchers and time.monotonic() < deadline:
        time.sleep(0.05)
    gw.close()
    late = sorted(fired[w] - due[w] for w in fired)
    return {
        "fired": len(late), "p50_ms": late[len(late) // 2] * 1e3,
        "p99_ms": late[int(len(late) * 0.99) - 1] * 1e3, "max_ms": late[-1] * 1e3, "min_ms": late[0] * 1e3,
    }


def main() -> None:
    watchers = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000
    idle_seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    with tempfile.TemporaryDirectory(prefix="owed-wakes-") as tmp:
        directory = Path(tmp)
        cost = append_cost(directory, watchers)
        print(f"append, {watchers} pending main-style watchers: owed {cost['owed_us']:.1f} µs"
              f" ({cost['owed_vs_raw']:.2f}x raw), no hook {cost['plain_us']:.1f} µs"
              f" ({cost['plain_vs_raw']:.2f}x raw), raw {cost['raw_us']:.1f} µs;"
              f" owed / no hook {cost['owed_vs_plain']:.3f}")
        idle = idle_cpu(directory, watchers, idle_seconds)
        print(f"wake timer idle CPU: {watchers} owed an hour ahead {idle['owed_cpu_pct']:.3f} % of a core,"
              f" nothing owed {idle['empty_cpu_pct']:.3f} %")
        late = lateness(directory, watchers)
        print(f"lateness of {late['fired']} owed at once: p50 {late['p50_ms']:.1f} ms, p99 {late['p99_ms']:.1f} ms,"
              f" max {late['max_ms']:.1f} ms (min {late['min_ms']:.1f} ms)")


if __name__ == "__main__":
    main()
