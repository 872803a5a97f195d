"""The maintainers' trials: faults and load on real processes and servers.

They need the repository beside them (they import this folder) and, for some, PostgreSQL's
server binaries; the protocol checks that run from the installed wheel stay in
``sessionstate.verify`` (``sessionstate check``). One entry point runs them all:
``./dev trials`` (``python -m trials``); README.md says what each one does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(module: str, *args: str) -> list[str]:
    """The command line of a trial's child process: ``python -m trials.MODULE ARGS``."""
    return [sys.executable, "-m", f"trials.{module}", *args]


def worker_env() -> dict[str, str]:
    """The child's environment: this checkout first on its import path, wherever it runs from."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}
