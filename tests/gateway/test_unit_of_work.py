"""R9 across every way of grouping calls: notices, queue changes and wakes are released only
after the outermost commit, and a rollback anywhere drops them with the writes.

Each case runs one gateway call inside one grouping API and raises before the commit; the
control runs the same call and commits, so each case also proves it would have queued or
woken something.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from sessionstate import Gateway, notice_text

MANAGER = "agent:main:main"
PEER = "agent:main:peer"
CHILD = "agent:main:subagent:child"


class Boom(Exception):
    pass


@pytest.fixture
def wakes() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def gw(db_url, wakes):
    now = [1_800_000_000.0]

    def clock() -> float:
        now[0] += 60.0  # every call is past the 20 s wake window of the one before
        return now[0]

    # R27's announcement of PEER in MANAGER's queue is noise for these transactions.
    gateway = Gateway.open(db_url, clock=clock, on_wake=lambda w, r: wakes.append((w, r)), notify_on_create=False)
    gateway.create_session(MANAGER)
    gateway.create_session(PEER)
    gateway.create_session(CHILD, kind="subagent", parent=MANAGER, run_id="r1")
    gateway.watch(PEER, CHILD)
    yield gateway
    gateway.close()


def human(gw: Gateway) -> None:
    gw.record_event(CHILD, "human_direct_message", actor_type="human", summary="human message")


@contextmanager
def nested(gw: Gateway) -> Iterator[None]:
    with gw.transaction():
        with gw.transaction():
            yield


@contextmanager
def store_inside_gateway(gw: Gateway) -> Iterator[None]:
    with gw.transaction():
        with gw.store.transaction():
            yield


@contextmanager
def gateway_inside_store(gw: Gateway) -> Iterator[None]:
    with gw.store.transaction():
        with gw.transaction():
            yield


GROUPINGS: dict[str, Callable[[Gateway], AbstractContextManager[Any]]] = {
    "gateway.transaction": lambda gw: gw.transaction(),
    # The reproduced bug: the store's own transaction around a gateway call.
    "store.transaction": lambda gw: gw.store.transaction(),
    "nested gateway transactions": nested,
    "store inside gateway": store_inside_gateway,
    "gateway inside store": gateway_inside_store,
}


def queue_and_wake_state(gw: Gateway) -> dict[str, list[str]]:
    return {key: gw.pending_system_events(key) for key in (MANAGER, PEER, CHILD)}


CALLS: dict[str, Callable[[Gateway], Any]] = {
    "record_event": human,
    "record_events": lambda gw: gw.record_events(
        [dict(session_key=CHILD, kind="goal_changed", actor_type="human", summary="goal set")]
    ),
    "goal_changed": lambda gw: gw.producers.goal_changed(CHILD, "updated", actor_type="human"),
    "human_message": lambda gw: gw.transcripts.human_message(CHILD, "hello", channel="telegram"),
    "enqueue_system_event": lambda gw: gw.ops.enqueue_system_event(MANAGER, "a system line"),
}


@pytest.mark.parametrize("grouping", GROUPINGS)
@pytest.mark.parametrize("call", CALLS)
def test_a_rollback_releases_no_notice_and_no_wake(gw, wakes, grouping, call):
    before = gw.store.dump()
    queued = queue_and_wake_state(gw)
    with pytest.raises(Boom):
        with GROUPINGS[grouping](gw):
            CALLS[call](gw)
            raise Boom
    assert gw.store.dump() == before
    assert queue_and_wake_state(gw) == queued
    assert wakes == []


@pytest.mark.parametrize("grouping", GROUPINGS)
@pytest.mark.parametrize("call", CALLS)
def test_the_same_call_committed_releases_after_the_commit(gw, wakes, grouping, call):
    queued = queue_and_wake_state(gw)
    with GROUPINGS[grouping](gw):
        CALLS[call](gw)
        assert queue_and_wake_state(gw) == queued and wakes == []  # not before the commit
    assert queue_and_wake_state(gw) != queued
    assert wakes  # MANAGER and PEER are main-style: the released line woke one of them


def test_an_inner_rollback_drops_only_its_own_notices(gw, wakes):
    with gw.transaction():
        gw.ops.enqueue_system_event(PEER, "kept")
        with pytest.raises(Boom):
            with gw.transaction():
                human(gw)
                raise Boom
    assert gw.pending_system_events(MANAGER) == []
    assert gw.pending_system_events(PEER) == ["kept"]
    # Only the set-up's events: MANAGER's, PEER's and CHILD's `created` (R27), child_spawned.
    assert gw.ops.state_version(CHILD) == 4


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_queue_removals_wait_for_the_commit_too(gw, grouping):
    spawn = gw.ops.state_version(CHILD)  # both cursors start there (R4)
    human(gw)
    owed = {MANAGER: [notice_text(CHILD, spawn)], PEER: [notice_text(CHILD, spawn)]}
    assert {k: gw.pending_system_events(k) for k in owed} == owed
    for undo in (
        lambda: gw.drain_system_events(MANAGER),
        lambda: gw.unwatch(PEER, CHILD),
        lambda: gw.ops.reset_session(PEER),
        lambda: gw.ops.delete_session(CHILD),
    ):
        with pytest.raises(Boom):
            with GROUPINGS[grouping](gw):
                undo()
                raise Boom
        assert {k: gw.pending_system_events(k) for k in owed} == owed
    assert gw.drain_system_events(MANAGER) == owed[MANAGER]  # still deliverable
