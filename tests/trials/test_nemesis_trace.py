"""The nemesis's trace checker (trials/nemesis_trace.py) is the spec's, with allowances only
where spec 15.2's merge cannot know the order: it replays the traced scenario clean and rejects
every one-line corruption the spec's checker rejects, with the same rule
(tests/verify/test_trace_replay.py's CORRUPTIONS)."""

from __future__ import annotations

import copy

import pytest

from sessionstate.verify.trace_check import Violation
from sessionstate.verify.trace_read import read_trace
from tests.verify.test_trace_replay import CORRUPTIONS
from tests.verify.helpers import read_lines, traced_scenario, write_lines
from trials.nemesis_trace import NemesisTraceChecker


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    return read_lines(traced_scenario(tmp_path_factory.mktemp("scenario")))


def test_the_scenario_replays_clean(scenario, tmp_path):
    summary = NemesisTraceChecker(0.0).run([read_trace(write_lines(tmp_path / "t.jsonl", scenario))])
    assert summary.steps > 0


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_a_corruption_the_spec_rejects_is_rejected_with_its_rule(scenario, tmp_path, name):
    mutate, rule = CORRUPTIONS[name]
    lines = copy.deepcopy(scenario)
    mutate(lines)
    with pytest.raises(Violation) as caught:
        NemesisTraceChecker(0.0).run([read_trace(write_lines(tmp_path / "t.jsonl", lines))])
    assert caught.value.rule == rule, caught.value
