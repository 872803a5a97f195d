"""``sessionstate adopt``: each file-based provider from the command line, on both backends (the
Pi file is written in Pi's documented v3 format; its provider's own tests use Pi's code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessionstate import Gateway
from sessionstate.clients.cli import main

from tests.upstream.jsonl_fixtures import TranscriptBuilder, encode

SESSION = "01a244bc-3987-717a-825e-248c72d87eb5"


def pi_session(agent_dir: Path) -> None:
    directory = agent_dir / "sessions" / "--home-dev-app--"
    directory.mkdir(parents=True)
    lines = [{"type": "session", "version": 3, "id": SESSION, "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/home/dev/app"},
             {"type": "message", "id": "9a354776", "parentId": None, "timestamp": "2026-01-01T00:00:01.000Z",
              "message": {"role": "user", "content": "hello", "timestamp": 1767225601000}}]
    (directory / f"2026-01-01T00-00-00-000Z_{SESSION}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_adopt_a_pi_session_and_a_claude_transcript(tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pi_session(tmp_path / "agent")
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "agent"))
    monkeypatch.delenv("PI_CODING_AGENT_SESSION_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    builder = TranscriptBuilder()
    builder.path_under(tmp_path / "projects").write_bytes(encode(builder.user_prompt("hi")))
    assert main(["sessions", "create", "agent:main:main", "--db", db_url]) == 0
    assert main(["adopt", "pi", SESSION, "--db", db_url, "--watcher", "agent:main:main", "--json"]) == 0
    assert main(["adopt", "claude-jsonl", builder.session_id, "--db", db_url, "--claude-root",
                 str(tmp_path / "projects"), "--agent", "coder"]) == 0
    out = capsys.readouterr().out.splitlines()
    pi = json.loads(out[-2])
    assert (pi["sessionKey"], pi["agentId"], pi["primed"]) == (f"agent:main:adopted:pi:{SESSION}", "main", True)
    assert out[-1].startswith(f"adopted claude-jsonl {builder.session_id} as agent:coder:adopted:claude-jsonl:")
    gw = Gateway.open(db_url)
    try:
        links = {(link.provider, link.agent_id, link.primed) for link in gw.store.links.all()}
    finally:
        gw.close()
    assert links == {("pi", "main", True), ("claude-jsonl", "coder", True)}
    assert main(["adopt", "pi", "no-such-session", "--continue", "--db", db_url]) == 2
