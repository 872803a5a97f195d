"""Cursor provenance (spec R25): how a pair came to be watched, and what a registration makes of it.

``spawn`` (the spawn edge), ``explicit`` (``watch``, ``sessions_send watch:true``) or
``ambient`` (the gateway registered it itself; queue-only, R26). The values are stored in the
cursor row (``store.schema``); this module holds the one rule that changes them.
"""

from __future__ import annotations

from ..errors import InvalidArgument
from ..statemachine import Positions
from ..store.schema import PROVENANCE_AMBIENT, PROVENANCE_EXPLICIT, PROVENANCE_SPAWN, PROVENANCES

__all__ = ["CursorPositions", "Notice", "PROVENANCES", "PROVENANCE_AMBIENT", "PROVENANCE_EXPLICIT", "PROVENANCE_SPAWN", "is_queue_only",
           "registered_provenance"]


# A notice to queue: (watcher, target, changesSince, the pair's provenance), the provenance
# ``None`` when the read that opened the notice did not carry it (the wake decision reads it).
Notice = tuple[str, tuple[str, str], int, "str | None"]


def registered_provenance(current: str | None, requested: str) -> str:
    """The pair's provenance after a registration asking for ``requested``.

    A new pair (``current`` is ``None``) takes it; an ambient pair is promoted by any other
    registration; ambient never demotes, and ``spawn``/``explicit`` stay what they are.
    """
    if requested not in PROVENANCES:
        raise InvalidArgument(f"unknown provenance {requested!r}; expected one of {list(PROVENANCES)}")
    if current is None or current == PROVENANCE_AMBIENT:
        return requested
    return current


def is_queue_only(provenance: str | None) -> bool:
    """R26: a pair of this provenance never wakes its watcher (its notices are only queued)."""
    return provenance == PROVENANCE_AMBIENT


class CursorPositions(Positions):
    """A pair's effective positions with its ``provenance`` (what ``cursor_positions`` returns).

    It compares, unpacks and hashes as the plain ``Positions`` (L, N, M), so callers that only
    look at the positions see no difference; ``provenance`` is an attribute beside them.
    """

    provenance: str

    def __new__(cls, last_seen: int, notified: int, material: int, provenance: str = PROVENANCE_EXPLICIT) -> "CursorPositions":
        self = super().__new__(cls, last_seen, notified, material)
        self.provenance = provenance
        return self

    def __repr__(self) -> str:
        return (f"CursorPositions(last_seen={self.last_seen}, notified={self.notified},"
                f" material={self.material}, provenance={self.provenance!r})")
