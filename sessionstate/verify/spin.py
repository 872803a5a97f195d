"""Run SPIN on the generated Promela model and read its verdicts and trails.

``run_spin`` builds the verifier once for a configuration (``spin -a``, ``gcc``) and runs one
search per property: the safety search (assertions, INV1-INV11, invalid end states) and one
acceptance-cycle search under weak fairness per LTL formula (``pan -a -f -N LIV1``). Each run
reports pan's own figures: states stored, depth reached, errors, seconds. A failing run keeps
its trail; ``trail_steps`` replays it with ``spin -t`` and returns the ``@ACT``/``@POS`` lines
the model prints, which ``trail_actions`` turns into the explorer's actions (``world.py``) so
``replay.py`` can run them on real gateways.

gcc builds pan without optimisation: the verifier of this model compiles in seconds at -O0
and in minutes at -O2, and the searches are small.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .world import PAIRS, SESSIONS, Action, provenance_of

PROPERTIES = ("safety", "LIV1", "LIV2")
# The bounds the tests and `sessionstate check --spin` use (seconds each on a loaded 2-core box).
# CI's bounds: two processes at STEPS 4, where the stranded notice of `attach_keeps_held` is found.
BOUNDS = {1: {"MAXSEQ": 2, "STEPS": 4}, 2: {"MAXSEQ": 2, "STEPS": 4}}
_STATS = re.compile(r"depth reached (\d+), errors: (\d+)")
_STORED = re.compile(r"(\d+) states, stored")


class SpinMissing(RuntimeError):
    """``spin`` or ``gcc`` is not on PATH."""


@dataclass
class SpinRun:
    prop: str
    states: int
    depth: int
    errors: int
    seconds: float
    output: str

    @property
    def ok(self) -> bool:
        return self.errors == 0

    def line(self) -> str:
        return f"{self.prop}: {self.states} states stored, depth {self.depth}, errors {self.errors}, {self.seconds:.1f}s"


@dataclass
class SpinReport:
    processes: int
    bounds: dict[str, int]
    runs: list[SpinRun] = field(default_factory=list)
    build_seconds: float = 0.0
    workdir: Path | None = None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)

    @property
    def failed(self) -> SpinRun | None:
        return next((r for r in self.runs if not r.ok), None)


def spin_available() -> str | None:
    """``None`` when SPIN can run here, else the reason it cannot."""
    for tool in ("spin", "gcc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install spin gcc)"
    return None


def defines(processes: int, bounds: dict[str, int]) -> list[str]:
    """spin's ``-D`` options for ``processes`` and ``bounds``."""
    return [f"-DPROCS={processes}"] + [f"-D{k}={v}" for k, v in bounds.items()]


def work_directory(workdir: Path | None, prefix: str) -> Path:
    """Where a run writes its model and builds (a new temporary one unless given), made; raises
    ``SpinMissing`` first when spin or gcc is not here."""
    reason = spin_available()
    if reason:
        raise SpinMissing(reason)
    workdir = workdir or Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


def run_spin(
    model: str,
    processes: int = 1,
    bounds: dict[str, int] | None = None,
    properties: tuple[str, ...] = PROPERTIES,
    workdir: Path | None = None,
    stop_at_first: bool = True,
) -> SpinReport:
    """Verify ``model`` (Promela text) for ``processes`` with ``bounds``; a failed run leaves
    its trail in ``report.workdir``."""
    workdir = work_directory(workdir, "sessionstate-spin-")
    bounds = dict(bounds or BOUNDS[processes])
    (workdir / "model.pml").write_text(model)
    report = SpinReport(processes, bounds, workdir=workdir)
    started = time.monotonic()
    _run(["spin", *defines(processes, bounds), "-a", "model.pml"], workdir)
    # NFAIR: the weak-fairness bookkeeping needs one slot per process (4 proctypes + claim).
    # The two verifiers build side by side (the build is most of a small run's time).
    # A safety-only run (the seeded-bug tests) builds no claim verifier: half the build.
    builds = [["gcc", "-O0", "-w", "-DNFAIR=5", "-o", "pan", "pan.c"]] if set(properties) - {"safety"} else []
    if "safety" in properties:
        builds.append(["gcc", "-O0", "-w", "-DNOCLAIM", "-o", "pan_safety", "pan.c"])
    _run_all(builds, workdir)
    report.build_seconds = time.monotonic() - started
    for prop in properties:
        command = ["./pan_safety", "-m100000"] if prop == "safety" else ["./pan", "-a", "-f", "-m100000", "-N", prop]
        began = time.monotonic()
        out = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=600).stdout
        seconds = time.monotonic() - began
        stats, stored = _STATS.search(out), _STORED.search(out)
        if stats is None or stored is None:
            raise RuntimeError(f"unexpected pan output for {prop}:\n{out[-2000:]}")
        run = SpinRun(prop, int(stored.group(1)), int(stats.group(1)), int(stats.group(2)), seconds, out)
        report.runs.append(run)
        if not run.ok and stop_at_first:
            break
    return report


