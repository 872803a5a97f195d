"""Time-boxed fuzzing for CI: it stops on time, stores a failing example and tries it first."""

from __future__ import annotations

import io
import time

import pytest

from sessionstate.verify import fuzz
from sessionstate.verify.fuzz import parse_duration, progress_for, run_fuzz


def test_durations():
    assert parse_duration("10m") == 600 and parse_duration("90s") == 90 and parse_duration("1h") == 3600
    assert parse_duration("2") == 2
    for bad in ("", "m", "-1s", "ten"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_stops_on_time():
    started = time.monotonic()
    report = run_fuzz("2s", seed=3)
    took = time.monotonic() - started
    assert report.ok and report.examples >= 1
    # One example is a few hundred ms on a loaded machine; the budget is checked between examples.
    assert 2.0 <= took < 2.0 + 15.0, took


def test_resumes_from_its_database(tmp_path, monkeypatch):
    real = fuzz.run_example
    tried: list[tuple[int, int]] = []

    def seeded(seed, index, steps, max_retained, directory):  # a bug only example 2 of seed 7 shows
        tried.append((seed, index))
        if (seed, index) == (7, 2):
            return ["1. something", "INV2: seeded failure"]
        return real(seed, index, 3, max_retained, directory)

    monkeypatch.setattr(fuzz, "run_example", seeded)
    db = tmp_path / "examples"
    first = run_fuzz("10", seed=7, example_db=db)
    assert not first.ok and first.failing_example == 2 and first.from_db == 0
    assert list(db.glob("fuzz-*.json"))
    tried.clear()
    second = run_fuzz("10", seed=99, example_db=db)  # another seed: the stored failure runs first
    assert tried[0] == (7, 2)
    assert not second.ok and second.failing_seed == 7 and second.from_db == 1 and second.examples == 1


def test_ci_progress_is_one_line_a_minute():
    now = [0.0]
    stream = io.StringIO()
    show = progress_for(stream, clock=lambda: now[0])
    for second in range(0, 150):
        now[0] = float(second)
        show(second, None, float(second))
    assert stream.getvalue().count("\n") == 2  # at 60 s and 120 s
