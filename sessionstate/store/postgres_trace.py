"""The statements a PostgreSQL connection sends, read from libpq's protocol trace
(``PostgresStore.trace_statements``): how tests count a path's round trips without reaching
into the connection."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

__all__ = ["sent_statements", "traced"]

# In libpq's trace (REGRESS_MODE: no timestamps), the frontend's messages that run statements.
_TRACED_MESSAGE = re.compile(r'^F\t\d+\t(Query|Parse|Bind|Execute)\t "((?:[^"\\]|\\.)*)"(?: "((?:[^"\\]|\\.)*)")?')


@contextmanager
def traced(pg: "psycopg.Connection[Any]") -> Iterator[list[str]]:
    statements: list[str] = []
    with tempfile.TemporaryFile("w+") as log:
        pg.pgconn.trace(log.fileno())
        pg.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        try:
            yield statements
        finally:
            pg.pgconn.untrace()
            log.seek(0)
            trace = log.read()
            prepared = dict(pg.execute("SELECT name, statement FROM pg_prepared_statements").fetchall())
            statements.extend(sent_statements(trace, prepared))


def sent_statements(trace: str, prepared: dict[str, str]) -> list[str]:
    """The statements a libpq trace shows sent: a simple query's text, or per Execute the
    text of the statement its Bind named (parsed in the trace, or prepared before it)."""
    parsed = dict(prepared)
    sent: list[str] = []
    bound = ""
    for line in trace.splitlines():
        match = _TRACED_MESSAGE.match(line)
        if match is None:
            continue
        message, first, second = match.groups()
        if message == "Query":
            sent.append(first)
        elif message == "Parse":
            parsed[first] = second or ""
        elif message == "Bind":
            bound = parsed.get(second or "", second or "")
        else:
            sent.append(bound)
    return sent
