"""``sessionstate schemas``: the published schemas, printed or written as files."""

from __future__ import annotations

import json
import subprocess
import sys

from sessionstate.tools.schemas import TOOL_SCHEMAS


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sessionstate.clients.cli", "schemas", *args],
                          capture_output=True, text=True, timeout=60, check=True)


def test_prints_every_schema():
    assert json.loads(run().stdout) == TOOL_SCHEMAS


def test_writes_one_file_per_tool(tmp_path):
    out = run("--write", str(tmp_path / "schemas")).stdout
    written = sorted(p.name for p in (tmp_path / "schemas").iterdir())
    assert written == sorted(f"{name}.json" for name in TOOL_SCHEMAS)
    assert out.count("wrote ") == len(TOOL_SCHEMAS)
