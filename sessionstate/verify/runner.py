"""``sessionstate check``: verify the protocol and print one report.

The parts run from the installed wheel, in one process: the model check (with its real-store
replay), the stateful fuzz and SPIN over the generated model. The trials that fault real
processes and servers live beside the package (``trials/``, ``./dev trials``).

Profiles: the default is the maintainers' slow profile; ``--fast`` is the CI profile. Any
explicit option overrides the profile's value. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from . import results as _results

PARTS = ("modelcheck", "fuzz")
SLOW = {"depth": 10, "processes_depth": 5, "replay": 1000, "budget": "500"}
FAST = {"depth": 5, "processes_depth": 4, "replay": 30, "budget": "10"}
# SPIN's bounds (--spin): per process count, events in a run and environment actions.
SPIN_SLOW = {1: {"MAXSEQ": 3, "STEPS": 6}, 2: {"MAXSEQ": 2, "STEPS": 5}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fast", action="store_true", help="the CI profile (small sizes, under a minute)")
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
    parser.add_argument("--seed", type=int, default=0, help="seed for the fuzz and the trace sampling")
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
    report_dir = getattr(args, "report_dir", None) or Path("sessionstate-reports")
    example_db = getattr(args, "example_db", None)
    if "modelcheck" in parts:
        failures += rec.part("modelcheck", lambda: _modelcheck(profile, args.seed, say, report_dir),
                             _results.MODELCHECK_PROPERTIES)
    if "fuzz" in parts:
        failures += rec.part("fuzz", lambda: _fuzz(profile, args.seed, say, example_db))
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
