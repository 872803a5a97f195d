"""One tree against another: the cost of the same record path on two (or more) checkouts.

Run:
    ./dev run .venv/bin/python benchmarks/compare.py wall [--postgres] [--threaded] [--events N] [--runs R] TREE...
    ./dev run .venv/bin/python benchmarks/compare.py instructions [--events N] [--warm-up N] [--style S]... TREE...
    scripts/pg-test-server run ./dev run .venv/bin/python benchmarks/compare.py pg-batch [--rounds R] [--sizes 1,8,32] [--latency MS] TREE...

A TREE is a directory holding a ``sessionstate`` package: this checkout (``.``) or an older
commit's (``git worktree add --detach /tmp/before REV``). Every tree runs in a child process of
its own that puts the tree first on ``sys.path`` (and in ``PYTHONPATH``), so each measures its
own code. The first tree is the reference of every ratio printed (``vs_first``).

Every mode records on the same scene, made through the public API: a target sub-agent session
with three main-style watchers (``agent:wI:main``), each drained back to caught up after every
event (untimed, not counted), so every timed event is a notifying event that freezes three
cursors and queues three notices (R1, R7); a fixed clock.

``wall`` -- median wall-clock ``record_event``, the trees in lockstep. The parent tells one
child to record a turn of 20 events (each timed, one transaction each), waits for its times,
then tells the next; which tree goes first is shuffled every round (a fixed order made the
second tree several per cent faster here, whichever it was). The slow and fast phases of a
shared machine last seconds, a turn tens of milliseconds, so they fall on every tree alike.
The gateway opens as a default one does (on a tree with R30, its prune timer thread runs).
``--postgres``: each child on a schema of its own on the server named by
SESSIONSTATE_TEST_PG_URL. ``--threaded``: each child starts and joins a do-nothing thread
first, so every tree runs in the C library's multi-thread mode (docs/performance-threads.md,
"What a thread costs") and the comparison is of the code alone. Printed as JSON: per tree and
run the median, the median over runs, and its ratio to the first tree's. Run each comparison
in both orders too: what is left of the order's effect cancels in the geometric mean.

``instructions`` -- instructions per ``record_event`` under callgrind (needs valgrind with its
headers, and gcc: ``apt-get install valgrind gcc``), a cost that the machine's noise does not
move: collection is off but around each timed call (a tiny C library toggles it,
``CALLGRIND_TOGGLE_COLLECT``), after ``--warm-up`` uncounted events, with ``auto_prune=False``
where the tree has it and ``PYTHONHASHSEED=0``. Counted: user space (the interpreter, SQLite
and the C library), not the kernel's work for the file writes, which is the same for every tree
since the statements are. ``--style`` (repeatable) picks the scene: ``append-cost`` (the
default, above) or watcher_styles.py's two sides, where the target is a main session watched
by main sessions (``main``: woken, R12, inside their windows after the first wake) or by
sub-agents of them (``subagent``: never woken); both styles have the same wake hook. Two
invocations agree to about 0.1 %. Instructions are not time (a memory stall or a lock costs
more than its count): this complements ``wall``, it does not replace it.

``pg-batch`` -- a ``record_events`` batch on PostgreSQL, µs per event and round trips per
batch per size: runs ``benchmarks/studies/pg_batch.py`` with the arguments given (its
docstring says how; ``--latency MS`` puts a delaying relay between the children and the server).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

HERE = Path(__file__).resolve().parent
THIS_TREE = str(HERE.parent)
STUDIES = HERE / "studies"

NOW = 1_800_000_000.0
TARGET = "agent:main:subagent:target"
WATCHERS = ("agent:w1:main", "agent:w2:main", "agent:w3:main")
KIND = "human_direct_message"  # notifying (R1): freezes every caught-up watcher
# wall: events per turn. Long enough that a turn is not dominated by waking an idle process (on
# a virtual machine that alone adds hundreds of microseconds to the first event), short enough
# (tens of milliseconds) that the machine's phases fall on every tree alike.
TURN_EVENTS = 20
RNG_SEED = 20261202  # the rounds' orders: random, but the same for every invocation
# instructions: the scenes.
DEFAULT_STYLE = "append-cost"
STYLES = (DEFAULT_STYLE, "main", "subagent")
STYLE_TARGET = "agent:target:main"
WARM_UP = 200  # events recorded before counting starts (--warm-up)
TOGGLE_C = "#include <valgrind/callgrind.h>\nvoid toggle(void) { CALLGRIND_TOGGLE_COLLECT; }\n"


# -- the scene (run in a child, on its tree's package) ---------------------------------------------


def open_scene(url: str, style: str, auto_prune_off: bool):
    """A gateway on ``url`` with the style's target and watchers, all caught up: (gw, target, watchers)."""
    from sessionstate import Gateway

    # The styles' set-up (watcher_styles.py's): both sides have the same wake hook, so the
    # main-style watchers are woken once and then stay inside their windows (fixed clock).
    options: dict = {} if style == DEFAULT_STYLE else {"on_wake": lambda watcher, reason: None}
    if auto_prune_off:
        options["auto_prune"] = False
    try:
        gw = Gateway.open(url, clock=lambda: NOW, **options)
    except TypeError:  # a tree from before R30 has no prune schedule to turn off
        options.pop("auto_prune", None)
        gw = Gateway.open(url, clock=lambda: NOW, **options)
    target, watchers = TARGET, WATCHERS
    if style == DEFAULT_STYLE:
        for watcher in WATCHERS:
            gw.create_session(watcher)
        gw.create_session(TARGET, kind="subagent", parent=WATCHERS[0])
    else:
        target = STYLE_TARGET
        gw.create_session(target)
        for parent in WATCHERS:
            gw.create_session(parent)
        if style == "subagent":
            watchers = tuple(f"{parent}:subagent:s" for parent in WATCHERS)
            for parent, watcher in zip(WATCHERS, watchers):
                gw.create_session(watcher, kind="subagent", parent=parent)
    for watcher in watchers:
        gw.watch(watcher, target)
    return gw, target, watchers


