"""``sessionstate check``: run the verification suite and print one report.

Profiles: the default is the maintainers' slow profile (the issue's sizes); ``--fast`` is the
CI profile. Any explicit option overrides the profile's value. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from . import results as _results

PARTS = ("modelcheck", "fuzz", "crash", "concurrency", "threads", "ordering", "restart", "failover")
SLOW = {"depth": 10, "processes_depth": 5, "replay": 1000, "budget": "500", "crash_trials": 50, "events": 10_000,
        "restart_trials": 5, "failover_trials": 3, "failover_modes": "sync,async"}
FAST = {"depth": 5, "processes_depth": 4, "replay": 30, "budget": "10", "crash_trials": 3, "events": 500,
        "restart_trials": 1, "failover_trials": 1, "failover_modes": "sync"}
# SPIN's bounds (--spin): per process count, events in a run and environment actions.
SPIN_SLOW = {1: {"MAXSEQ": 3, "STEPS": 6}, 2: {"MAXSEQ": 2, "STEPS": 5}}
ORDERING_WRITERS, ORDERING_READERS = 4, 2
THREADS = 8  # the threads trial's recording threads on one gateway (LIV3)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fast", action="store_true", help="the CI profile (small sizes, about a minute)")
    parser.add_argument("--only", action="append", choices=PARTS + ("spin",), default=None, metavar="PART",
                        help=f"run only this part (repeatable): {', '.join(PARTS)}, spin")
    parser.add_argument("--depth", type=int, default=None, help="model-check BFS depth (slow 10, fast 5)")
    parser.add_argument("--processes-depth", type=int, default=None, metavar="N",
                        help="BFS depth of the two-process model check (slow 5, fast 4; 0 skips it)")
    parser.add_argument("--replay", type=int, default=None, metavar="N",
                        help="explored traces replayed on the real store (slow 1000, fast 30)")
    parser.add_argument("--budget", default=None,
                        help="fuzz budget: examples (200) or seconds (30s) (slow 500, fast 10)")
    parser.add_argument("--spin", action="store_true",
                        help="also verify the generated Promela model with SPIN, one and two processes"
                             " (needs spin and gcc; after the parts --only selects)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the fuzz, trace sampling and crash timing")
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
    parser.add_argument("--db", default=None, metavar="URL",
                        help="run the crash, concurrency, threads and ordering trials on this database's backend:"
                             " a PostgreSQL URL gets a fresh schema per trial (dropped after), a SQLite"
                             " URL or path temporary files beside it (default: temporary SQLite files)")
    add_ci_arguments(parser)


def add_ci_arguments(parser: argparse.ArgumentParser) -> None:
    """The options for CI pipelines (docs/ci.md): results files, reports, time-boxed fuzzing."""
    parser.add_argument("--junit-xml", type=Path, default=None, metavar="PATH",
                        help="write JUnit XML: one test case per part and per checked property (INV, LIV, R)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="write a JSON summary: state counts, examples run, seed, times, failures")
    parser.add_argument("--report-dir", type=Path, default=Path("sessionstate-reports"), metavar="DIR",
                        help="where a failure's Markdown counterexample report is written (default"
                             " ./sessionstate-reports)")
    parser.add_argument("--fuzz-for", default=None, metavar="DURATION",
                        help="time-box the fuzz: 90s, 10m, 1h (overrides --budget)")
    parser.add_argument("--example-db", type=Path, default=None, metavar="DIR",
                        help="the fuzz's example database: failing examples are stored here and tried first"
                             " on the next run (cache it between CI runs)")


def run_check(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    profile = dict(FAST if args.fast else SLOW)
    for name in profile:
        if getattr(args, name, None) is not None:
            profile[name] = getattr(args, name)
    parts = args.only or list(PARTS)
    failures: list[str] = []
    say = lambda text: print(text, file=out, flush=True)  # noqa: E731
    if getattr(args, "fuzz_for", None):
        from .fuzz import parse_duration

        profile["budget"] = f"{parse_duration(args.fuzz_for)}s"
    rec = _results.Results("check", seed=args.seed)
    _results.push(rec)
    try:
        return _run_parts(args, profile, parts, failures, say, rec)
    finally:
        _results.pop(rec)
        _write_results(args, rec, say)


def _write_results(args: argparse.Namespace, rec: _results.Results, say) -> None:
    if getattr(args, "junit_xml", None):
        rec.write_junit(args.junit_xml)
        say(f"JUnit XML: {args.junit_xml}")
    if getattr(args, "json", None):
        rec.write_json(args.json)
        say(f"JSON summary: {args.json}")


def _run_parts(args: argparse.Namespace, profile: dict, parts: list[str], failures: list[str], say,
               rec: _results.Results) -> int:
    say(f"sessionstate check ({'fast' if args.fast else 'slow'} profile, seed {args.seed})")
    database = getattr(args, "db", None)
    if any(p in parts for p in ("crash", "concurrency", "threads", "ordering")):
        from .scratch import describe

        say(f"trials run on {describe(database)}")
    report_dir = getattr(args, "report_dir", None) or Path("sessionstate-reports")
    example_db = getattr(args, "example_db", None)
    if "modelcheck" in parts:
        failures += rec.part("modelcheck", lambda: _modelcheck(profile, args.seed, say, report_dir),
                             _results.MODELCHECK_PROPERTIES)
    if "fuzz" in parts:
        failures += rec.part("fuzz", lambda: _fuzz(profile, args.seed, say, example_db))
    if "crash" in parts:
        failures += rec.part("crash", lambda: _crash(profile, args.seed, say, database))
    if "concurrency" in parts:
        failures += rec.part("concurrency", lambda: _concurrency(profile, args.seed, say, database))
    if "threads" in parts:
        failures += rec.part("threads", lambda: _threads(profile, args.seed, say, database))
    if "ordering" in parts:
        failures += rec.part("ordering", lambda: _ordering(profile, args.seed, say, database))
    if "restart" in parts:
        failures += rec.part("restart", lambda: _restart(profile, args.seed, say, required=args.only is not None))
    if "failover" in parts:
        failures += rec.part("failover", lambda: _failover(profile, args.seed, say, required=args.only is not None))
    if getattr(args, "spin", False) or "spin" in parts:
        failures += rec.part("spin", lambda: _spin(args.fast, say))
    say("FAILED: " + f"{len(failures)} failure(s)" if failures else "all checks passed")
    for failure in failures:
        say(failure)
    return 1 if failures else 0


def _modelcheck(profile: dict, seed: int, say, report_dir: Path | None = None) -> list[str]:
    from . import counterexample
    from .modelcheck import run_modelcheck, sample_traces
    from .replay import replay_trace, replay_two_process_trace

    seeded = counterexample.mutation()
    options = seeded[1] if seeded else {}
    if seeded:
        say(f"seeded bug: {counterexample.ENV_MUTATION}={seeded[0]} ({options})")
    report, parents = run_modelcheck(
        profile["depth"], progress=lambda lvl, n, t: sys.stderr.write(f"\rmodel check: depth {lvl}, {n} states"),
        **options)
    sys.stderr.write("\n")
    say(f"model check: {report.states} states, {report.transitions} transitions, depth {report.depth_reached}"
        f"{' (state space exhausted)' if report.exhausted else ''}, liveness from {report.liveness_checked}"
        f" states, {report.seconds:.1f}s")
    _results.stat(states=report.states, transitions=report.transitions, depth=report.depth_reached,
                  exhausted=report.exhausted, liveness_checked=report.liveness_checked,
                  seconds_search=round(report.seconds, 3))
    if report.violation is not None:
        replay = (f"sessionstate check --only modelcheck --depth {len(report.violation.trace)}"
                  " --processes-depth 0 --replay 0")
        return [f"model check:\n{report.violation.render()}\n  replay: {_seeded_prefix(seeded)}{replay}"
                + _report(report_dir, "modelcheck", report.violation, 1, _seeded_prefix(seeded) + replay, options, say)]
    replayed = 0
    for trace in sample_traces(parents, profile["replay"], seed):
        diff = replay_trace(trace)
        replayed += 1
        if diff:
            return ["real-store replay differs:\n  " + "\n  ".join(diff)
                    + f"\n  replay: sessionstate check --only modelcheck --seed {seed}"]
    say(f"real-store replay: {replayed} traces, all equal")
    _results.stat(replayed=replayed)
    del parents  # the slow profile's millions of states: not kept beside the second search
    if profile["processes_depth"] <= 0:
        return []
    two, parents = run_modelcheck(
        profile["processes_depth"], processes=2,
        progress=lambda lvl, n, t: sys.stderr.write(f"\rmodel check, two processes: depth {lvl}, {n} states"),
        **options)
    sys.stderr.write("\n")
    say(f"model check, two processes: {two.states} states, {two.transitions} transitions,"
        f" depth {two.depth_reached}, liveness from {two.liveness_checked} states, {two.seconds:.1f}s")
    _results.stat(two_process_states=two.states, two_process_transitions=two.transitions,
                  two_process_depth=two.depth_reached)
    if two.violation is not None:
        replay = f"sessionstate check --only modelcheck --processes-depth {len(two.violation.trace)}"
        return [f"model check, two processes:\n{two.violation.render()}\n  replay: {_seeded_prefix(seeded)}{replay}"
                + _report(report_dir, "modelcheck-2p", two.violation, 2, _seeded_prefix(seeded) + replay, options, say)]
    replayed = 0
    for trace in sample_traces(parents, profile["replay"], seed):
        diff = replay_two_process_trace(trace)
        replayed += 1
        if diff:
            return ["two-process real-store replay differs:\n  " + "\n  ".join(diff)
                    + f"\n  replay: sessionstate check --only modelcheck --seed {seed}"]
    say(f"two-process real-store replay: {replayed} traces on two gateways, all equal")
    return []


def committed_model_difference() -> str | None:
    """``None`` when the committed ``spec/notice-protocol.pml`` is what the table, the effects'
    data and the world generate, else what differs (the first differing line)."""
    from .promela import SPEC_PATH, generate

    if not SPEC_PATH.exists():
        return f"{SPEC_PATH} is missing"
    committed, generated = SPEC_PATH.read_text().splitlines(), generate().splitlines()
    if committed == generated:
        return None
    for number, (have, want) in enumerate(zip(committed, generated), 1):
        if have != want:
            return f"line {number}: committed {have.strip()!r}, generated {want.strip()!r}"
    return f"the committed model has {len(committed)} lines, the generated {len(generated)}"


def _seeded_prefix(seeded: tuple[str, dict] | None) -> str:
    from .counterexample import ENV_MUTATION

    return f"{ENV_MUTATION}={seeded[0]} " if seeded else ""


def _report(report_dir: Path | None, name: str, violation, processes: int, replay: str, options: dict, say) -> str:
    """Write the Markdown counterexample report; the line that names it (empty: none written)."""
    if report_dir is None:
        return ""
    from .counterexample import render_report, write_report

    path = write_report(report_dir, name, render_report(violation.trace, violation.messages, processes, replay,
                                                        options))
    active = _results.active()
    if active is not None:
        active.add_report(path)
    say(f"counterexample report: {path}")
    return f"\n  report: {path}"


def _spin(fast: bool, say) -> list[str]:
    from .promela import SPEC_PATH
    from .spin import BOUNDS, SpinMissing, replay_trail, run_spin, trail_actions, trail_steps, trail_wakes

    # SPIN checks the committed model, the file a reader trusts; it must be what the code generates.
    difference = committed_model_difference()
    if difference is not None:
        return [f"spin: {SPEC_PATH.name} differs from what the table generates ({difference});"
                " regenerate it: sessionstate model --promela --write spec/notice-protocol.pml"]
    model = SPEC_PATH.read_text()
    failures = []
    for processes in (1, 2):
        bounds = BOUNDS[processes] if fast else SPIN_SLOW[processes]
        try:
            report = run_spin(model, processes, bounds)
        except SpinMissing as exc:
            return [f"spin: {exc}"]
        for run in report.runs:
            say(f"spin, {processes} process(es), {bounds}: {run.line()}")
        if report.failed is not None:
            assert report.workdir is not None
            printed = trail_steps(report)
            steps = trail_actions(printed, processes)
            actions = [a for a, _ in steps if a is not None]
            # The same steps on real gateways: does the store do what the model did?
            real = replay_trail(steps, processes, report.workdir / "real", trail_wakes(printed))
            verdict = (f"the real store differs from the model: {real.differences[0]}" if real.differences
                       else "the real store agrees with the model at every step")
            if real.wake_differences:
                verdict += f"; A's wakes differ: {real.wake_differences[0]}"
            verdict += f"; its protocol trace {real.trace} " + (
                f"violates the spec: {real.trace_violation}" if real.trace_violation else "passes `sessionstate replay`")
            failures.append(f"spin, {processes} process(es): {report.failed.prop} failed; trail in {report.workdir}"
                            f"\n  actions: {actions}\n  real gateways: {verdict}\n  replay: spin -t -DPROCS={processes} "
                            + " ".join(f"-D{k}={v}" for k, v in bounds.items()) + " model.pml")
    return failures


def _fuzz(profile: dict, seed: int, say, example_db: Path | None = None) -> list[str]:
    from .fuzz import progress_for, run_fuzz

    report = run_fuzz(str(profile["budget"]), seed=seed, progress=progress_for(sys.stderr), example_db=example_db)
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    say(f"fuzz: {report.examples} examples, {report.steps} steps, {report.seconds:.1f}s"
        + (f", {report.from_db} from the example database {example_db}" if example_db is not None else ""))
    _results.stat(examples=report.examples, steps=report.steps, seed=seed, budget=str(profile["budget"]),
                  from_db=report.from_db, seconds_fuzz=round(report.seconds, 3))
    if report.ok:
        return []
    if report.failing_seed is not None and report.failing_seed != seed:
        seed = report.failing_seed  # a stored example of another run's seed
    return ["fuzz:\n  " + "\n  ".join(report.failure)
            + f"\n  replay: sessionstate check --only fuzz --seed {seed} --budget 1"
              f" (example {report.failing_example}: python -c 'from sessionstate.verify.fuzz import run_fuzz;"
              f" print(run_fuzz(\"1\", seed={seed}, first_example={report.failing_example}))')"]


def _crash(profile: dict, seed: int, say, database: str | None) -> list[str]:
    from .crash import run_trials

    report = run_trials(profile["crash_trials"], seed=seed, database=database,
                        progress=lambda d, n: sys.stderr.write(f"\rcrash trials: {d}/{n}"))
    sys.stderr.write("\n")
    say(f"crash: {report.trials} SIGKILL trials, {report.acknowledged} acknowledged appends, {report.seconds:.1f}s")
    return [f"crash: {f}\n  replay: sessionstate check --only crash --seed {seed}" for f in report.failures]


def _concurrency(profile: dict, seed: int, say, database: str | None) -> list[str]:
    from .concurrency import run_concurrency

    report = run_concurrency(profile["events"], seed=seed, database=database)
    say(f"concurrency: 2 processes x {profile['events']} events, {report.appended} appended,"
        f" {report.interleavings} interleavings, {report.throughput:.0f} appends/s,"
        f" {report.append_failures} append failures")
    return [f"concurrency: {f}\n  replay: sessionstate check --only concurrency --seed {seed}"
            f" --events {profile['events']}" for f in report.failures]


def _threads(profile: dict, seed: int, say, database: str | None) -> list[str]:
    from .threads import ASYNC_TASKS, run_threads

    calls = max(1, profile["events"] // 2)
    report = run_threads(calls, threads=THREADS, seed=seed, database=database)
    say(f"threads: {THREADS} threads and {ASYNC_TASKS} coroutines x {calls} calls on one gateway,"
        f" {report.recorded} events recorded,"
        f" {report.read_back} read back at once by another connection, slowest call"
        f" {report.slowest_call_ms:.1f} ms, {report.seconds:.1f}s")
    return [f"threads: {f}\n  replay: sessionstate check --only threads --seed {seed} --events {profile['events']}"
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
    return [f"ordering: {f}\n  replay: sessionstate check --only ordering --seed {seed} --events {profile['events']}"
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
    return [f"restart: {f}\n  replay: sessionstate check --only restart --seed {seed}" for f in report.failures]


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
        failures += [f"failover ({mode}): {f}\n  replay: sessionstate check --only failover --failover-modes {mode}"
                     f" --seed {seed}" for f in report.failures]
    return failures
