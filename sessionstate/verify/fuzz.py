"""A seeded stateful fuzz: long random walks of the real gateway against the reference.

Why an in-package runner and not Hypothesis: ``sessionstate check`` must work from an
installed package, where ``tests/`` (and Hypothesis, a test extra) are absent. Each example
is a random walk of ``steps`` actions from the model-check configuration with a larger
retained log, run on three sides at once: the reference model, the machine path (with every
edge and state invariant of the model check) and the real ``Gateway`` on a SQLite file
(compared after every step). Example ``i`` of seed ``s`` uses ``Random(f"{s}:{i}")``, so one
failing example replays alone with ``--seed s --first-example i --budget 1``. The Hypothesis
machine in ``tests/gateway/test_stateful.py`` still runs in CI with pytest.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from .modelcheck import initial_node, step
from .replay import KEYS, ReplayWakes, apply_real, differences, open_replayed
from .world import AMBIENT, PAIRS, Action, all_actions, describe, enabled


@dataclass
class FuzzReport:
    seed: int
    examples: int = 0
    steps: int = 0
    seconds: float = 0.0
    failure: list[str] = field(default_factory=list)
    failing_example: int | None = None
    failing_seed: int | None = None
    from_db: int = 0  # examples replayed first from the example database

    @property
    def ok(self) -> bool:
        return not self.failure


def parse_budget(text: str) -> tuple[int | None, float | None]:
    """``"200"`` -> 200 examples; ``"30s"`` -> 30 seconds."""
    text = text.strip().lower()
    if text.endswith("s"):
        return None, float(text[:-1])
    return int(text), None


def parse_duration(text: str) -> float:
    """``"90s"``, ``"10m"``, ``"1h"`` or a bare number of seconds -> seconds."""
    text = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    try:
        value = float(number) * unit
    except ValueError:
        raise ValueError(f"not a duration: {text!r} (say 90s, 10m or 1h)") from None
    if value <= 0:
        raise ValueError(f"not a positive duration: {text!r}")
    return value


def stored_examples(directory: Path) -> list[dict]:
    """The example database: one JSON file per failing example found, oldest first."""
    if not directory.is_dir():
        return []
    entries = []
    for path in sorted(directory.glob("fuzz-*.json"), key=lambda p: p.stat().st_mtime):
        try:
            entries.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a torn cache entry is not a failure of the protocol
    return entries


def store_example(directory: Path, seed: int, index: int, steps: int, max_retained: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"fuzz-{seed}-{index}.json"
    path.write_text(json.dumps({"seed": seed, "example": index, "steps": steps, "max_retained": max_retained}))
    return path


def run_example(seed: int, index: int, steps: int, max_retained: int, directory: Path) -> list[str]:
    rng = random.Random(f"{seed}:{index}")
    actions = all_actions()
    url = f"sqlite:///{directory / f'fuzz-{index}.db'}"
    wakes = ReplayWakes()
    gw = open_replayed(url, wakes)
    trace: list[Action] = []
    try:
        for key in KEYS.values():
            gw.create_session(key)
        for watcher, target in PAIRS:
            gw.watch(KEYS[watcher], KEYS[target], ambient=(watcher, target) in AMBIENT)
        node = initial_node()
        for _ in range(steps):
            choices = [a for a in actions if enabled(a, node.ref.sessions, len(node.ref.events), max_retained)]
            if not choices:
                break
            action = rng.choice(choices)
            trace.append(action)
            node, messages = step(node, action)
            wakes.next_step()
            gw = apply_real(gw, url, action, wakes)
            messages += differences(gw, node.ref) + wakes.differences(node.ref, AMBIENT | node.ref.ambient_pairs())
            if messages:
                return [f"{i + 1}. {describe(a)}" for i, a in enumerate(trace)] + messages
    finally:
        gw.close()
    return []


def run_fuzz(
    budget: str = "50",
    *,
    seed: int = 0,
    first_example: int = 0,
    steps: int = 40,
    max_retained: int = 8,
    progress: Callable[[int, int | None, float], None] | None = None,
    example_db: Path | None = None,
) -> FuzzReport:
    """``example_db``: failing examples stored by earlier runs are run first (still failing: the
    run fails with it at once); a new failing example is stored there."""
    examples, seconds = parse_budget(budget)
    report = FuzzReport(seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sessionstate-fuzz-") as tmp:
        for entry in stored_examples(example_db) if example_db is not None else []:
            failure = run_example(int(entry["seed"]), int(entry["example"]), int(entry.get("steps", steps)),
                                  int(entry.get("max_retained", max_retained)), Path(tmp))
            report.examples += 1
            report.from_db += 1
            if failure:
                report.failure, report.failing_example = failure, int(entry["example"])
                report.failing_seed = int(entry["seed"])
                report.seconds = time.monotonic() - started
                return report
        index = first_example
        while True:
            elapsed = time.monotonic() - started
            if (examples is not None and report.examples >= examples) or (seconds is not None and elapsed >= seconds):
                break
            failure = run_example(seed, index, steps, max_retained, Path(tmp))
            report.examples += 1
            report.steps += steps
            if progress is not None:
                progress(report.examples, examples, elapsed)
            if failure:
                report.failure, report.failing_example, report.failing_seed = failure, index, seed
                if example_db is not None:
                    store_example(example_db, seed, index, steps, max_retained)
                break
            index += 1
    report.seconds = time.monotonic() - started
    return report


def progress_bar(stream: TextIO = sys.stderr) -> Callable[[int, int | None, float], None]:
    """A one-line progress display (examples done, of a count or against the clock)."""

    def show(done: int, total: int | None, elapsed: float) -> None:
        if total:
            filled = int(30 * done / total)
            stream.write(f"\rfuzz [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} examples")
        else:
            stream.write(f"\rfuzz {done} examples, {elapsed:.0f}s")
        stream.flush()

    return show


def progress_for(stream: TextIO = sys.stderr, *, every: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> Callable[[int, int | None, float], None]:
    """On a terminal the redrawn bar; elsewhere (a CI log) one line a minute at most."""
    if stream.isatty():
        return progress_bar(stream)
    last = [clock()]

    def line(done: int, total: int | None, elapsed: float) -> None:
        if clock() - last[0] >= every:
            last[0] = clock()
            stream.write(f"fuzz: {done} examples{f' of {total}' if total else ''}, {elapsed:.0f}s\n")
            stream.flush()

    return line
