"""Behaviour pinned after mutmut's survivors over the recording path of the notice service
(``services/notice/``: recording.py, batch_decisions.py, group_commit.py, core.py), with
``tests/gateway`` as the selection. Each test names what a user of the gateway can observe and
no other test in ``tests/gateway`` asserted:

- the messages of ``record_events``/``prepare_events``/``record_prepared`` for input of the
  wrong shape, and that input of the wrong shape is refused before anything is written (a
  mapping or a number where a list belongs, a list of something that is not a prepared event);
- an interrupt (a ``BaseException``) escaping a group commit: a caller whose events were
  committed before it keeps its sequence, every caller still unanswered hears of the interrupt,
  and none is left with no outcome;
- a queued caller interrupted after its batch committed still passes the wake-up on to the
  callers behind it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sessionstate import Gateway, InvalidArgument, UnknownSession

MANAGER = "agent:main:main"
PEER = "agent:main:peer"
CHILD = "agent:main:subagent:child"
EVENT = {"actor_type": "human", "summary": "hello"}
WAIT = 30.0  # only a hang reaches it


class Interrupted(BaseException):
    """Stands for KeyboardInterrupt (which pytest would take as its own)."""


@pytest.fixture
def gw(db_url: str) -> Iterator[Gateway]:
    # R27's announcement of PEER in MANAGER's queue is noise here.
    gateway = Gateway.open(db_url, clock=lambda: 1_800_000_000.0, notify_on_create=False)
    gateway.create_session(MANAGER)
    gateway.create_session(PEER)
    gateway.create_session(CHILD, kind="subagent", parent=MANAGER)
    gateway.watch(PEER, CHILD)
    yield gateway
    gateway.close()


# -- input of the wrong shape ------------------------------------------------------------------


@pytest.mark.parametrize("events", ["not a list", b"bytes", 7, {"session_key": CHILD}, {}], ids=repr)
def test_record_events_refuses_anything_but_a_sequence_by_its_message(gw, events):
    before = gw.store.dump()
    with pytest.raises(InvalidArgument) as refused:
        gw.record_events(events)
    assert refused.value.message == "events must be a sequence of mappings"
    with pytest.raises(InvalidArgument) as refused_alone:
        gw.ops.prepare_events(events)
    assert refused_alone.value.message == "events must be a sequence of mappings"
    assert gw.store.dump() == before


def test_record_events_names_the_item_that_is_not_a_mapping(gw):
    good = dict(session_key=CHILD, kind="goal_changed", **EVENT)
    before = gw.store.dump()
    with pytest.raises(InvalidArgument) as refused:
        gw.record_events([good, ["session_key", CHILD]])
    assert refused.value.message == "events[1] must be a mapping"
    assert gw.store.dump() == before


def test_record_events_names_the_item_with_a_bad_argument_name(gw):
    good = dict(session_key=CHILD, kind="goal_changed", **EVENT)
    before = gw.store.dump()
    with pytest.raises(InvalidArgument) as unknown:
        gw.record_events([good, good, dict(good, colour="red")])
    assert unknown.value.message == "events[2]: record_event() got unexpected keyword arguments ['colour']"
    with pytest.raises(InvalidArgument) as missing:
        gw.record_events([dict(session_key=CHILD, kind="goal_changed", actor_type="human")])
    assert missing.value.message == "events[0]: record_event() missing required keyword arguments ['summary']"
    assert gw.store.dump() == before


RECORD_PREPARED_REFUSED = "calls must be a sequence of sequences of prepared events (prepare_event)"


@pytest.mark.parametrize("shape", ["a number", "a mapping", "a string", "a call of strings", "a call that is a number",
                                   "a prepared event where a call belongs", "a stranger among prepared events"])
def test_record_prepared_refuses_anything_but_calls_of_prepared_events(gw, shape):
    prepared = gw.ops.prepare_event(CHILD, "goal_changed", **EVENT)
    calls: Any = {
        "a number": 7,
        "a mapping": {},  # iterates as nothing: it must not pass as zero calls
        "a string": "ab",
        "a call of strings": [["goal_changed"]],
        "a call that is a number": [7],
        "a prepared event where a call belongs": [prepared],  # a tuple, but of fields, not events
        "a stranger among prepared events": [[prepared, tuple(prepared)]],
    }[shape]
    before = gw.store.dump()
    with pytest.raises(InvalidArgument) as refused:
        gw.ops.record_prepared(calls)
    assert refused.value.message == RECORD_PREPARED_REFUSED
    assert gw.store.dump() == before
    # The same prepared event in a call of the right shape is recorded.
    (waiter,) = gw.ops.record_prepared([[prepared]])
    assert waiter.outcome() == [gw.ops.state_version(CHILD)]
