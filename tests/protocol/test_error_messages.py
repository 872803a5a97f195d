"""Illegal input raises with a message that names what was wrong (mutmut found these
messages untested: a `ProtocolError(None)` survived, see docs/verification.md)."""

from __future__ import annotations

import pytest

from sessionstate import ProtocolError
from sessionstate.statemachine import PairModel, Positions, derive_state, fire


def test_impossible_positions_are_named():
    with pytest.raises(ProtocolError, match=r"positions \(2, 1, 1\) are not a state of the notice protocol"):
        derive_state((2, 1, 1))


def test_unknown_trigger_is_named():
    model = PairModel(("w", "t"), Positions(1, 1, 1))
    try:
        with pytest.raises(ProtocolError, match=r"pair \('w', 't'\): unknown trigger 'no_such_trigger'"):
            model.fire("no_such_trigger")
    finally:
        model.detach()  # the one machine keeps no model a test bound (test_one_machine_per_process)


def test_illegal_trigger_names_pair_trigger_and_state():
    with pytest.raises(ProtocolError, match=r"pair \('w', 't'\): trigger 'drain' is illegal in state 'unwatched'"):
        fire(("w", "t"), None, "drain")