def wall_child(url: str, threaded: bool) -> None:
    """Serve the parent: a turn of timed ``record_event`` calls per line read, their seconds
    written back as one JSON line."""
    if threaded:
        thread = threading.Thread(target=lambda: None)
        thread.start()
        thread.join()
    gw, target, watchers = open_scene(url, DEFAULT_STYLE, auto_prune_off=False)
    try:
        print("ready", flush=True)
        for _ in sys.stdin:
            times = []
            for _ in range(TURN_EVENTS):
                began = time.perf_counter()
                gw.record_event(target, KIND, actor_type="human", summary="hello")
                times.append(time.perf_counter() - began)
                for watcher in watchers:
                    gw.drain_system_events(watcher)
            print(json.dumps(times), flush=True)
    finally:
        gw.close()


def instructions_child(toggle_library: str, events: int, warm_up: int, style: str) -> None:
    """Record ``warm_up + events`` events, the last ``events`` each between two toggles."""
    import ctypes

    toggle = ctypes.CDLL(toggle_library).toggle
    with tempfile.TemporaryDirectory() as tmp:
        gw, target, watchers = open_scene(f"sqlite:///{tmp}/bench.db", style, auto_prune_off=True)
        record = gw.record_event
        for n in range(warm_up + events):
            counted = n >= warm_up
            if counted:
                toggle()
            record(target, KIND, actor_type="human", summary="hello")
            if counted:
                toggle()
            for watcher in watchers:
                gw.drain_system_events(watcher)
        gw.close()


# -- wall ----------------------------------------------------------------------------------------