def _run_all(commands: list[list[str]], cwd: Path) -> None:
    running = [(c, subprocess.Popen(c, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
               for c in commands]
    for command, process in running:
        output, _ = process.communicate(timeout=600)
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{output[-2000:]}")


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def trail_steps(report: SpinReport) -> list[str]:
    """The ``@ACT``/``@POS``/``@WAKE`` lines of the failing run's trail, in order."""
    assert report.workdir is not None
    done = subprocess.run(["spin", *defines(report.processes, report.bounds), "-t", "model.pml"],
                          cwd=report.workdir, capture_output=True, text=True, timeout=600)
    return [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("@")]


NONE = 255


def trail_actions(steps: list[str], processes: int) -> list[tuple[Action | None, tuple | None]]:
    """Each ``@ACT`` as the explorer's action (``None`` for the window passing, which the
    real gateway's clock does), with the positions the model printed after it: per pair,
    ``None`` (no cursor) or ``(L, N, M)``."""
    out: list[tuple[Action | None, tuple | None]] = []
    for line in steps:
        if line.startswith("@POS"):
            if out:
                pos = []
                for part in line.split()[1:]:
                    watched, l_, n_, m_ = (int(x) for x in part.split(","))
                    pos.append((l_, n_, m_) if watched else None)
                out[-1] = (out[-1][0], tuple(pos))
            continue
        if not line.startswith("@ACT"):
            continue
        word, *args = line.split()[1:]
        out.append((_action(word, args, processes), None))
    return out


def trail_wakes(steps: list[str]) -> list[list[tuple[int, int]]]:
    """Per ``@ACT`` (as ``trail_actions`` lists them), the wakes the model sent in that step:
    ``(watcher index, process)`` from the ``@WAKE`` lines printed before its ``@ACT`` (a wake
    is printed inside its step, the step's ``@ACT`` at its end)."""
    out: list[list[tuple[int, int]]] = []
    pending: list[tuple[int, int]] = []
    for line in steps:
        if line.startswith("@WAKE"):
            watcher, process = (int(x) for x in line.split()[1:3])
            pending.append((watcher, process))
        elif line.startswith("@ACT"):
            out.append(pending)
            pending = []
    return out


def _action(word: str, args: list[str], processes: int) -> Action | None:
    two = processes == 2

    def tagged(*parts: object, process: str | None) -> Action:
        return (*parts, int(process)) if two and process is not None else tuple(parts)

    if word == "event":
        target, actor, notifying, q = args
        act = (SESSIONS[int(target)], None if int(actor) == NONE else SESSIONS[int(actor)], notifying == "1")
        return ("event", *act, int(q)) if two and act[2] else ("event", *act)
    if word in ("drain", "reset", "attach"):
        watcher = ("A", "B")[int(args[0])]
        return tagged(word, watcher, process=args[1])
    if word == "delete":
        return tagged("delete", SESSIONS[int(args[0])], process=args[1])
    if word == "restart":
        return ("restart", int(args[0])) if two else ("restart",)
    if word == "sweep":
        return ("sweep", int(args[0]))
    if word == "prune":
        return ("prune",)
    if word == "watch":
        pair = PAIRS[int(args[0])]
        return ("watch", *pair, provenance_of(pair))
    if word == "unwatch":
        return tagged("unwatch", *PAIRS[int(args[0])], process=args[1])
    if word == "window":
        return None
    raise ValueError(f"unknown trail step {word!r}")


# -- a trail on real gateways ------------------------------------------------------------------


@dataclass
class TrailReplay:
    """What a SPIN trail did on real gateways: per step, where the real durable positions
    differ from the model's, and where the main-style watcher A's real wakes (which process
    sent how many) differ from the model's; the protocol trace (spec section 15) the gateways
    wrote, and what the trace checker found in it."""

    steps: int
    differences: list[str]
    trace: Path
    trace_violation: str | None
    wake_differences: list[str] = field(default_factory=list)
    model_wakes: int = 0  # A's wakes in the trail (so a test can tell a trail without any)


def replay_trail(
    steps: list[tuple[Action | None, tuple | None]], processes: int, directory: Path,
    wakes_per_step: list[list[tuple[int, int]]] | None = None,
) -> TrailReplay:
    """Run a converted trail on real gateways sharing one SQLite file, each writing the
    protocol trace; compare the durable positions with the model's after every step and, with
    ``wakes_per_step`` (``trail_wakes``), A's wakes too.

    Time: the gateways' clock stands still except when the model's window passes (a ``None``
    step), which moves it past the wake window and fires every gateway's due owed wakes, so a
    window is open in the real store exactly while it is in the model. Only A's wakes are
    compared: B is a sub-agent in the model but ``agent:b:main`` in the replay's keys."""
    from ..facade.gateway import Gateway
    from . import replay
    from .trace_check import TraceChecker, Violation
    from .trace_read import read_trace

    directory.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{directory / 'trail.db'}"
    trace = directory / "trail.jsonl"

    now = [replay.NOW]
    sent: list[int] = []  # the process index of each wake of A in the current step

    def opened(server: bool, process: int = 0) -> Gateway:
        def on_wake(watcher: str, reason: str) -> None:
            if watcher == replay.KEYS["A"]:
                sent.append(process)

        # The Promela model has no `created` event nor announcement line (R27).
        gw = Gateway.open(url, clock=lambda: now[0], trace=trace, on_wake=on_wake, record_created=False,
                          notify_on_create=False, auto_prune=False)  # the model prunes as an action
        if server:
            gw.cluster.register()
        return gw

    first = opened(False)
    for key in replay.KEYS.values():
        first.create_session(key)
    for watcher, target in PAIRS:
        first.watch(replay.KEYS[watcher], replay.KEYS[target],
                    ambient=provenance_of((watcher, target)) == "ambient")
    if processes == 1:
        gws = [first]
    else:
        first.close()
        gws = [opened(True, 0), opened(True, 1)]
        # The model starts with process 0 serving both watchers (claim[] = 0): without the
        # claims both servers would serve them by pattern (R19).
        for watcher in ("A", "B"):
            gws[0].cluster.attach(replay.KEYS[watcher])
        gws[1].cluster.sweep()
    differences: list[str] = []
    wake_differences: list[str] = []
    wakes = replay.ReplayWakes()  # apply_real's recorder; the gateways here report to `sent`
    model_wakes = 0
    done = 0
    try:
        for index, (action, positions) in enumerate(steps):
            sent.clear()
            if action is None:  # the window passes: nothing durable but the owed wakes
                now[0] += replay.STEP_SECONDS
                for gw in gws:
                    gw.ops.fire_due_wakes()
            elif action[0] == "restart":
                done += 1
                process = action[1] if processes == 2 else 0
                gws[process].close()
                gws[process] = opened(processes == 2, process)
            elif processes == 1:
                done += 1
                gws[0] = replay.apply_real(gws[0], url, action, wakes)
            else:
                done += 1
                replay.apply_real_process(gws, url, action, wakes)
            if wakes_per_step is not None and index < len(wakes_per_step):
                want = sorted(q for w, q in wakes_per_step[index] if w == 0)
                model_wakes += len(want)
                if sorted(sent) != want:
                    wake_differences.append(f"step {index + 1} ({action or 'the window passes'}): A woken by"
                                            f" processes {sorted(sent)} for real, {want} in the model")
            if positions is None or action is None:
                continue
            for pair_index, (watcher, target) in enumerate(PAIRS):
                gw = gws[0]
                if not (gw.ops.session_exists(replay.KEYS[watcher]) and gw.ops.session_exists(replay.KEYS[target])):
                    continue
                real = gw.ops.cursor_positions(replay.KEYS[watcher], replay.KEYS[target])
                real_t = tuple(real) if real else None
                if real_t != positions[pair_index]:
                    differences.append(f"step {index + 1} ({action}): pair {watcher}{target} real {real_t}"
                                       f" != model {positions[pair_index]}")
    finally:
        for gw in gws:
            gw.close()
    violation = None
    try:
        TraceChecker().run([read_trace(trace)])
    except Violation as exc:
        violation = str(exc)
    return TrailReplay(done, differences, trace, violation, wake_differences, model_wakes)
