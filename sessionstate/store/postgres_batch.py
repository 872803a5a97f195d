"""How a group commit's rows go to ``APPEND_MANY_SQL`` and how its answer maps back onto them
(the PostgreSQL store's batch append, ``PostgresStore.append_and_read``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Sequence

from .records import EventRow


class BatchPlan:
    """The rows ``APPEND_MANY_SQL`` is sent (a dedupe key repeated in the batch goes once, as
    its first row) and how its answer maps back onto the batch's rows."""

    __slots__ = ("rows", "sent", "sent_from", "sent_index", "columns")

    def __init__(self, rows: Sequence[EventRow]) -> None:
        self.rows = rows
        first_of: dict[str, int] = {}  # a dedupe key's first row in the batch
        self.sent: list[EventRow] = []
        self.sent_from: list[int] = []  # the position in ``rows`` of each row sent
        self.sent_index: list[int] = []  # each row's index into ``sent`` (a repeated key: its first's)
        for position, row in enumerate(rows):
            dedupe_key = row[10]
            if dedupe_key is not None and dedupe_key in first_of:
                self.sent_index.append(first_of[dedupe_key])
                continue
            if dedupe_key is not None:
                first_of[dedupe_key] = len(self.sent)
            self.sent_index.append(len(self.sent))
            self.sent_from.append(position)
            self.sent.append(row)
        self.columns = [list(column) for column in zip(*self.sent)]

    def outcome(
        self,
        answer: Sequence[tuple[Any, ...]],
        winner: Callable[[EventRow], int],
        appended: Callable[[EventRow, int], tuple[int, bool]],
    ) -> list[tuple[int, bool]]:
        """``(sequence, inserted)`` per row from the statement's answer (``winner``: the
        sequence of a dedupe key another session committed meanwhile)."""
        outcome: dict[int, tuple[int, bool]] = {}
        for ord_, sequence, inserted, new, _txid in answer:
            if new and not inserted:  # its dedupe key was committed meanwhile on another session
                sequence = winner(self.sent[ord_ - 1])
            outcome[int(ord_) - 1] = (int(sequence), bool(inserted))
        results: list[tuple[int, bool]] = []
        for position, index in enumerate(self.sent_index):
            sequence, inserted = outcome[index]
            row = self.rows[position]
            if inserted and self.sent_from[index] == position:
                results.append(appended(row, sequence))
            else:  # found by its dedupe key (in the log, or earlier in this batch)
                results.append((sequence, False))
        return results
