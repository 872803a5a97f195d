"""Event rows kept by sequence, so that a ``changesSince`` page on SQLite reads little more
than its sequences.

``sqlite3`` pays for every value it reads (docs/performance.md, "Beside the published
reference"): a page of 20 events, eight values a row, costs about 22 µs, and the same page's
sequences alone, read from the session's index without the table, about 8. Two facts make a
row read once good for every later read of it:

- a committed event row never changes (nothing updates ``session_state_events``);
- its sequence is never given to another event (the table's ``AUTOINCREMENT``), even after the
  event is pruned or its session deleted.

So which events a page holds is always read from the database, and their rows come from here
when every one of them was read before; otherwise the page is read whole, as without the
cache, and its rows are kept. The sequences are read only when the session's newest event is
kept: a page after new events, or one that never reaches the newest, is read whole at once, so
a first read costs what it did without the cache. Inside a transaction the store reads without it: the
transaction's own events are visible to it, may still roll back, and their sequences then go
to other events.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import Any

# About 2-3 MB of rows with short summaries: the newest pages of the sessions being
# reconciled; the oldest rows kept go first.
CAPACITY_ROWS = 4096


class EventRowCache:
    """Page rows (``contract.EventPageRow``) by sequence, the first kept dropped first. Used
    under the store's lock."""

    def __init__(self, capacity: int = CAPACITY_ROWS) -> None:
        self.capacity = capacity
        self._rows: dict[int, tuple[Any, ...]] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def clear(self) -> None:
        """Drop every kept row: the next page of each session is a first read."""
        self._rows.clear()

    def holds(self, sequence: int) -> bool:
        return sequence in self._rows

    def rows(self, sequences: Sequence[tuple[int]]) -> list[tuple[Any, ...]] | None:
        """The rows of ``sequences`` (one-value rows, as read), or ``None`` if any is missing."""
        get = self._rows.get
        rows = [get(sequence) for (sequence,) in sequences]
        return None if None in rows else rows  # type: ignore[return-value]

    def keep(self, rows: Sequence[tuple[Any, ...]]) -> None:
        kept = self._rows
        for row in rows:
            kept[row[0]] = row
        excess = len(kept) - self.capacity
        if excess > 0:
            for sequence in list(islice(kept, excess)):
                del kept[sequence]
