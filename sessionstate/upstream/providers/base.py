"""The provider interface: how the monitor asks one kind of upstream for news.

A provider answers one question per check: "what direct human activity
happened in this upstream thread since ``marker``, and where should the next
check start?". Three outcomes are kept apart on purpose, because the monitor
treats them differently:

* ``found``   - the source exists; ``activities`` may be empty.
* ``missing`` - a *definite* not-found. Three in a row drop the upstream link
  and emit ``upstream_missing``, so a provider reports it only when it is sure.
* ``error``   - the provider could not tell (I/O failure, node offline, ...).
  An error never counts as a miss.

Markers are opaque strings owned by the provider (a byte offset, an item id,
...). The monitor stores them verbatim and passes them back. On ``missing`` and
``error`` the provider returns the marker it was given, so nothing is lost.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar


class CheckStatus(StrEnum):
    """Outcome of one provider check (see the module docstring)."""

    FOUND = "found"
    MISSING = "missing"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class UpstreamActivity:
    """One direct human turn (or one overflowed burst of them) seen upstream.

    ``activity_id`` is stable across checks so that the signal log can dedupe
    on it. ``text`` is what the self-echo check compares; when
    ``text_truncated`` is true it is only a prefix of the real prompt (a line
    too large to hold in memory). For a burst that overflowed the provider's
    window (``burst_overflow``), ``turns`` counts the human items seen and
    ``burst_texts`` holds each one's text so echoes can still be dropped.
    """

    activity_id: str
    occurred_at: float | None
    text: str
    turns: int = 1
    burst_overflow: bool = False
    text_truncated: bool = False
    burst_texts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What one check found, and the marker to pass to the next check."""

    status: CheckStatus
    activities: list[UpstreamActivity] = field(default_factory=list)
    marker: str | None = None
    # A short human-readable reason, for logs and failure counters.
    detail: str | None = None

    @classmethod
    def found(
        cls,
        activities: list[UpstreamActivity],
        marker: str | None,
        detail: str | None = None,
    ) -> CheckResult:
        return cls(CheckStatus.FOUND, list(activities), marker, detail)

    @classmethod
    def missing(cls, marker: str | None, detail: str | None = None) -> CheckResult:
        return cls(CheckStatus.MISSING, [], marker, detail)

    @classmethod
    def error(cls, marker: str | None, detail: str) -> CheckResult:
        return cls(CheckStatus.ERROR, [], marker, detail)


class UpstreamProvider(abc.ABC):
    """One kind of upstream source. Implementations live one per file."""

    #: Registry key, also used in summaries and dedupe keys.
    name: ClassVar[str]

    @abc.abstractmethod
    def check(self, thread_id: str, marker: str | None) -> CheckResult:
        """Report human activity in ``thread_id`` after ``marker``.

        ``marker`` is ``None`` for "from the beginning of the thread".
        Ordinary failures (I/O, network, a bad marker) must be returned as
        ``CheckStatus.ERROR``, never raised: the monitor runs many links and
        one broken source must not look like a crashed check.
        """
