"""A group commit's notice decisions (one cursor read and one write for the whole batch,
decided in memory) give what deciding each event on its own gives.

Two gateways, each on a database of its own, live through the same history; then one records
a batch with ``record_events`` (the batch path: ``services/notice/batch_decisions.py``) and the other
records the same events one ``record_event`` after the other inside one transaction of its own
(each event reads and writes its cursors itself; notices and wakes still wait for the one
commit). Sequences, every stored row, queued lines in order, wakes and later drains must
agree.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings, strategies as st

from sessionstate import Gateway

WATCHERS = ("w1", "w2", "w3")
TARGETS = ("t1", "t2")
KINDS = ("goal_changed", "human_direct_message", "compacted", "run_failed")  # one log-only
_EXAMPLES = itertools.count()  # fresh session keys per example (the databases are shared)


class Side:
    """One gateway and the wakes it sent."""

    def __init__(self, url: str) -> None:
        self.wakes: list[tuple[str, str]] = []
        self.gw = Gateway.open(url, clock=lambda: 1_800_000_000.0, notify_on_create=False,
                               on_wake=lambda w, r: self.wakes.append((w, r)))


@pytest.fixture
def sides(backend) -> Iterator[tuple[Side, Side]]:
    with backend.database() as batch_url, backend.database() as alone_url:
        pair = (Side(batch_url), Side(alone_url))
        try:
            yield pair
        finally:
            for side in pair:
                side.gw.close()


def event_strategy(prefix: str) -> st.SearchStrategy[dict[str, Any]]:
    actors = st.sampled_from([None, *(f"{prefix}{w}" for w in WATCHERS), *(f"{prefix}{t}" for t in TARGETS)])
    return st.builds(
        lambda target, kind, actor, dedupe: {
            "session_key": f"{prefix}{target}", "kind": kind, "summary": kind,
            "actor_type": "human" if actor is None else "agent", "actor_id": actor,
            "payload": {"outcome": "timeout"} if kind == "run_failed" else None,
            "dedupe_key": None if dedupe is None else f"{prefix}{dedupe}",
        },
        st.sampled_from(TARGETS), st.sampled_from(KINDS), actors, st.one_of(st.none(), st.sampled_from(["d1", "d2"])),
    )


def observed(side: Side, prefix: str) -> dict[str, Any]:
    gw = side.gw
    return {
        "cursors": {(w, t): gw.ops.cursor_positions(f"{prefix}{w}", f"{prefix}{t}") for w in WATCHERS for t in TARGETS},
        "queued": {w: gw.pending_system_events(f"{prefix}{w}") for w in WATCHERS},
        "wakes": sorted(side.wakes),  # the order across watchers is free (R12 per watcher)
    }


@given(data=st.data())
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_batch_decides_as_its_events_one_by_one(sides, data):
    prefix = f"agent:a:x{next(_EXAMPLES)}-"
    batch_side, alone_side = sides
    events = event_strategy(prefix)
    watched = data.draw(st.sets(st.tuples(st.sampled_from(WATCHERS), st.sampled_from(TARGETS)), min_size=1),
                        label="watched")
    history = data.draw(st.lists(st.one_of(events, st.sampled_from(WATCHERS)), max_size=6), label="history")
    batch = data.draw(st.lists(events, min_size=2, max_size=8), label="batch")
    for side in sides:
        for key in WATCHERS + TARGETS:
            side.gw.create_session(f"{prefix}{key}")
        for watcher, target in sorted(watched):
            side.gw.watch(f"{prefix}{watcher}", f"{prefix}{target}")
        for step in history:  # mixed cursor states before the batch: pending, caught up
            if isinstance(step, str):
                side.gw.drain_system_events(f"{prefix}{step}")
            else:
                side.gw.record_event(**step)
        side.wakes.clear()
    note(f"batch: {[(e['session_key'], e['kind'], e['actor_id'], e['dedupe_key']) for e in batch]}")

    got = batch_side.gw.record_events(batch)
    with alone_side.gw.transaction():
        want = [alone_side.gw.record_event(**e) for e in batch]

    assert got == want and None not in got
    assert observed(batch_side, prefix) == observed(alone_side, prefix)
    # Row for row, the stored positions too (a read hides a pending cursor's stored material).
    assert batch_side.gw.store.dump() == alone_side.gw.store.dump()
    for watcher in WATCHERS:
        key = f"{prefix}{watcher}"
        assert batch_side.gw.drain_system_events(key) == alone_side.gw.drain_system_events(key)
