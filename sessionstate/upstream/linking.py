"""Shared by adoption and the monitor: the link store and priming.

Priming moves a fresh link's marker to the thread's current end without recording anything:
what happened upstream before adoption is history, not activity. A provider reads a bounded
window per check (1 MiB for Claude JSONL), so priming repeats checks until the marker stops
moving, at most ``PRIME_MAX_ROUNDS`` times; a longer backlog keeps the link unprimed and the
monitor finishes priming on later ticks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..store import UpstreamLinkTable
from .providers.base import CheckStatus, UpstreamProvider

if TYPE_CHECKING:
    from ..facade.gateway import Gateway

PRIME_MAX_ROUNDS = 64


def link_store(gw: "Gateway") -> UpstreamLinkTable:
    return gw.store.links


@dataclass(frozen=True, slots=True)
class Priming:
    status: CheckStatus
    marker: str | None
    done: bool  # the marker reached the thread's end
    detail: str | None = None


def prime(provider: UpstreamProvider, thread_id: str, marker: str | None, max_rounds: int = PRIME_MAX_ROUNDS) -> Priming:
    """Check until the marker stops moving; activities seen on the way are discarded."""
    for _ in range(max_rounds):
        result = provider.check(thread_id, marker)
        if result.status is not CheckStatus.FOUND:
            return Priming(result.status, marker, False, result.detail)
        if result.marker == marker:
            return Priming(CheckStatus.FOUND, marker, True)
        marker = result.marker
    return Priming(CheckStatus.FOUND, marker, False, "backlog longer than one priming pass")
