"""The statements a PostgreSQL connection sends and the round trips they take, read from
libpq's protocol trace (``PostgresStore.trace_statements``, ``trace_round_trips``): how tests
count a path's round trips without reaching into the connection."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

__all__ = ["sent_round_trips", "sent_statements", "traced", "traced_round_trips"]

# In libpq's trace (REGRESS_MODE: no timestamps), the frontend's messages that run statements,
# and those after which the client waits for the answers (a statement outside a pipeline ends
# with Sync; in a pipeline, a sync sends Sync and a fetch before it Flush).
_WAIT = re.compile(r"^F\t\d+\t(Sync|Flush)$")
_TRACED_MESSAGE = re.compile(r'^F\t\d+\t(Query|Parse|Bind|Execute)\t "((?:[^"\\]|\\.)*)"(?: "((?:[^"\\]|\\.)*)")?')


@contextmanager
def traced(pg: "psycopg.Connection[Any]") -> Iterator[list[str]]:
    """The statements sent inside the block, in order."""
    statements: list[str] = []
    trips: list[list[str]] = []
    try:
        with traced_round_trips(pg) as trips:
            yield statements
    finally:
        statements.extend(s for trip in trips for s in trip)


@contextmanager
def traced_round_trips(pg: "psycopg.Connection[Any]") -> Iterator[list[list[str]]]:
    """The round trips made inside the block, each as the statements it sent."""
    trips: list[list[str]] = []
    with tempfile.TemporaryFile("w+") as log:
        pg.pgconn.trace(log.fileno())
        pg.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        try:
            yield trips
        finally:
            pg.pgconn.untrace()
            log.seek(0)
            trace = log.read()
            prepared = dict(pg.execute("SELECT name, statement FROM pg_prepared_statements").fetchall())
            trips.extend(sent_round_trips(trace, prepared))


def sent_statements(trace: str, prepared: dict[str, str]) -> list[str]:
    """The statements a libpq trace shows sent: a simple query's text, or per Execute the
    text of the statement its Bind named (parsed in the trace, or prepared before it)."""
    return [s for trip in sent_round_trips(trace, prepared) for s in trip]


def sent_round_trips(trace: str, prepared: dict[str, str]) -> list[list[str]]:
    """``sent_statements`` grouped by the wait for the server that ended them: a simple
    query, or a Sync or Flush (a Flush right after a Sync is the same wait). A round trip that
    only prepared a statement is an empty group."""
    parsed = dict(prepared)
    trips: list[list[str]] = []
    sent: list[str] = []
    bound = ""
    waited = False  # the last frontend message ended a round trip
    for line in trace.splitlines():
        if not line.startswith("F\t"):
            continue
        wait = _WAIT.match(line)
        if wait is not None:
            if not waited:
                trips.append(sent)
                sent, waited = [], True
            continue
        match = _TRACED_MESSAGE.match(line)
        if match is None:
            continue
        waited = False
        message, first, second = match.groups()
        if message == "Query":
            trips.append(sent + [first])
            sent, waited = [], True
        elif message == "Parse":
            parsed[first] = second or ""
        elif message == "Bind":
            bound = parsed.get(second or "", second or "")
        else:
            sent.append(bound)
    if sent:
        trips.append(sent)
    return trips
