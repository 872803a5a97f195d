"""Docs are part of the change: every CLI command is documented, the diagram is current, and
every reference from one doc to another (a link, a path, a section named in quotes) resolves."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sessionstate.clients.cli import build_parser
from sessionstate.statemachine.diagram import diagram_markdown

ROOT = Path(__file__).resolve().parents[1]


def cli_commands() -> list[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(sub.choices)


def test_every_cli_command_is_documented():
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    missing = [c for c in cli_commands() if f"## `sessionstate {c}" not in text]
    assert not missing, f"undocumented CLI commands: {missing}"


def test_every_cli_option_is_documented():
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [
        f"{name} {option}"
        for name, command in sub.choices.items()
        for action in command._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help" and f"`{option}" not in text
    ]
    assert not missing, f"undocumented CLI options: {missing}"


def test_the_diagram_in_docs_is_generated_from_the_machine():
    assert (ROOT / "docs" / "protocol-diagram.md").read_text(encoding="utf-8") == diagram_markdown(), (
        "docs/protocol-diagram.md is stale: run `sessionstate diagram --write docs/protocol-diagram.md`"
    )


def test_demo_runs_end_to_end(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "sessionstate.clients.cli", "demo", "--db", str(tmp_path / "demo.db")],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    notice = 'Session "agent:main:subagent:worker" changed (other actor).'
    assert "manager's queue after twenty messages: 1 line(s)" in out
    assert "byte-identical after the restart: True" in out
    assert '"historyGap": true' in out
    assert out.count(notice) >= 5


def test_status_command(tmp_path):
    db = tmp_path / "s.db"
    from sessionstate import Gateway

    with Gateway.open(str(db)) as gw:
        gw.create_session("agent:main:main")
        gw.record_event("agent:main:main", "goal_changed", actor_type="human", summary="goal updated")
    run = lambda *a: subprocess.run([sys.executable, "-m", "sessionstate.clients.cli", "status", *a, "--db", str(db)],
                                    capture_output=True, text=True, timeout=60)
    human = run("agent:main:main", "--changes-since", "0")
    # 1 is the session's own `created` (R27), 2 the goal change.
    assert human.returncode == 0 and "stateVersion 2" in human.stdout and "goal updated" in human.stdout
    with Gateway.open(str(db)) as gw:
        gw.create_session("agent:main:group:g")
        gw.watch("agent:main:main", "agent:main:group:g", ambient=True)
    watched = run("agent:main:group:g")
    # The watch starts at the group's head: its `created` (R27), sequence 3.
    assert "watched by agent:main:main (ambient): last seen 3, notified 3, material 3" in watched.stdout
    as_json = run("agent:main:main", "--json")
    assert as_json.returncode == 0 and '"stateVersion": 2' in as_json.stdout
    unknown = run("agent:main:ghost")
    assert unknown.returncode == 2 and "unknown_session" in unknown.stderr


# Where the docs point at each other: a Markdown link (file and #anchor), a path `docs/X.md`, and
# a section named in quotes after it (docs/X.md, "Section") must all be there. Paths of the
# reference implementation's own docs (OpenClaw's) are not ours.
FOREIGN_DOCS = {"docs/concepts/session-state.md"}
DOC_FILES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]


def _github_slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _sections(doc: Path) -> list[str]:
    """A doc's headings and its bold paragraph labels (``**How to run it by hand:**``)."""
    text = doc.read_text(encoding="utf-8")
    headings = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
    return headings + re.findall(r"^\*\*(.+?)\*\*", text, flags=re.M)


def doc_reference_problems(doc: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path) if path else doc
        if not linked.exists():
            problems.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in {_github_slug(h) for h in _sections(linked)}:
            problems.append(f"{target}: no such heading")
    for name in re.findall(r"(?<![\w/.])(docs/[\w/-]+\.md)", text):
        if name not in FOREIGN_DOCS and not (ROOT / name).exists():
            problems.append(f"{name}: no such doc")
    for name, section in re.findall(r"(?<![\w/.])(docs/[\w-]+\.md),? \"([^\"]+)\"", " ".join(text.split())):
        if (ROOT / name).exists():
            wanted = section.replace("`", "").lower()
            if not any(wanted in s.replace("`", "").lower() for s in _sections(ROOT / name)):
                problems.append(f'{name}, "{section}": no such section')
    return problems


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: p.name)
def test_every_reference_between_docs_resolves(doc):
    assert doc_reference_problems(doc) == []


def test_a_reference_to_a_moved_section_is_found(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text('See docs/operations.md, "A standby and a failover", [gone](../docs/mutants/x.md) and\n'
                   "[here](#nowhere); docs/mutants/store-sqlite.md has the verdicts.\n# Here\n", encoding="utf-8")
    assert doc_reference_problems(doc) == [
        "../docs/mutants/x.md: no such file", "#nowhere: no such heading",
        "docs/mutants/store-sqlite.md: no such doc",
        'docs/operations.md, "A standby and a failover": no such section',
    ]
