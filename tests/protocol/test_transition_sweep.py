"""Every (state, trigger) pair, through both paths (compiled table and bound machine model),
against the spec table and the effect formulas of spec section 5."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionstate import ProtocolError
from sessionstate.statemachine import STATES, TRIGGERS, PairModel, Positions, derive_state, fire
from tests.protocol.spec_tables import transition_rows

SPEC = {(s, t): (d, e) for s, t, d, e in transition_rows()}
SEQUENCE = 1_000  # the trigger's sequence: above every position drawn below


def positions_in(state: str) -> st.SearchStrategy[Positions | None]:
    n = st.integers(min_value=0, max_value=500)
    if state == "unwatched":
        return st.none()
    if state == "caught_up":
        return n.map(lambda a: Positions(a, a, a))
    if state == "notice_pending":
        return st.tuples(n, st.integers(1, 400)).map(lambda p: Positions(p[0], p[0] + p[1], p[0] + p[1]))
    return st.tuples(n, st.integers(1, 200), st.integers(1, 200)).map(
        lambda p: Positions(p[0], p[0] + p[1], p[0] + p[1] + p[2])
    )


def expected_effect(effect: str, old: Positions | None) -> tuple[Positions | None, int | None]:
    """Spec section 5, written out independently of sessionstate.statemachine.effects."""
    if effect == "seed":
        return Positions(SEQUENCE, SEQUENCE, SEQUENCE), None
    if effect == "keep":
        return old, None
    if effect == "remove":
        return None, None
    assert old is not None
    L, N, M = old
    if effect == "freeze":
        return Positions(L, SEQUENCE, SEQUENCE), L
    if effect == "raise_material":
        return Positions(L, N, max(M, SEQUENCE)), None
    if effect == "ack":
        return Positions(N, max(M, N), M), (N if M > N else None)
    if effect == "sweep":
        return Positions(L, M, M), L
    raise AssertionError(f"spec effect {effect!r} has no expectation here")


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("trigger", TRIGGERS)
def test_every_state_trigger_pair(state, trigger):
    dest, effect = SPEC[(state, trigger)]

    @given(positions_in(state))
    def check(positions):
        assert derive_state(positions) == state
        model = PairModel(("w", "t"), positions)
        try:
            if dest == "—":
                with pytest.raises(ProtocolError) as compiled_error:
                    fire(("w", "t"), positions, trigger, SEQUENCE)
                message = str(compiled_error.value)
                assert state in message and trigger in message and "'w'" in message
                with pytest.raises(ProtocolError):
                    model.fire(trigger, SEQUENCE)
                # Illegal input changes nothing.
                assert model.state == state and model.positions == positions and not model.notices
                return
            step = fire(("w", "t"), positions, trigger, SEQUENCE)
            want_positions, want_notice = expected_effect(effect, positions)
            assert (step.state, step.next_state) == (state, dest)
            assert (step.positions, step.notice_since) == (want_positions, want_notice)
            assert derive_state(step.positions) == dest
            model.fire(trigger, SEQUENCE)
            assert model.state == dest
            assert model.positions == want_positions
            assert model.notices == ([] if want_notice is None else [want_notice])
        finally:
            model.detach()

    check()


@pytest.mark.parametrize(
    "positions", [Positions(5, 4, 4), Positions(5, 5, 7), Positions(5, 7, 6), Positions(3, 3, 2)]
)
def test_positions_outside_the_protocol_are_refused(positions):
    with pytest.raises(ProtocolError):
        derive_state(positions)
    with pytest.raises(ProtocolError):
        fire(("w", "t"), positions, "material_event", SEQUENCE)


def test_unknown_trigger_is_refused():
    with pytest.raises(ProtocolError, match="'nonsense'"):
        fire(("w", "t"), Positions(1, 1, 1), "nonsense", 2)


def test_one_machine_per_process(monkeypatch, tmp_path):
    """Pairs bind to the module's one machine; nothing builds another, neither the bound-model
    path nor a gateway handling events."""
    import transitions

    from sessionstate import Gateway
    from sessionstate.statemachine import MACHINE

    built = []
    original = transitions.Machine.__init__

    def counting_init(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(transitions.Machine, "__init__", counting_init)
    models = [PairModel(("w", f"t{i}"), Positions(1, 1, 1)) for i in range(50)]
    for model in models:
        model.fire("material_event", 2)
        model.detach()
    with Gateway.open(str(tmp_path / "one.db")) as gw:
        gw.create_session("agent:a:main")
        gw.create_session("agent:a:subagent:c", kind="subagent", parent="agent:a:main")
        gw.record_event("agent:a:subagent:c", "human_direct_message", actor_type="human", summary="hi")
        gw.drain_system_events("agent:a:main")
    assert built == []
    assert not MACHINE.models  # every bound model was detached again


def test_event_triggers_write_only_caught_up_cursors():
    """What the gateway's hot path relies on (it reads only caught-up cursors)."""
    from sessionstate.statemachine.machine import states_written_by

    assert states_written_by("material_event") == {"caught_up"}
    assert states_written_by("self_event") == frozenset()
    assert states_written_by("log_only_event") == frozenset()
    assert states_written_by("drain") == {"notice_pending", "pending_with_more"}


@pytest.mark.parametrize("trigger", TRIGGERS)
def test_fire_many_agrees_with_fire(trigger):
    """The hot path's batch form gives, pair by pair, what fire gives (or refuses the batch)."""
    from sessionstate.statemachine import fire_many

    rows = [("w1", (3, 3, 3)), ("w2", (1, 4, 4)), ("w3", (2, 5, 9)), ("w4", (7, 7, 7))]
    expected = []
    illegal = False
    for watcher, positions in rows:
        try:
            step = fire((watcher, "t"), Positions(*positions), trigger, SEQUENCE)
        except ProtocolError:
            illegal = True
            break
        expected.append((watcher, step.positions, step.notice_since))
    if illegal:
        with pytest.raises(ProtocolError, match=trigger):
            fire_many(rows, "t", trigger, SEQUENCE)
    else:
        assert fire_many(rows, "t", trigger, SEQUENCE) == expected


@pytest.mark.parametrize("positions", [(1, 1, 2), (2, 1, 1), (1, 2, 1), (3, 2, 2)])
def test_positions_outside_the_protocol_raise(positions):
    with pytest.raises(ProtocolError):
        derive_state(Positions(*positions))
