"""Instructions per ``record_event``, tree against tree: a cost that machine noise cannot move.

Run: ./dev run .venv/bin/python benchmarks/instructions.py [--events N] [--warm-up N] TREE...
     (needs valgrind and its headers, and gcc: apt-get install valgrind gcc)

Wall-clock figures on this project's shared two-core machines swing by ±10 % between two
invocations of the same comparison (``append_cost.py``), which hides a change of a few per
cent. This counts instead: each TREE (a directory holding a ``sessionstate`` package, as in
``append_cost.py``) runs in a child process under callgrind, with collection off except around
each timed ``record_event`` (a tiny C library toggles it; ``CALLGRIND_TOGGLE_COLLECT``). The set-up
is ``append_cost.py``'s: a target with three main-style watchers, caught up before each event
by their drains (not counted), a fixed clock, ``auto_prune=False`` where the tree has it, and
``PYTHONHASHSEED=0``. Printed per tree: the instructions of one event (user space: what the
interpreter, SQLite and the C library execute; the kernel's work for the file writes is not
counted, and is the same for every tree since the statements are), and the ratio to the first.

Two invocations agree to about 0.1 %. Instructions are not time: a memory stall or a lock
costs more than its count, so this complements ``append_cost.py``, it does not replace it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NOW = 1_800_000_000.0
TARGET = "agent:main:subagent:target"
WATCHERS = ("agent:w1:main", "agent:w2:main", "agent:w3:main")
# --style: the default above (append_cost.py's), or watcher_styles.py's two sides, where the
# target is a main session and its watchers main sessions (woken, R12) or sub-agents (never).
DEFAULT_STYLE = "append-cost"
STYLES = (DEFAULT_STYLE, "main", "subagent")
STYLE_TARGET = "agent:target:main"
WARM_UP = 200  # events recorded before counting starts (--warm-up)
TOGGLE_C = "#include <valgrind/callgrind.h>\nvoid toggle(void) { CALLGRIND_TOGGLE_COLLECT; }\n"


def child(toggle_library: str, events: int, warm_up: int, style: str) -> None:
    """Record ``events`` events, each between two toggles (run under callgrind, on its tree)."""
    import ctypes

    from sessionstate import Gateway

    toggle = ctypes.CDLL(toggle_library).toggle
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.db"
        # The styles' set-up (watcher_styles.py's): both sides have the same wake hook, so the
        # main-style watchers are woken once and then stay inside their windows (fixed clock).
        hook = {} if style == DEFAULT_STYLE else {"on_wake": lambda watcher, reason: None}
        try:
            gw = Gateway.open(url, clock=lambda: NOW, auto_prune=False, **hook)
        except TypeError:  # a tree from before R30 has no prune schedule to turn off
            gw = Gateway.open(url, clock=lambda: NOW, **hook)
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
        record = gw.record_event
        for n in range(warm_up + events):
            counted = n >= warm_up
            if counted:
                toggle()
            record(target, "human_direct_message", actor_type="human", summary="hello")
            if counted:
                toggle()
            for watcher in watchers:
                gw.drain_system_events(watcher)
        gw.close()


def _toggle_library(directory: str) -> str:
    source, library = Path(directory, "toggle.c"), Path(directory, "libtoggle.so")
    source.write_text(TOGGLE_C)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    return str(library)


def count(tree: str, events: int, warm_up: int, library: str, directory: str, style: str) -> int:
    """The instructions collected for ``events`` events on ``tree``."""
    out = Path(directory, f"callgrind.{abs(hash((tree, style)))}.out")
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={out}",
         sys.executable, __file__, "--child", tree, library, str(events), str(warm_up), style],
        env={**os.environ, "PYTHONPATH": tree, "PYTHONHASHSEED": "0"}, capture_output=True, text=True,
    )
    match = re.search(r"Collected\s*:\s*([\d,]+)", proc.stderr)
    if proc.returncode != 0 or match is None:
        sys.exit(f"instructions: the child on {tree} failed:\n{proc.stderr[-2000:]}")
    return int(match[1].replace(",", ""))


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--child"]:
        sys.path.insert(0, args[1])
        child(args[2], int(args[3]), int(args[4]), args[5])
        return
    parser = argparse.ArgumentParser(description="instructions per record_event under callgrind, tree against tree")
    parser.add_argument("--events", type=int, default=500, help="events counted per tree")
    parser.add_argument("--warm-up", type=int, default=WARM_UP, help="events recorded per tree before counting starts")
    parser.add_argument("--style", action="append", choices=STYLES,
                        help=f"the watchers' set-up, repeatable (default: {DEFAULT_STYLE}); each tree runs each style")
    parser.add_argument("trees", nargs="*", default=[str(Path(__file__).resolve().parent.parent)],
                        help="directories holding a sessionstate package (default: this checkout)")
    options = parser.parse_intermixed_args(args)  # options after the trees too, as before
    events, warm_up, styles = options.events, options.warm_up, options.style or [DEFAULT_STYLE]
    missing = [tool for tool in ("valgrind", "gcc") if shutil.which(tool) is None]
    if missing or not Path("/usr/include/valgrind/callgrind.h").exists():
        sys.exit(f"instructions: needs valgrind (with its headers) and gcc; missing: {missing or ['callgrind.h']}")
    trees = [str(Path(t).resolve()) for t in options.trees]
    with tempfile.TemporaryDirectory() as tmp:
        library = _toggle_library(tmp)
        runs = [(tree, style) for tree in trees for style in styles]
        per_event = [count(tree, events, warm_up, library, tmp, style) / events for tree, style in runs]
    print(json.dumps({
        "events": events,
        "trees": [
            {"tree": tree, "style": style, "instructions_per_event": round(n), "vs_first": round(n / per_event[0], 4)}
            for (tree, style), n in zip(runs, per_event)
        ],
    }, indent=2))


if __name__ == "__main__":
    main()
