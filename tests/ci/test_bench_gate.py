"""The benchmark gate: a path over its limit against its same-run baseline fails."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_report", ROOT / "benchmarks" / "report.py")
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)


def _json(tmp_path: Path, slowdown: float) -> Path:
    benches = [{"name": "record", "stats": {"median": 100e-6 * slowdown},
                "extra_info": {"key": "record.w3.project", "raw_median": 100e-6}},
               {"name": "batch", "stats": {"median": 110e-6}, "extra_info": {"key": "batch.project", "raw_median": 100e-6}}]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"benchmarks": benches, "machine_info": {}}))
    return path


def test_gate_passes_within_limit(tmp_path):
    assert report.main([str(_json(tmp_path, 1.1)), "--no-write", "--fail-above", "record.w3.project=1.5"]) == 0


def test_gate_fails_on_injected_slowdown(tmp_path, capsys):
    assert report.main([str(_json(tmp_path, 3.0)), "--no-write", "--fail-above", "record.w3.project=1.5"]) == 1
    assert "GATE record.w3.project: 3.00x" in capsys.readouterr().err


def test_documented_defaults(tmp_path):
    assert report.default_limits()["record.w3.project"] == 1.25
    assert report.main([str(_json(tmp_path, 1.2)), "--no-write", "--gate"]) == 0
    assert report.main([str(_json(tmp_path, 1.3)), "--no-write", "--gate"]) == 1


def test_unmeasured_explicit_path_fails_and_bad_options_are_refused(tmp_path):
    assert report.main([str(_json(tmp_path, 1.0)), "--no-write", "--fail-above", "drain.project=2"]) == 1
    for bad in ("record.w3.project", "nope=1.5", "record.w3.project=x"):
        with pytest.raises(SystemExit):
            report.main([str(_json(tmp_path, 1.0)), "--no-write", "--fail-above", bad])


def _run_record_benchmark(tmp_path: Path, name: str, *plugin: str) -> Path:
    """The real benchmark of one path, in smoke mode, through pytest-benchmark's JSON."""
    out = tmp_path / f"{name}.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/bench_record.py::test_record[3]", "-q", "-p", "no:cacheprovider",
         *plugin, f"--benchmark-json={out}"],
        # Not as an xdist worker (pytest-benchmark leaves the JSON to the controller then).
        cwd=ROOT, env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
                       "SESSIONSTATE_BENCH_SMOKE": "1", "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0 and out.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def test_gate_fails_a_real_benchmark_run_whose_append_path_was_slowed(tmp_path, capsys):
    # A limit far above any machine's noise (the path runs at 1-2x raw here, and a smoke run's
    # few rounds on a loaded machine have been seen past 5x) and far below the injected 50 ms
    # (raw is 0.1-1 ms here, so at least 50x): only the slowdown can cross it.
    clean = _run_record_benchmark(tmp_path, "clean")
    slowed = _run_record_benchmark(tmp_path, "slowed", "-p", "tests.ci.slowed_record")
    assert report.main([str(clean), "--no-write", "--fail-above", "record.w3.project=15"]) == 0
    assert report.main([str(slowed), "--no-write", "--fail-above", "record.w3.project=15"]) == 1
    printed = capsys.readouterr()
    assert "GATE record.w3.project" in printed.out + printed.err
