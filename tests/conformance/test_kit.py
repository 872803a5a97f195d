"""The conformance kit: its quotes are the spec's words, this project's Gateway passes it, and a
planted defect behind the same adapter is found, shrunk and named (the kit's probe)."""

from __future__ import annotations

import os

import re
import sys
from pathlib import Path

import pytest

from sessionstate.clients.cli import main
from sessionstate.conformance.kit import DIFFERENCE, RULES, run

SPEC = Path(__file__).resolve().parents[2] / "spec" / "notice-protocol.md"
ADAPTER = [sys.executable, "-m", "sessionstate.conformance.gateway_adapter"]


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_every_quote_is_the_spec_s_words():
    spec = _flat(SPEC.read_text())
    assert [rule for rule, quote in RULES.items() if _flat(quote) not in spec] == []
    assert DIFFERENCE <= set(RULES)


def test_the_quote_check_can_fail():
    assert _flat("Resetting W keeps its queue.") not in _flat(SPEC.read_text())


def test_the_project_s_gateway_conforms():
    report = run(ADAPTER, examples=12, steps=15)
    assert report.findings == [], report.text()
    assert report.implementation == "sessionstate Gateway"


@pytest.mark.slow  # the search and its shrinking take minutes on a loaded machine
@pytest.mark.skipif(os.environ.get("SESSIONSTATE_SLOW") != "1", reason="slow profile: set SESSIONSTATE_SLOW=1")
def test_a_planted_defect_is_found_shrunk_and_named():
    report = run(ADAPTER + ["--fault", "queue-survives-reset"], examples=60, steps=15, max_findings=1)
    assert [f.rule for f in report.findings] == ["R14"], report.text()
    finding = report.findings[0]
    assert finding.kind == "violation" and finding.quote in report.text()
    assert finding.steps[-1].startswith("reset ") and len(finding.steps) <= 6, finding.steps


def test_the_cli_runs_the_kit(capsys):
    assert main(["conformance", "--examples", "3", "--steps", "5"]) == 0
    assert "0 violation(s)" in capsys.readouterr().out
