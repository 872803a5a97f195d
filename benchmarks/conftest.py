"""pytest configuration of the benchmark suite.

* Benchmark modules are named ``bench_*.py``: pytest's default ``test_*.py`` pattern and the
  project's ``testpaths = ["tests"]`` never pick them up, and this file collects them only when
  ``benchmarks/`` (or a file in it) is named on the command line, so ``pytest`` and
  ``pytest .`` from the repository root run the tests alone.
* ``SESSIONSTATE_BENCH_SMOKE=1`` (CI) runs every benchmark with minimal rounds and shrunken
  setups so the whole suite (the studies at their smallest included) finishes in a few
  minutes; nothing asserts timing, ever.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the helpers module, for any import mode
    sys.path.insert(0, str(HERE))

from _support import SMOKE  # noqa: E402


def _benchmarks_requested(config: pytest.Config) -> bool:
    for arg in config.args:
        path = Path(arg.split("::", 1)[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    if file_path.suffix == ".py" and file_path.name.startswith("bench_"):
        # A file named on the command line pytest collects itself (whatever its name): once.
        if _benchmarks_requested(parent.config) and not parent.session.isinitpath(file_path):
            return pytest.Module.from_parent(parent, path=file_path)
    return None


def pytest_configure(config: pytest.Config) -> None:
    if SMOKE:
        # Plain `benchmark(fn)` calls too: one short round, no warm-up, no calibration loop.
        opts = config.option
        for name, value in (
            ("benchmark_min_rounds", 1),
            ("benchmark_max_time", 0.0),
            ("benchmark_min_time", 0.0),
            ("benchmark_warmup", False),
            ("benchmark_calibration_precision", 1),
        ):
            if hasattr(opts, name):
                setattr(opts, name, value)


def pytest_report_header(config: pytest.Config) -> str:
    return f"sessionstate benchmarks: {'SMOKE mode (sizes shrunk, minimal rounds)' if SMOKE else 'full mode'}"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "bench.db"
