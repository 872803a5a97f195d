"""``changesSince`` pages are the same on every backend, to the byte.

PostgreSQL rounds each ``occurred_at`` to whole microseconds in SQL (store/dialect.py,
``_POSTGRES_PAGE``; a page with an instant beyond 10**12 s is read again in seconds) while
SQLite leaves that to Python (``timefmt.iso_millis``): these tests
store the same events, timestamps at millisecond edges included, on both and compare the pages
with each other and with ``datetime``'s own text. Events go in through the store so that any
float can be stored (the gateway clamps ``occurred_at`` to its window, R16).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime, timezone
from typing import Any

import pytest

from sessionstate import Gateway
from sessionstate.shared.timefmt import iso_millis
from tests.backends import sqlite_database

KEY = "agent:main:subagent:page"
AGENT = "main"
# datetime covers years 1..9999; beyond that the text is iso_millis's alone.
DATETIME_RANGE = (-62_135_596_800.0, 253_402_300_800.0)


def reference(epoch: float) -> str:
    moment = datetime.fromtimestamp(epoch, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def edge_timestamps() -> list[float]:
    """Fractions that round across a millisecond or a second, exact half-microsecond ties
    (k/128 s), neighbours one ulp away, negative epochs, and epochs beyond 10**12 s (where
    PostgreSQL hands the float back to Python)."""
    values: list[float] = []
    for second in (1_800_000_000, 1_700_000_000, 0, -1, -1_000_000_000, 86_399, 253_402_300_799):
        for fraction in (0.0, 0.0005, 0.0004995, 0.0004994999, 0.000999, 0.0009995, 0.9995,
                         0.9994995, 0.9999995, 0.99999949, 0.999999, 0.5, 0.0078125, 0.9921875):
            for x in (second + fraction, second - fraction):
                values += [x, math.nextafter(x, math.inf), math.nextafter(x, -math.inf)]
        values += [second + k / 128 for k in range(128)]
        values += [second + (m - 0.5) / 1000 for m in range(0, 1001, 37)]
    values += [1e12 - 0.5, 1e12, 1e12 + 0.9995, -1e12, 2.5e12 + 0.0078125, 9e12 + 0.25, 1e13 + 0.5, -1e13]
    rng = random.Random(11)
    values += [rng.uniform(-3e9, 6e9) for _ in range(400)]
    values += [rng.randrange(-10**9, 10**10) + rng.randrange(1000) / 1000 + rng.choice((-5e-7, 5e-7, 0.0))
               for _ in range(400)]
    return values


def store_events(gw: Gateway, timestamps: list[float]) -> None:
    """One event per timestamp; every seventh has an actor, a run id and a payload."""
    gw.create_session(KEY)
    store = gw.store
    with store.transaction():
        for i, at in enumerate(timestamps):
            extra = i % 7 == 0
            store.append_event(
                KEY, AGENT, "run_failed" if extra else "human_direct_message", "human",
                "agent:main:main" if extra else None, f"run-{i}" if extra else None, f"event {i}",
                '{"hidden":1,"outcome":"timeout"}' if extra else None, at, at, None,
            )


def all_pages(gw: Gateway) -> list[dict[str, Any]]:
    """Every ``session_status`` page from the start, in order."""
    pages, since = [], 0
    while True:
        status = gw.session_status(KEY, changes_since=since)
        pages.append(status)
        events = status["stateChanges"]["events"]
        if not status["stateChanges"]["truncated"]:
            return pages
        since = events[-1]["sequence"]


@pytest.fixture
def sqlite_url() -> Iterator[str]:
    with sqlite_database() as url:
        yield url


def pages_of(url: str, timestamps: list[float]) -> list[dict[str, Any]]:
    with ExitStack() as stack:
        gw = stack.enter_context(Gateway.open(url, clock=lambda: 2_000_000_000.0))
        store_events(gw, timestamps)
        return all_pages(gw)


def test_each_backend_writes_datetimes_text_at_millisecond_edges(db_url):
    timestamps = edge_timestamps()
    events = [e for page in pages_of(db_url, timestamps) for e in page["stateChanges"]["events"]]
    created, *events = events  # the session's own `created` (R27) comes first, at the clock's time
    assert created["kind"] == "created"
    assert len(events) == len(timestamps)
    for event, at in zip(events, timestamps):
        low, high = DATETIME_RANGE
        expected = reference(at) if low <= at < high else iso_millis(at)
        assert event["occurredAt"] == expected, (at, event)
    shaped = events[0]
    assert shaped["actorId"] == "agent:main:main" and shaped["runId"] == "run-0"
    assert shaped["payload"] == {"outcome": "timeout"}
    assert set(events[1]) == {"sequence", "kind", "actorType", "occurredAt", "summary"}


def test_postgresql_and_sqlite_pages_are_equal(pg_url, sqlite_url):
    timestamps = edge_timestamps()
    on_postgres = pages_of(pg_url, timestamps)
    on_sqlite = pages_of(sqlite_url, timestamps)
    assert len(on_postgres) > 1  # several pages, the truncation flags included
    assert on_postgres == on_sqlite
    # the same dicts, key order included: the JSON agents receive is the same bytes
    assert [list(e) for p in on_postgres for e in p["stateChanges"]["events"]] == [
        list(e) for p in on_sqlite for e in p["stateChanges"]["events"]]
