"""A child process per tree, for the comparisons that run trees in lockstep (``compare.py
wall``, ``pg_batch.py``): the child runs a script with the tree first on its import path
(``PYTHONPATH``), prints ``ready`` once its gateway is open, then answers each line it is sent
with one JSON line. Standard library only: the parent imports no tree's package through it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

__all__ = ["ask", "start"]


def start(name: str, tree: str, script: str, *args: str) -> subprocess.Popen[str]:
    """``python SCRIPT ARGS`` on ``tree``, once it said ``ready`` (``name`` says whose it is in
    the message that ends the run otherwise)."""
    proc = subprocess.Popen(
        [sys.executable, script, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        env={**os.environ, "PYTHONPATH": tree},
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        sys.exit(f"{name}: the child on {tree} did not start")
    return proc


def ask(name: str, tree: str, proc: subprocess.Popen[str], line: str) -> Any:
    """Send ``line``; the child's answer, read as JSON (a child that ends instead ends the run)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line + "\n")
    answer = proc.stdout.readline()
    if not answer:
        sys.exit(f"{name}: the child on {tree} failed")
    return json.loads(answer)