def _wall_run(trees: list[str], urls: list[str], events: int, threaded: bool) -> list[float]:
    """One run: a child per tree, ``events`` events each in lockstep turns (the first tenth
    warms up); the median per tree, in the order given."""
    sys.path.insert(0, str(STUDIES))
    from tree_children import ask, start

    threading_flag = ["--threaded"] if threaded else []
    procs = [start("compare wall", tree, __file__, "--child", "wall", tree, url, *threading_flag)
             for tree, url in zip(trees, urls)]
    samples: list[list[float]] = [[] for _ in trees]
    try:
        rounds = random.Random(RNG_SEED)
        order = list(zip(trees, procs, samples))
        for _ in range(-(-(events + events // 10) // TURN_EVENTS)):
            rounds.shuffle(order)
            for tree, proc, times in order:
                times.extend(ask("compare wall", tree, proc, "go"))
    finally:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
    return [statistics.median(times[events // 10:]) for times in samples]


def wall(options: argparse.Namespace) -> dict:
    trees = [str(Path(t).resolve()) for t in options.trees]
    medians: list[list[float]] = [[] for _ in trees]
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(options.runs):
            with ExitStack() as stack:
                if options.postgres:
                    sys.path.insert(0, str(STUDIES))
                    from multiproc_latency import pg_schema

                    urls = [stack.enter_context(pg_schema()) for _ in trees]
                else:
                    urls = [f"sqlite:///{tmp}/run{run}-tree{n}.db" for n in range(len(trees))]
                for per_tree, median in zip(medians, _wall_run(trees, urls, options.events, options.threaded)):
                    per_tree.append(median)
    first = statistics.median(medians[0])
    return {
        "backend": "postgresql" if options.postgres else "sqlite",
        "threaded": options.threaded,
        "events": options.events,
        "trees": [
            {
                "tree": tree,
                "medians_us": [round(m * 1e6, 1) for m in per_tree],
                "median_us": round(statistics.median(per_tree) * 1e6, 1),
                "vs_first": round(statistics.median(per_tree) / first, 3),
            }
            for tree, per_tree in zip(trees, medians)
        ],
    }


# -- instructions --------------------------------------------------------------------------------


def _toggle_library(directory: str) -> str:
    source, library = Path(directory, "toggle.c"), Path(directory, "libtoggle.so")
    source.write_text(TOGGLE_C)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    return str(library)


def _count(tree: str, events: int, warm_up: int, library: str, directory: str, style: str) -> int:
    """The instructions collected for ``events`` events on ``tree``."""
    out = Path(directory, f"callgrind.{abs(hash((tree, style)))}.out")
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={out}",
         sys.executable, __file__, "--child", "instructions", tree, library, str(events), str(warm_up), style],
        env={**os.environ, "PYTHONPATH": tree, "PYTHONHASHSEED": "0"}, capture_output=True, text=True,
    )
    match = re.search(r"Collected\s*:\s*([\d,]+)", proc.stderr)
    if proc.returncode != 0 or match is None:
        sys.exit(f"compare instructions: the child on {tree} failed:\n{proc.stderr[-2000:]}")
    return int(match[1].replace(",", ""))


def instructions_available() -> bool:
    return (shutil.which("valgrind") is not None and shutil.which("gcc") is not None
            and Path("/usr/include/valgrind/callgrind.h").exists())


def instructions(options: argparse.Namespace) -> dict:
    if not instructions_available():
        sys.exit("compare instructions: needs valgrind (with its headers, callgrind.h) and gcc")
    trees = [str(Path(t).resolve()) for t in options.trees]
    styles = options.style or [DEFAULT_STYLE]
    with tempfile.TemporaryDirectory() as tmp:
        library = _toggle_library(tmp)
        runs = [(tree, style) for tree in trees for style in styles]
        per_event = [_count(tree, options.events, options.warm_up, library, tmp, style) / options.events
                     for tree, style in runs]
    return {
        "events": options.events,
        "trees": [
            {"tree": tree, "style": style, "instructions_per_event": round(n), "vs_first": round(n / per_event[0], 4)}
            for (tree, style), n in zip(runs, per_event)
        ],
    }


# -- the command line ----------------------------------------------------------------------------


USAGE = """usage: compare.py wall [--postgres] [--threaded] [--events N] [--runs R] TREE...
       compare.py instructions [--events N] [--warm-up N] [--style STYLE]... TREE...
       compare.py pg-batch [--rounds R] [--sizes 1,8,32] [--latency MS] TREE...
(compare.py MODE --help for a mode's options)"""


def mode_parsers() -> dict[str, argparse.ArgumentParser]:
    """The options of ``wall`` and ``instructions`` (``pg-batch`` takes the study's own)."""
    trees = {"nargs": "*", "default": [THIS_TREE], "help": "directories holding a sessionstate package (default: this checkout)"}
    by_wall = argparse.ArgumentParser(prog="compare.py wall", description="median wall-clock record_event, the trees in lockstep")
    by_wall.add_argument("--postgres", action="store_true", help="on the server named by SESSIONSTATE_TEST_PG_URL")
    by_wall.add_argument("--threaded", action="store_true",
                         help="start and join a do-nothing thread in every child first (multi-thread mode)")
    by_wall.add_argument("--events", type=int, default=1_500, help="events per tree in each run")
    by_wall.add_argument("--runs", type=int, default=3)
    by_wall.add_argument("trees", **trees)

    by_count = argparse.ArgumentParser(prog="compare.py instructions",
                                       description="instructions per record_event under callgrind, tree against tree")
    by_count.add_argument("--events", type=int, default=500, help="events counted per tree")
    by_count.add_argument("--warm-up", type=int, default=WARM_UP, help="events recorded per tree before counting starts")
    by_count.add_argument("--style", action="append", choices=STYLES,
                          help=f"the watchers' set-up, repeatable (default: {DEFAULT_STYLE}); each tree runs each style")
    by_count.add_argument("trees", **trees)
    return {"wall": by_wall, "instructions": by_count}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--child"]:
        mode, tree, rest = args[1], args[2], args[3:]
        sys.path.insert(0, tree)
        if mode == "wall":
            wall_child(rest[0], "--threaded" in rest[1:])
        else:
            instructions_child(rest[0], int(rest[1]), int(rest[2]), rest[3])
        return
    if args[:1] == ["pg-batch"]:
        # The study is a script of its own (its round-trip tracing and relay are PostgreSQL's).
        script = STUDIES / "pg_batch.py"
        sys.argv = [str(script), *args[1:]]
        runpy.run_path(str(script), run_name="__main__")
        return
    run = {"wall": wall, "instructions": instructions}
    if not args or args[0] not in run:
        print(USAGE, file=sys.stderr)
        sys.exit(0 if args[:1] in (["-h"], ["--help"]) else 2)
    # Options after the trees too, as the scripts this one replaced took them.
    options = mode_parsers()[args[0]].parse_intermixed_args(args[1:])
    print(json.dumps(run[args[0]](options), indent=2))


if __name__ == "__main__":
    main()
