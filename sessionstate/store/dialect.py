"""What the SQL of both backends does not share, as one small value per backend.

Every statement of the store is written once, with ``?`` parameters, and given to its
backend through ``Dialect.sql``: the one place a driver's parameter style is applied (the
statement texts are built when a store opens, so no call pays for it). The few pieces that
truly differ between SQLite and PostgreSQL are fields here, named for what they mean
(a planner hint, the larger of two values, the log's sequence high-water mark), and put into
the statements where they stand. Nothing rewrites SQL after the fact.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, NamedTuple


class Dialect(NamedTuple):
    name: str
    param: str  # the driver's parameter placeholder
    greatest: str  # the two-argument "larger of" function
    hints: bool  # the planner takes INDEXED BY / NOT INDEXED (SQLite), or ignores hints
    sequence_high_water: str  # the largest event sequence ever allocated (0 before any)
    # The reconciliation page's columns (contract.EventPageRow), from FROM on shared.
    event_page_columns: str

    def sql(self, text: str) -> str:
        """``text`` in this driver's parameter style (``%`` is doubled for ``%s`` drivers)."""
        if self.param == "?":
            return text
        return text.replace("%", "%%").replace("?", self.param)

    def texts(self, **statements: str) -> Any:
        """Named statements in this driver's style, as attributes (a feature table's set)."""
        return SimpleNamespace(**{name: self.sql(text) for name, text in statements.items()})

    def indexed_by(self, index: str) -> str:
        """A hint that pins ``index`` (SQLite refuses a statement it could not serve)."""
        return f" INDEXED BY {index}" if self.hints else ""

    def not_indexed(self) -> str:
        return " NOT INDEXED" if self.hints else ""


# The page with each event's instant as its epoch seconds (a float), which Python rounds
# (timefmt.iso_millis). SQLite has no half-even rounding, and the CASE expressions that would
# replace it cost more per row than the rounding in Python, so this is SQLite's page.
EVENT_PAGE_IN_SECONDS = "sequence, kind, actor_type, occurred_at, summary, actor_id, run_id, payload"

# The server rounds each occurred_at to whole microseconds as timefmt.iso_millis does (trunc
# is exact, the fraction times 10**6 is the same IEEE product, round(float8) is rint:
# half-even), so Python only formats text (timefmt.iso_micros). Beyond +-10**12 s the bigint
# product could overflow: such a row reads NULL there, and the store reads that page again as
# EVENT_PAGE_IN_SECONDS (PostgresStore._page_events).
_POSTGRES_PAGE = (
    "sequence, kind, actor_type, CASE WHEN abs(occurred_at) < 1e12::float8"
    " THEN trunc(occurred_at)::bigint * 1000000"
    " + round((occurred_at - trunc(occurred_at)) * 1000000::float8)::bigint END,"
    " summary, actor_id, run_id, payload"
)

SQLITE = Dialect(
    name="sqlite",
    param="?",
    greatest="max",
    hints=True,
    sequence_high_water="SELECT seq FROM sqlite_sequence WHERE name = 'session_state_events'",
    event_page_columns=EVENT_PAGE_IN_SECONDS,
)
POSTGRES = Dialect(
    name="postgresql",
    param="%s",
    greatest="GREATEST",
    hints=False,
    # The events' serial column's sequence: ``is_called`` is false until the first nextval.
    sequence_high_water=(
        "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM session_state_events_sequence_seq"
    ),
    event_page_columns=_POSTGRES_PAGE,
)
