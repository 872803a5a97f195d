"""``./dev trials``: the maintainers' trials, each a fault or a load on real processes and servers.

Profiles: the default is the slow profile; ``--fast`` is the CI profile. Any explicit option
overrides the profile's value. The results files (``--junit-xml``, ``--json``) are the same
format as ``sessionstate check``'s. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from sessionstate.verify import results as _results

PARTS = ("crash", "concurrency", "threads", "ordering", "restart", "failover", "nemesis")
# The nemesis's slow profile keeps the product's lease, heartbeat and wake window (15, 5, 20 s);
# the fast one shrinks them so that stalls past the lease and heals fit in a CI minute.
SLOW = {"crash_trials": 50, "events": 10_000, "restart_trials": 5, "failover_trials": 3,
        "failover_modes": "sync,async", "nemesis_seconds": 600.0, "nemesis_backends": "sqlite,postgres,pgpair",
        "nemesis_lease": 15.0, "nemesis_heartbeat": 5.0, "nemesis_window": 20.0}
FAST = {"crash_trials": 3, "events": 500, "restart_trials": 1, "failover_trials": 1, "failover_modes": "sync",
        "nemesis_seconds": 20.0, "nemesis_backends": "sqlite,postgres", "nemesis_lease": 3.0,
        "nemesis_heartbeat": 1.0, "nemesis_window": 2.0}
ORDERING_WRITERS, ORDERING_READERS = 4, 2
THREADS = 8  # the threads trial's recording threads on one gateway (LIV3)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="./dev trials", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    parser.add_argument("--fast", action="store_true", help="the CI profile (small sizes)")
    parser.add_argument("--only", action="append", choices=PARTS, default=None, metavar="PART",
                        help=f"run only this trial (repeatable): {', '.join(PARTS)}")
    parser.add_argument("--seed", type=int, default=0, help="seed for the trials' timing and choices")
    parser.add_argument("--crash-trials", type=int, default=None, metavar="N", help="SIGKILL trials (slow 50, fast 3)")
    parser.add_argument("--events", type=int, default=None, metavar="N",
                        help="events appended by each of the two concurrent processes (slow 10000, fast 500);"
                             " each of the 4 ordering writers appends a tenth of it, each of the 8 threads of"
                             " the threads trial makes half of it calls")
    parser.add_argument("--restart-trials", type=int, default=None, metavar="N",
                        help="immediate restarts of a throwaway PostgreSQL server under load (slow 5, fast 1;"
                             " skipped without PostgreSQL's server binaries)")
    parser.add_argument("--failover-trials", type=int, default=None, metavar="N",
                        help="PostgreSQL failovers under load per standby mode (slow 3, fast 1; skipped without"
                             " PostgreSQL's server binaries)")
    parser.add_argument("--failover-modes", default=None, metavar="MODES",
                        help="the standby modes of the failover trials: sync, async or sync,async"
                             " (slow sync,async, fast sync)")
    parser.add_argument("--nemesis-seconds", type=float, default=None, metavar="S",
                        help="seconds of overlapping faults per nemesis backend (slow 600, fast 20)")
    parser.add_argument("--nemesis-backends", "--nemesis-backend", default=None, metavar="B",
                        help="the nemesis's databases: sqlite, postgres (a throwaway server, restarted, behind"
                             " the commit-dropping proxy), pgpair (with a synchronous standby and a failover);"
                             " slow all three, fast sqlite,postgres")
    parser.add_argument("--nemesis-lease", type=float, default=None, metavar="S",
                        help="the workers' claim lease (R20; slow 15 as shipped, fast 3)")
    parser.add_argument("--nemesis-heartbeat", type=float, default=None, metavar="S",
                        help="the workers' heartbeat (R20; slow 5 as shipped, fast 1)")
    parser.add_argument("--nemesis-window", type=float, default=None, metavar="S",
                        help="the workers' wake window (R23; slow 20 as shipped, fast 2)")
    parser.add_argument("--nemesis-bug", default=None, metavar="NAME",
                        help="seed a known bug into every nemesis worker (trials/nemesis_bugs.py): the run must fail")
    parser.add_argument("--nemesis-keep", type=Path, default=None, metavar="DIR",
                        help="keep each nemesis run's histories, traces and report.json in DIR/BACKEND-SEED")
    parser.add_argument("--db", default=None, metavar="URL",
                        help="run the crash, concurrency, threads and ordering trials on this database's backend:"
                             " a PostgreSQL URL gets a fresh schema per trial (dropped after), a SQLite"
                             " URL or path temporary files beside it (default: temporary SQLite files)")
    parser.add_argument("--junit-xml", type=Path, default=None, metavar="PATH",
                        help="write JUnit XML: one test case per trial")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write a JSON summary")
    return parser


def run_trials(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    profile = dict(FAST if args.fast else SLOW)
    for name in profile:
        if getattr(args, name, None) is not None:
            profile[name] = getattr(args, name)
    parts = args.only or list(PARTS)
    say = lambda text: print(text, file=out, flush=True)  # noqa: E731
    rec = _results.Results("trials", seed=args.seed)
    _results.push(rec)
    try:
        say(f"trials ({'fast' if args.fast else 'slow'} profile, seed {args.seed})")
        database = args.db
        if any(p in parts for p in ("crash", "concurrency", "threads", "ordering")):
            from .scratch import describe

            say(f"trials run on {describe(database)}")
        required = args.only is not None
        run = {
            "crash": lambda: _crash(profile, args.seed, say, database),
            "concurrency": lambda: _concurrency(profile, args.seed, say, database),
            "threads": lambda: _threads(profile, args.seed, say, database),
            "ordering": lambda: _ordering(profile, args.seed, say, database),
            "restart": lambda: _restart(profile, args.seed, say, required=required),
            "failover": lambda: _failover(profile, args.seed, say, required=required),
            "nemesis": lambda: _nemesis(profile, args, say, required=required),
        }
        failures: list[str] = []
        for part in PARTS:
            if part in parts:
                failures += rec.part(part, run[part])
        say("FAILED: " + f"{len(failures)} failure(s)" if failures else "all trials passed")
        for failure in failures:
            say(failure)
        return 1 if failures else 0
    finally:
        _results.pop(rec)
        if args.junit_xml:
            rec.write_junit(args.junit_xml)
            say(f"JUnit XML: {args.junit_xml}")
        if args.json:
            rec.write_json(args.json)
            say(f"JSON summary: {args.json}")


def main(argv: list[str] | None = None) -> int:
    return run_trials(parser().parse_args(argv))


def _crash(profile: dict, seed: int, say, database: str | None) -> list[str]:
    from .crash import run_trials

    report = run_trials(profile["crash_trials"], seed=seed, database=database,
                        progress=lambda d, n: sys.stderr.write(f"\rcrash trials: {d}/{n}"))
    sys.stderr.write("\n")
    say(f"crash: {report.trials} SIGKILL trials, {report.acknowledged} acknowledged appends, {report.seconds:.1f}s")
    return [f"crash: {f}\n  replay: ./dev trials --only crash --seed {seed}" for f in report.failures]


def _concurrency(profile: dict, seed: int, say, database: str | None) -> list[str]:
    from .concurrency import run_concurrency

    report = run_concurrency(profile["events"], seed=seed, database=database)
    say(f"concurrency: 2 processes x {profile['events']} events, {report.appended} appended,"
        f" {report.interleavings} interleavings, {report.throughput:.0f} appends/s,"
        f" {report.append_failures} append failures")
    return [f"concurrency: {f}\n  replay: ./dev trials --only concurrency --seed {seed}"
            f" --events {profile['events']}" for f in report.failures]


def _threads(profile: dict, seed: int, say, database: str | None) -> list[str]:
    from .threads import ASYNC_TASKS, run_threads

    calls = max(1, profile["events"] // 2)
    report = run_threads(calls, threads=THREADS, seed=seed, database=database)
    say(f"threads: {THREADS} threads and {ASYNC_TASKS} coroutines x {calls} calls on one gateway,"
        f" {report.recorded} events recorded,"
        f" {report.read_back} read back at once by another connection, slowest call"
        f" {report.slowest_call_ms:.1f} ms, {report.seconds:.1f}s")
    return [f"threads: {f}\n  replay: ./dev trials --only threads --seed {seed} --events {profile['events']}"
            for f in report.failures]


def _ordering(profile: dict, seed: int, say, database: str | None) -> list[str]:
    from .ordering import run_ordering
    from .scratch import scratch_database

    events = max(1, profile["events"] // 10)
    with scratch_database(database) as url:
        report = run_ordering(url, writers=ORDERING_WRITERS, readers=ORDERING_READERS, events=events, seed=seed)
    say(f"ordering: {ORDERING_WRITERS} writer processes x {events} events, {ORDERING_READERS} readers,"
        f" {report.appended} appended, {report.polls} polls, {report.interleavings} interleavings,"
        f" {report.seconds:.1f}s")
    return [f"ordering: {f}\n  replay: ./dev trials --only ordering --seed {seed} --events {profile['events']}"
            for f in report.failures]


def _missing_postgres(part: str, say, *, required: bool, tools: tuple[str, ...] = ("initdb", "pg_ctl")) -> list[str] | None:
    """``None`` when PostgreSQL's server binaries and psycopg are here; else the part's
    failures (none when it was not asked for by ``--only``: skipped)."""
    from .pgserver import server_binaries

    binaries = server_binaries()
    if binaries is None or not all((binaries / tool).exists() for tool in tools):
        reason = f"no PostgreSQL server binaries ({', '.join(tools)}) on this machine"
        say(f"{part}: skipped ({reason})")
        return [f"{part}: {reason}"] if required else []
    try:
        import psycopg  # noqa: F401
    except ImportError:
        say(f"{part}: skipped (psycopg is not installed: pip install 'sessionstate[postgres]')")
        return [f"{part}: psycopg is not installed"] if required else []
    return None


def _restart(profile: dict, seed: int, say, *, required: bool) -> list[str]:
    """PostgreSQL's restart trials, on a server of their own (its binaries must be installed:
    without them the part is skipped, or fails when asked for by ``--only``)."""
    trials = profile["restart_trials"]
    if trials <= 0:
        return []
    missing = _missing_postgres("restart", say, required=required)
    if missing is not None:
        return missing
    from .restart import run_restart_trials

    report = run_restart_trials(trials, seed=seed, progress=lambda d, n: sys.stderr.write(f"\rrestart trials: {d}/{n}"))
    sys.stderr.write("\n")
    slowest = max(report.catch_up_seconds, default=0.0)
    say(f"restart: {report.trials} immediate restarts of PostgreSQL (synchronous_commit=off on the server) under"
        f" 2 writer processes and a pumped serving process, {report.acknowledged} acknowledged appends,"
        f" {report.delivered} notices delivered, watcher caught up within {slowest:.2f}s, {report.seconds:.1f}s")
    return [f"restart: {f}\n  replay: ./dev trials --only restart --seed {seed}" for f in report.failures]


def _failover(profile: dict, seed: int, say, *, required: bool) -> list[str]:
    """PostgreSQL failover trials on a primary and a streaming standby of their own, per
    standby mode; an asynchronous standby's loss is reported, not failed."""
    trials = profile["failover_trials"]
    modes = [m.strip() for m in str(profile["failover_modes"]).split(",") if m.strip()]
    unknown = [m for m in modes if m not in ("sync", "async")]
    if unknown:
        return [f"failover: unknown standby mode(s) {unknown}: sync or async"]
    if trials <= 0 or not modes:
        return []
    missing = _missing_postgres("failover", say, required=required, tools=("initdb", "pg_ctl", "pg_basebackup"))
    if missing is not None:
        return missing
    from .failover import run_failover_trials

    failures: list[str] = []
    for mode in modes:
        report = run_failover_trials(trials, mode, seed=seed,
                                     progress=lambda d, n: sys.stderr.write(f"\rfailover trials ({mode}): {d}/{n}"))
        sys.stderr.write("\n")
        say(f"failover ({mode} standby): {report.summary()}")
        _results.stat(**{f"failover_{mode}_acknowledged": report.acknowledged,
                         f"failover_{mode}_lost": len(report.lost),
                         f"failover_{mode}_loss_window_ms": report.loss_window_ms})
        failures += [f"failover ({mode}): {f}\n  replay: ./dev trials --only failover --failover-modes {mode}"
                     f" --seed {seed}" for f in report.failures]
    return failures


