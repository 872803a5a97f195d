"""docs/ci.md: the pipelines' commands are ones the CLI (and benchmarks/report.py) accept."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from sessionstate.clients.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ci.md"


def _blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def _commands(block: str) -> list[str]:
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load(block)
    lines: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("run", "script", "before_script") and isinstance(value, (str, list)):
                    for item in value if isinstance(value, list) else [value]:
                        lines.extend(ln.strip() for ln in str(item).splitlines() if ln.strip())
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(data)
    return lines


def _argv(line: str, program: str) -> list[str] | None:
    words = shlex.split(line)
    while words and re.match(r"^[A-Z_]+=", words[0]):
        words = words[1:]
    if not words or not (words[0] == program or words[:2] == ["python", program]):
        return None
    return words[2:] if words[0] == "python" else words[1:]


def test_two_pipelines_are_documented():
    blocks = _blocks()
    assert len(blocks) == 2
    for block in blocks:
        commands = _commands(block)
        assert any("--junit-xml" in c for c in commands) and any("--fuzz-for" in c for c in commands)
        assert any("--example-db" in c for c in commands) and any("--gate" in c for c in commands)


def test_every_sessionstate_line_parses():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "benchmarks" / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    parser = build_parser()
    seen = 0
    for block in _blocks():
        for line in _commands(block):
            line = re.sub(r"\$\{\{[^}]*\}\}", "7", line).replace('"$CI_PIPELINE_IID"', "7")
            argv = _argv(line, "sessionstate")
            if argv is not None:
                parser.parse_args(argv)  # SystemExit (exit 2) on an option the CLI does not take
                seen += 1
            argv = _argv(line, "benchmarks/report.py")
            if argv is not None:
                limits = [a.split("=", 1)[1] for a in argv if a.startswith("--fail-above=")]
                args = iter(argv)
                for word in args:
                    if word == "--fail-above":
                        limits.append(next(args))
                report.gate_limits(limits, defaults="--gate" in argv)  # ValueError on a bad PATH=RATIO
                seen += 1
    assert seen >= 6


def test_a_wrong_option_would_be_caught():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["check", "--fuzz-four", "10m"])
