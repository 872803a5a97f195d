"""The spec's tables and the code's tables are the same tables."""

from __future__ import annotations

import re

import pytest

from sessionstate import notice_text
from sessionstate.statemachine import EVENT_KINDS, STATES, TRANSITION_TABLE, TRANSITIONS, TRIGGERS
from sessionstate.statemachine.table import EFFECTS
from sessionstate.statemachine.effectdata import EFFECT_DATA
from tests.protocol.spec_tables import effect_rows, kind_rows, notice_template, table_rows, transition_rows

ILLEGAL = "—"


def test_states_and_triggers_match_the_spec():
    assert tuple(r[0] for r in table_rows("2. States")) == STATES
    assert tuple(r[0] for r in table_rows("3. Triggers")) == TRIGGERS
    assert tuple(r[0] for r in table_rows("5. Effects")) == EFFECTS


def test_spec_lists_every_state_trigger_pair_exactly_once():
    pairs = [(state, trigger) for state, trigger, _, _ in transition_rows()]
    assert sorted(pairs) == sorted((s, t) for s in STATES for t in TRIGGERS)


def test_legal_transitions_match_the_spec():
    spec_legal = {(s, t, d, e) for s, t, d, e in transition_rows() if d != ILLEGAL}
    assert spec_legal == set(TRANSITIONS)


def test_illegal_transitions_match_the_spec():
    spec_illegal = {(s, t) for s, t, d, e in transition_rows() if d == ILLEGAL}
    assert all(e == "illegal" for s, t, d, e in transition_rows() if d == ILLEGAL)
    declared = {(s, t) for s, t, _, _ in TRANSITIONS}
    assert spec_illegal == {(s, t) for s in STATES for t in TRIGGERS} - declared


def test_machine_compiles_back_to_the_spec_table():
    spec_legal = {(s, t): (d, e) for s, t, d, e in transition_rows() if d != ILLEGAL}
    assert TRANSITION_TABLE == spec_legal


def test_event_kinds_match_the_spec():
    assert kind_rows() == [(p.kind, p.notifies, p.seeds_parent) for p in EVENT_KINDS]


def test_notice_text_matches_the_spec():
    rendered = notice_template().replace("<target>", "agent:main:subagent:child").replace("<N>", "12")
    assert notice_text("agent:main:subagent:child", 12) == rendered


def _expr_text(expr) -> str:
    if isinstance(expr, str):
        return expr
    op, *args = expr
    assert op == "max", expr
    return f"max({_expr_text(args[0])}, {_expr_text(args[1])})"


def _spec_notice(cell: str):
    """The spec's notice column as the data's ``opened``: none, since X, or when A > B: since X."""
    if cell.startswith("none") or "withdrawn" in cell:
        return None
    since = re.search(r"since (?:the old )?([LNMs])\b", cell)
    assert since, cell
    when = re.match(r"when ([LNMs]) > ([LNMs]):", cell)
    return ("if_gt", when.group(1), when.group(2), since.group(1), None) if when else since.group(1)


def test_effects_match_the_spec():
    """Section 5's table is the effects' one source (statemachine/effectdata.py) row for row."""
    rows = effect_rows()
    assert [r[0] for r in rows] == list(EFFECT_DATA)
    for name, positions, notice in rows:
        spec = EFFECT_DATA[name]
        if spec.cursor == "keep":
            assert positions == "unchanged", name
        elif spec.cursor == "remove":
            assert positions == "no cursor row", name
        else:
            written = re.match(r"\(([^()]*(?:\([^()]*\)[^()]*)*)\)", positions)
            assert written, positions
            wanted = ", ".join(_expr_text(e) for e in (spec.L, spec.N, spec.M))
            assert written.group(1).replace("v", "s") == wanted, name
        assert _spec_notice(notice) == spec.opened, name


@pytest.mark.parametrize("name, change", [("ack", {"opened": None}), ("sweep", {"N": "L"}), ("freeze", {"opened": "N"})])
def test_the_effects_sync_sees_a_changed_effect(name, change, monkeypatch):
    """Probe: an effect changed in the data no longer matches section 5."""
    import tests.protocol.test_spec_sync as this

    monkeypatch.setattr(this, "EFFECT_DATA", dict(EFFECT_DATA, **{name: EFFECT_DATA[name]._replace(**change)}))
    with pytest.raises(AssertionError):
        test_effects_match_the_spec()
