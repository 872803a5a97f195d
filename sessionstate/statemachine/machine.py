"""The one ``transitions.Machine`` of the process, and the dispatch table compiled from it.

Theory of operation: the protocol of a (watcher, target) pair is the data in ``table.py``.
That data builds a single ``transitions.Machine`` at import (building one per pair costs about
35 µs and a trigger on a bound model about 7 µs). The hot path does not trigger the machine: it
reads ``DISPATCH``, a plain dict compiled from the machine's own events, which costs about
0.1 µs a lookup. Tests drive bound ``PairModel`` objects through the machine and prove the two
paths agree. Nothing here touches SQL, a clock or I/O.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

from transitions import Machine, MachineError

from ..errors import ProtocolError
from .effects import EFFECT_FUNCTIONS, Effect, PositionsLike
from .positions import Positions, derive_state
from .table import (
    EFFECT_KEEP,
    EFFECT_RAISE_MATERIAL,
    STATES,
    TRANSITIONS,
    TRIGGERS,
    UNWATCHED,
    WATCHED_STATES,
)

_CALLBACK_PREFIX = "apply_"  # effects run as `after` callbacks named apply_<effect>


def build_machine() -> Machine:
    """Build the protocol machine from ``TRANSITIONS`` (no model attached)."""
    return Machine(
        model=None,
        states=list(STATES),
        transitions=[
            {
                "trigger": t.trigger,
                "source": t.source,
                "dest": t.dest,
                "after": _CALLBACK_PREFIX + t.effect,
            }
            for t in TRANSITIONS
        ],
        initial=UNWATCHED,
        auto_transitions=False,
        ignore_invalid_triggers=False,
    )


MACHINE: Machine = build_machine()


def compile_dispatch(machine: Machine) -> dict[tuple[str, str], tuple[str, str]]:
    """Read ``(state, trigger) -> (next state, effect name)`` back out of the machine."""
    table: dict[tuple[str, str], tuple[str, str]] = {}
    for trigger, event in machine.events.items():
        for source, candidates in event.transitions.items():
            if len(candidates) != 1:
                raise ProtocolError(f"{trigger!r} from {source!r} is not deterministic")
            (transition,) = candidates
            (callback,) = transition.after
            # build_machine gives every transition a dest and one callback named by a string.
            assert transition.dest is not None and isinstance(callback, str)
            table[(source, trigger)] = (transition.dest, callback.removeprefix(_CALLBACK_PREFIX))
    return table


TRANSITION_TABLE: dict[tuple[str, str], tuple[str, str]] = compile_dispatch(MACHINE)
# The hot path's view: effect names resolved to their functions once.
DISPATCH: dict[tuple[str, str], tuple[str, Effect]] = {
    key: (dest, EFFECT_FUNCTIONS[effect]) for key, (dest, effect) in TRANSITION_TABLE.items()
}


# Effects that never need a cursor write: `keep` changes nothing, and `raise_material` is
# derived from the log by the store (spec R7).
DERIVED_EFFECTS = frozenset({EFFECT_KEEP, EFFECT_RAISE_MATERIAL})


def states_written_by(trigger: str) -> frozenset[str]:
    """Watched states in which ``trigger`` has an effect the store must write."""
    return frozenset(
        state
        for state in WATCHED_STATES
        if (state, trigger) in TRANSITION_TABLE and TRANSITION_TABLE[(state, trigger)][1] not in DERIVED_EFFECTS
    )


class Step(NamedTuple):
    """What one trigger did to one pair."""

    state: str
    next_state: str
    positions: Positions | None
    notice_since: int | None


def fire(pair: Any, positions: PositionsLike | None, trigger: str, sequence: int | None = None) -> Step:
    """Apply ``trigger`` to a pair whose cursor has ``positions`` (a ``Positions`` or the store's
    plain tuple); pure.

    Raises ``ProtocolError`` naming pair, state and trigger when the trigger is illegal.
    """
    state = derive_state(positions)
    entry = DISPATCH.get((state, trigger))
    if entry is None:
        raise ProtocolError(f"pair {pair}: trigger {trigger!r} is illegal in state {state!r}")
    dest, effect = entry
    new_positions, notice_since = effect(positions, sequence)
    return Step(state, dest, new_positions, notice_since)


def fire_many(
    rows: Iterable[tuple[Any, ...]], target: str, trigger: str, sequence: int | None
) -> list[tuple[str, Positions | None, int | None]]:
    """``fire`` for many watchers of one target at once: the event hot path.

    ``rows`` are ``(watcher, positions, ...)`` (anything after the positions, such as the
    store's provenance, is passed over); returns ``(watcher, new positions, notice since)``.
    The same checks as ``fire`` (state derived per pair, illegal triggers refused before
    anything is returned), with one dispatch lookup per state instead of one per pair.
    """
    by_state: dict[str, Effect] = {}
    out = []
    for row in rows:
        watcher, positions = row[0], row[1]
        state = derive_state(positions)
        effect = by_state.get(state)
        if effect is None:
            entry = DISPATCH.get((state, trigger))
            if entry is None:
                raise ProtocolError(f"pair {(watcher, target)}: trigger {trigger!r} is illegal in state {state!r}")
            effect = by_state[state] = entry[1]
        new_positions, notice_since = effect(positions, sequence)
        out.append((watcher, new_positions, notice_since))
    return out


class PairModel:
    """A pair bound to ``MACHINE``: the slow, explicit path used by tests and tools.

    The machine sets ``state``; the effect callbacks update the positions, so after every
    trigger ``derive_state(model.positions) == model.state`` must hold.
    """

    state: str

    def __init__(self, pair: Any, positions: Positions | None) -> None:
        self.pair = pair
        self.positions = positions
        self.notices: list[int] = []
        MACHINE.add_model(self, initial=derive_state(positions))

    def detach(self) -> None:
        MACHINE.remove_model(self)

    def fire(self, trigger: str, sequence: int | None = None) -> None:
        if trigger not in TRIGGERS:
            raise ProtocolError(f"pair {self.pair}: unknown trigger {trigger!r}")
        try:
            self.trigger(trigger, sequence)
        except MachineError as exc:
            raise ProtocolError(
                f"pair {self.pair}: trigger {trigger!r} is illegal in state {self.state!r}"
            ) from exc

    def _apply(self, effect: str, sequence: int | None) -> None:
        new_positions, notice_since = EFFECT_FUNCTIONS[effect](self.positions, sequence)
        self.positions = new_positions
        if notice_since is not None:
            self.notices.append(notice_since)

    def __getattr__(self, name: str) -> Any:
        # `after` callbacks arrive by name: apply_<effect>.
        if name.startswith(_CALLBACK_PREFIX):
            effect = name.removeprefix(_CALLBACK_PREFIX)
            if effect in EFFECT_FUNCTIONS:
                return lambda sequence=None: self._apply(effect, sequence)
        raise AttributeError(name)