def _nemesis(profile: dict, args: argparse.Namespace, say, *, required: bool) -> list[str]:
    """The nemesis (trials/nemesis.py) on each backend asked for; a PostgreSQL backend without
    the server binaries is skipped (failed when asked for by ``--only``)."""
    from .nemesis import BACKENDS, Settings, run_nemesis
    from .nemesis_bugs import BUGS

    backends = [b.strip() for b in str(profile["nemesis_backends"]).split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        return [f"nemesis: unknown backend(s) {unknown}: {', '.join(BACKENDS)}"]
    if args.nemesis_bug is not None and args.nemesis_bug not in BUGS:
        return [f"nemesis: unknown seeded bug {args.nemesis_bug!r}: {', '.join(BUGS)}"]
    failures: list[str] = []
    for backend in backends:
        if backend != "sqlite":
            tools = ("initdb", "pg_ctl") + (("pg_basebackup",) if backend == "pgpair" else ())
            missing = _missing_postgres(f"nemesis ({backend})", say, required=required, tools=tools)
            if missing is not None:
                failures += missing
                continue
        settings = Settings(backend=backend, seconds=float(profile["nemesis_seconds"]),
                            lease=float(profile["nemesis_lease"]), heartbeat=float(profile["nemesis_heartbeat"]),
                            window=float(profile["nemesis_window"]), bug=args.nemesis_bug)
        keep = args.nemesis_keep / f"{backend}-{args.seed}" if args.nemesis_keep is not None else None
        report = run_nemesis(args.seed, settings, keep=keep,
                             progress=lambda line: sys.stderr.write(line + "\n"))
        say(f"nemesis ({backend}): {report.summary()}")
        say(report.table())
        _results.stat(**{f"nemesis_{backend}_acknowledged": report.acknowledged,
                         f"nemesis_{backend}_lost": report.lost,
                         f"nemesis_{backend}_duplicated": report.duplicated,
                         f"nemesis_{backend}_heal_seconds": report.heal_seconds})
        if not report.ok:
            failures.append(f"nemesis ({backend}): {report.failure_text()}")
    return failures
