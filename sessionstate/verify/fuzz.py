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

    @property
    def ok(self) -> bool:
        return not self.failure


def parse_budget(text: str) -> tuple[int | None, float | None]:
    """``"200"`` -> 200 examples; ``"30s"`` -> 30 seconds."""
    text = text.strip().lower()
    if text.endswith("s"):
        return None, float(text[:-1])
    return int(text), None


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
) -> FuzzReport:
    examples, seconds = parse_budget(budget)
    report = FuzzReport(seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sessionstate-fuzz-") as tmp:
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
                report.failure, report.failing_example = failure, index
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
