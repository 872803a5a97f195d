"""The effects of the transition table as pure functions.

Each takes the old positions and the trigger's sequence (the event's sequence, or the target's
state version for ``seed``) and returns an ``Outcome``: the new positions (``None`` when the
cursor goes away) and the ``changesSince`` of a notice to queue, if any.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from .positions import Positions
from .table import (
    EFFECT_ACK,
    EFFECT_FREEZE,
    EFFECT_KEEP,
    EFFECT_RAISE_MATERIAL,
    EFFECT_REMOVE,
    EFFECT_SEED,
    EFFECT_SWEEP,
)


class Outcome(NamedTuple):
    positions: Positions | None
    notice_since: int | None


def seed(old: Positions | None, sequence: int | None) -> Outcome:
    assert sequence is not None, "seed needs the target's state version"
    return Outcome(Positions(sequence, sequence, sequence), None)


def keep(old: Positions | None, sequence: int | None) -> Outcome:
    return Outcome(old, None)


def freeze(old: Positions | None, sequence: int | None) -> Outcome:
    assert old is not None, "an event needs a cursor"
    assert sequence is not None, "an event needs its sequence"
    return Outcome(Positions(old.last_seen, sequence, sequence), old.last_seen)


def raise_material(old: Positions | None, sequence: int | None) -> Outcome:
    assert old is not None, "an event needs a cursor"
    assert sequence is not None, "an event needs its sequence"
    return Outcome(old._replace(material=max(old.material, sequence)), None)


def ack(old: Positions | None, sequence: int | None) -> Outcome:
    assert old is not None
    new = Positions(old.notified, max(old.material, old.notified), old.material)
    # Interleaved work reopens exactly one notice, from the old frozen watermark.
    return Outcome(new, old.notified if old.material > old.notified else None)


def sweep(old: Positions | None, sequence: int | None) -> Outcome:
    assert old is not None
    return Outcome(old._replace(notified=old.material), old.last_seen)


def remove(old: Positions | None, sequence: int | None) -> Outcome:
    return Outcome(None, None)


Effect = Callable[[Positions | None, int | None], Outcome]

EFFECT_FUNCTIONS: dict[str, Effect] = {
    EFFECT_SEED: seed,
    EFFECT_KEEP: keep,
    EFFECT_FREEZE: freeze,
    EFFECT_RAISE_MATERIAL: raise_material,
    EFFECT_ACK: ack,
    EFFECT_SWEEP: sweep,
    EFFECT_REMOVE: remove,
}
