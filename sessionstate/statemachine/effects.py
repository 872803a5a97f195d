"""The effects of the transition table as pure functions.

Each takes the old positions and the trigger's sequence (the event's sequence, or the target's
state version for ``seed``) and returns an ``Outcome``: the new positions (``None`` when the
cursor goes away) and the ``changesSince`` of a notice to queue, if any. The old positions may
be a ``Positions`` or the store's plain ``(last_seen, notified, material)`` tuple.
"""

from __future__ import annotations

from typing import Callable

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


# (new positions, changesSince of a notice to queue): a plain tuple, as effects run once per
# watcher on the event hot path.
Outcome = tuple[Positions | None, int | None]
PositionsLike = tuple[int, int, int]  # Positions, or the store's plain tuple


def seed(old: PositionsLike | None, sequence: int | None) -> Outcome:
    assert sequence is not None, "seed needs the target's state version"
    return Positions(sequence, sequence, sequence), None


def keep(old: PositionsLike | None, sequence: int | None) -> Outcome:
    return (None if old is None else Positions(*old)), None


def freeze(old: PositionsLike | None, sequence: int | None) -> Outcome:
    assert old is not None, "an event needs a cursor"
    assert sequence is not None, "an event needs its sequence"
    last_seen = old[0]
    return Positions(last_seen, sequence, sequence), last_seen


def raise_material(old: PositionsLike | None, sequence: int | None) -> Outcome:
    assert old is not None, "an event needs a cursor"
    assert sequence is not None, "an event needs its sequence"
    last_seen, notified, material = old
    return Positions(last_seen, notified, max(material, sequence)), None


def ack(old: PositionsLike | None, sequence: int | None) -> Outcome:
    assert old is not None
    last_seen, notified, material = old
    # Interleaved work reopens exactly one notice, from the old frozen watermark.
    return Positions(notified, max(material, notified), material), (notified if material > notified else None)


def sweep(old: PositionsLike | None, sequence: int | None) -> Outcome:
    assert old is not None
    last_seen, notified, material = old
    return Positions(last_seen, material, material), last_seen


def remove(old: PositionsLike | None, sequence: int | None) -> Outcome:
    return None, None


Effect = Callable[[PositionsLike | None, int | None], Outcome]

EFFECT_FUNCTIONS: dict[str, Effect] = {
    EFFECT_SEED: seed,
    EFFECT_KEEP: keep,
    EFFECT_FREEZE: freeze,
    EFFECT_RAISE_MATERIAL: raise_material,
    EFFECT_ACK: ack,
    EFFECT_SWEEP: sweep,
    EFFECT_REMOVE: remove,
}
