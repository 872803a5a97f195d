"""The notice protocol: declared once as data, built into one ``transitions.Machine``.

Pure: no SQL, no clock, no I/O; nothing here imports ``sessionstate.store``.
"""

from .effects import EFFECT_FUNCTIONS, Outcome
from .machine import DISPATCH, MACHINE, TRANSITION_TABLE, PairModel, Step, build_machine, fire, fire_many
from .positions import Positions, derive_state
from .table import (
    ACTOR_TYPES,
    EVENT_KINDS,
    KNOWN_KINDS,
    NOTIFYING_KINDS,
    RUN_FAILED_OUTCOMES,
    STATES,
    TRANSITIONS,
    TRIGGERS,
)

__all__ = [
    "ACTOR_TYPES",
    "DISPATCH",
    "EFFECT_FUNCTIONS",
    "EVENT_KINDS",
    "KNOWN_KINDS",
    "MACHINE",
    "NOTIFYING_KINDS",
    "Outcome",
    "PairModel",
    "Positions",
    "RUN_FAILED_OUTCOMES",
    "STATES",
    "Step",
    "TRANSITIONS",
    "TRANSITION_TABLE",
    "TRIGGERS",
    "build_machine",
    "derive_state",
    "fire",
    "fire_many",
]
