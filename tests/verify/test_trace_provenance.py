"""R25 in the protocol trace: seed lines carry the cursor's provenance, a real run with an
ambient registration and its promotion replays clean, and a demotion is reported."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from sessionstate import Gateway
from sessionstate.clients.cli import main
from tests.verify.helpers import read_lines, write_lines

MAIN = "agent:main:main"
GROUP = "agent:main:group:g"


def replay(path: Path) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["replay", "--no-progress", str(path)])
    return code, out.getvalue()


def traced_promotion(tmp_path: Path) -> Path:
    path = tmp_path / "trace.jsonl"
    with Gateway.open(f"sqlite:///{tmp_path / 'state.db'}", trace=path) as gw:
        gw.create_session(MAIN)
        gw.create_session(GROUP)
        gw.watch(MAIN, GROUP, ambient=True)
        gw.record_event(GROUP, "human_direct_message", actor_type="human", summary="hi")
        gw.watch(MAIN, GROUP)  # promoted while pending
        gw.watch(MAIN, GROUP, ambient=True)  # never demoted
        gw.drain_system_events(MAIN)
    return path


def seeds(lines: list[dict]) -> list[int]:
    return [i for i, line in enumerate(lines) if line["op"] == "step" and line["trigger"] == "seed"]


def test_an_ambient_registration_and_its_promotion_replay_clean(tmp_path):
    path = traced_promotion(tmp_path)
    lines = read_lines(path)
    assert [lines[i]["provenance"] for i in seeds(lines)] == ["ambient", "explicit", "explicit"]
    code, out = replay(path)
    assert code == 0, out


def test_a_demoting_seed_is_an_r25_violation(tmp_path):
    lines = read_lines(traced_promotion(tmp_path))
    lines[seeds(lines)[2]]["provenance"] = "ambient"  # explicit -> ambient
    code, out = replay(write_lines(tmp_path / "demoted.jsonl", lines))
    assert code == 1 and "R25" in out, out


def test_an_unknown_provenance_is_a_format_violation(tmp_path):
    lines = read_lines(traced_promotion(tmp_path))
    lines[seeds(lines)[0]]["provenance"] = "implicit"
    code, out = replay(write_lines(tmp_path / "unknown.jsonl", lines))
    assert code == 1 and "T1" in out, out
