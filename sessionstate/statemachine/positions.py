"""Cursor positions and the state derived from them (never stored)."""

from __future__ import annotations

from typing import NamedTuple

from ..errors import ProtocolError
from .table import CAUGHT_UP, NOTICE_PENDING, PENDING_WITH_MORE, UNWATCHED


class Positions(NamedTuple):
    """The three durable positions of a (watcher, target) cursor."""

    last_seen: int
    notified: int
    material: int


def derive_state(positions: tuple[int, int, int] | None) -> str:
    """Map a cursor's positions (``None``: no cursor row) to its protocol state.

    ``positions`` may be a ``Positions`` or the store's plain ``(last_seen, notified, material)`` tuple.
    """
    if positions is None:
        return UNWATCHED
    last_seen, notified, material = positions
    # INV1: L <= N <= M, and L = N only with N = M (a notice is pending whenever M > L).
    if not last_seen <= notified <= material or (last_seen == notified != material):
        raise ProtocolError(f"positions {tuple(positions)} are not a state of the notice protocol")
    if last_seen == notified:
        return CAUGHT_UP
    return NOTICE_PENDING if notified == material else PENDING_WITH_MORE
