"""Recording events (``services/notice/recording.py`` and ``core.py``), as a caller sees it:

- the messages of ``record_events``/``prepare_events``/``record_prepared`` for input of the
  wrong shape, which is refused before anything is written (a mapping or a number where a list
  belongs, a list of something that is not a prepared event); ``record_event``'s messages name
  the argument that was wrong, and the keywords unknown or missing;
- R9/R10: a call that names an unknown session fails even when its dedupe key is already in
  the log, where the append itself would find the old event and bump no head;
- R9: an agent id that contradicts the key is refused before the caller waits for the turn;
- the messages of an unknown or ambiguous session, as a caller reads them;
- every field a caller gives ``record_event`` reads back in ``changesSince`` (spec section 10),
  and ``stats["events_recorded"]`` counts each event a burst inserted;
- R2 in a batch (``services/notice/batch_decisions.py``): a watcher's own event leaves its
  cursor caught up, so the batch's next event on the same target still notifies it;
- the protocol trace (spec section 15): each event's line, and each step it fires (R2's
  ``self_event`` included) with that event's kind and actor, alone and in a batch.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionstate import Gateway, InvalidArgument, UnknownSession, notice_text
from tests.gateway.helpers import CHILD, EVENT, MANAGER, PEER, WAIT, open_watched_child, run_queued

GHOST = "agent:main:subagent:ghost"


@pytest.fixture
def gw(db_url: str) -> Iterator[Gateway]:
    gateway = open_watched_child(db_url)
    yield gateway
    gateway.close()


@pytest.mark.parametrize("batched", [False, True], ids=["alone", "in a batch"])
def test_an_unknown_session_is_refused_even_when_its_dedupe_key_is_in_the_log(gw, batched):
    """R10 turns a known dedupe key into the old event's sequence without a head bump, so the
    bump cannot prove the session exists: R9's "a call that names an unknown session fails
    alone" needs the session looked up."""
    kept = gw.record_event(CHILD, "goal_changed", dedupe_key="once", **EVENT)
    before = gw.store.dump()

    def ghost() -> Any:
        return gw.record_event(GHOST, "goal_changed", dedupe_key="once", **EVENT)

    if batched:
        refused, again = run_queued(gw, [ghost, lambda: gw.record_event(CHILD, "goal_changed", dedupe_key="once",
                                                                        **EVENT)])
        assert again == kept
    else:
        with pytest.raises(UnknownSession) as caught:
            ghost()
        refused = caught.value
    assert isinstance(refused, UnknownSession)
    assert refused.message == f"unknown session {GHOST!r} (agent 'main')"
    assert gw.store.dump() == before


def test_an_agent_id_that_contradicts_the_key_is_refused_without_waiting_for_the_turn(gw):
    """Validation runs before a call queues (R9: a call that fails validation fails alone),
    while another thread holds the write turn."""
    outcome: list[BaseException] = []

    def contradicting() -> None:
        try:
            gw.record_event(CHILD, "goal_changed", agent_id="ops", **EVENT)
        except InvalidArgument as exc:
            outcome.append(exc)

    before = gw.store.dump()
    with gw.locked():
        thread = threading.Thread(target=contradicting, daemon=True)
        thread.start()
        thread.join(WAIT)
        assert not thread.is_alive(), "a call with a contradicting agent id waited for the write turn"
        assert gw.ops.diagnostics().group_queued == 0
    assert [e.message for e in outcome] == [f"agent id 'ops' contradicts key {CHILD!r}"]
    assert gw.store.dump() == before


def test_an_unknown_or_ambiguous_session_is_named_in_the_message(gw):
    gw.create_session("shared", agent_id="main")
    gw.create_session("shared", agent_id="ops")
    with pytest.raises(UnknownSession) as unknown:
        gw.record_event("nobody", "goal_changed", **EVENT)
    assert unknown.value.message == "session 'nobody' is unknown"
    with pytest.raises(UnknownSession) as ambiguous:
        gw.record_event("shared", "goal_changed", **EVENT)
    assert ambiguous.value.message == "session 'shared' is ambiguous across agents ['main', 'ops']; give agent_id"
    with pytest.raises(UnknownSession) as qualified:
        gw.watch(MANAGER, GHOST)
    assert qualified.value.message == f"unknown session {GHOST!r} (agent 'main')"
    # an unqualified key known to one agent alone resolves to it
    assert gw.record_event("shared", "goal_changed", agent_id="ops", **EVENT) is not None
    gw.create_session("single", agent_id="ops")
    assert gw.record_event("single", "goal_changed", **EVENT) == gw.session_status("single")["stateVersion"]


def test_attach_names_an_unknown_session_and_takes_a_known_key_of_any_agent(gw):
    """R20's ``attach`` looks its key up under any agent before it needs the change pump: an
    unknown key is refused by name, a known one (qualified, or unqualified and of another
    agent) gets as far as the pump check."""
    gw.create_session("shared", agent_id="ops")
    for key in ("nobody", GHOST):
        with pytest.raises(UnknownSession) as unknown:
            gw.cluster.attach(key)
        assert unknown.value.message == f"unknown session {key!r}"
    for key in ("shared", MANAGER):
        with pytest.raises(InvalidArgument, match="attach needs the change pump"):
            gw.cluster.attach(key)


def test_a_watchers_own_event_in_a_batch_leaves_it_to_be_notified_by_the_next_one(gw):
    """One batch, two notifying events on CHILD: PEER's own (R2: it notifies MANAGER only, and
    PEER's cursor stays caught up), then a human's, which must still notify PEER (R6: the
    notice names the version PEER last saw). MANAGER's pair already holds its notice (R5)."""
    seen = gw.ops.state_version(CHILD)
    assert gw.ops.cursor_positions(MANAGER, CHILD)[:3] == gw.ops.cursor_positions(PEER, CHILD)[:3] == (seen,) * 3
    own, human = gw.record_events([
        dict(session_key=CHILD, kind="goal_changed", actor_type="agent", actor_id=PEER, summary="mine"),
        dict(session_key=CHILD, kind="human_direct_message", **EVENT),
    ])
    assert seen < own < human == gw.ops.state_version(CHILD)
    assert gw.pending_system_events(MANAGER) == [notice_text(CHILD, seen)]
    assert gw.pending_system_events(PEER) == [notice_text(CHILD, seen)]
    assert gw.ops.cursor_positions(MANAGER, CHILD)[:3] == (seen, own, human)
    assert gw.ops.cursor_positions(PEER, CHILD)[:3] == (seen, human, human)


def test_the_trace_logs_each_event_and_each_step_it_fires_with_the_events_kind_and_actor(db_url, tmp_path):
    """Three calls on CHILD, watched by MANAGER (spawn) and PEER: PEER's own event (MANAGER
    steps on ``material_event``, PEER on ``self_event``); PEER's own again, when PEER alone is
    caught up (only its ``self_event`` step); then a batch of a human's event (PEER's
    ``material_event``) and MANAGER's, which meets no caught-up cursor."""
    path = tmp_path / "trace.jsonl"
    with Gateway.open(db_url, trace=path, clock=lambda: 1_800_000_000.0, notify_on_create=False) as gw:
        gw.create_session(MANAGER)
        gw.create_session(CHILD, kind="subagent", parent=MANAGER)
        gw.create_session(PEER)
        gw.watch(PEER, CHILD)
        first = gw.record_event(CHILD, "goal_changed", actor_type="agent", actor_id=PEER, summary="mine")
        second = gw.record_event(CHILD, "human_direct_message", actor_type="agent", actor_id=PEER, summary="again")
        human, managers = gw.record_events([
            dict(session_key=CHILD, kind="human_direct_message", **EVENT),
            dict(session_key=CHILD, kind="goal_changed", actor_type="agent", actor_id=MANAGER, summary="m"),
        ])
    lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
    events = {line["seq"]: line for line in lines if line["op"] == "event"}
    recorded = {
        first: ("goal_changed", "agent", PEER), second: ("human_direct_message", "agent", PEER),
        human: ("human_direct_message", "human", None), managers: ("goal_changed", "agent", MANAGER),
    }
    for sequence, (kind, actor_type, actor) in recorded.items():
        event = events[sequence]
        assert (event["session"], event["kind"], event["actor_type"], event["actor"]) == (
            [CHILD, "main"], kind, actor_type, actor)
    steps = [line for line in lines if line["op"] == "step" and line["trigger"] in ("material_event", "self_event")]
    assert sorted((step["seq"], step["watcher"], step["trigger"]) for step in steps) == sorted([
        (first, MANAGER, "material_event"), (first, PEER, "self_event"),
        (second, PEER, "self_event"),
        (human, PEER, "material_event"),
    ])
    for step in steps:
        assert step["target"] == [CHILD, "main"]
        assert (step["kind"], step["actor"]) == (recorded[step["seq"]][0], recorded[step["seq"]][2])


def test_every_field_given_to_record_event_reads_back_in_changes_since(gw):
    """The run id and the payload were only ever checked for being refused when bad; a good one
    must be stored and shown (the payload's visible fields only)."""
    before = gw.ops.state_version(CHILD)
    sequence = gw.record_event(CHILD, "run_failed", actor_type="agent", actor_id=MANAGER, run_id="run-7",
                               summary="the run failed", payload={"outcome": "timeout", "detail": "hidden"},
                               occurred_at=1_800_000_000.0 - 60)
    events = gw.session_status(CHILD, changes_since=before)["stateChanges"]["events"]
    assert events == [{
        "sequence": sequence, "kind": "run_failed", "actorType": "agent", "occurredAt": "2027-01-15T07:59:00.000Z",
        "summary": "the run failed", "actorId": MANAGER, "runId": "run-7", "payload": {"outcome": "timeout"},
    }]


def test_events_recorded_counts_the_events_a_burst_inserted(gw):
    """``stats["events_recorded"]`` counts inserted events: three for a burst of three, none for
    an event its dedupe key found already in the log (R10)."""
    recorded = gw.ops.stats["events_recorded"]
    burst = gw.record_events([dict(session_key=CHILD, kind="goal_changed", **EVENT)] * 2
                             + [dict(session_key=CHILD, kind="goal_changed", dedupe_key="d", **EVENT)])
    assert gw.ops.stats["events_recorded"] == recorded + 3
    assert gw.record_event(CHILD, "goal_changed", dedupe_key="d", **EVENT) == burst[2]
    assert gw.ops.stats["events_recorded"] == recorded + 3


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


GOOD = dict(session_key=CHILD, kind="goal_changed", **EVENT)


@pytest.mark.parametrize("events, message", [
    ([GOOD, ["session_key", CHILD]], "events[1] must be a mapping"),
    ([GOOD, GOOD, dict(GOOD, colour="red")], "events[2]: record_event() got unexpected keyword arguments ['colour']"),
    ([dict(session_key=CHILD, kind="goal_changed", actor_type="human")],
     "events[0]: record_event() missing required keyword arguments ['summary']"),
], ids=["not a mapping", "an unknown argument", "a missing argument"])
def test_record_events_names_the_item_it_refuses_and_why(gw, events, message):
    before = gw.store.dump()
    with pytest.raises(InvalidArgument) as refused:
        gw.record_events(events)
    assert refused.value.message == message
    assert gw.store.dump() == before


def test_record_event_names_a_bad_argument_name_when_it_gives_two_as_the_usual_call_does(gw):
    """Two keywords are what the usual call passes (the required ones); two with one of them
    wrong are refused by name, before anything is written."""
    before = gw.store.dump()
    with pytest.raises(TypeError) as unknown:
        gw.record_event(CHILD, "goal_changed", actor_type="human", colour="red")  # type: ignore[call-arg]
    assert str(unknown.value) == "record_event() got unexpected keyword arguments ['colour']"
    with pytest.raises(TypeError) as missing:
        gw.record_event(CHILD, "goal_changed", actor_type="human", actor_id=None)  # type: ignore[call-arg]
    assert str(missing.value) == "record_event() missing required keyword arguments ['summary']"
    assert gw.store.dump() == before


def test_an_event_without_its_optional_keywords_is_prepared_as_with_each_of_them_none(gw):
    every_optional_none = dict.fromkeys(["actor_id", "agent_id", "run_id", "payload", "dedupe_key", "occurred_at"])
    bare = gw.ops.prepare_event(CHILD, "goal_changed", actor_type="human", summary="s")
    assert bare == gw.ops.prepare_event(CHILD, "goal_changed", actor_type="human", summary="s", **every_optional_none)
    assert bare.target == (CHILD, "main") and bare.requested == (CHILD, None)


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


FIELD_MESSAGES = {
    "summary too long": ({"summary": "x" * 201}, "summary is 201 characters; at most 200 allowed"),
    "actor id not a string": ({"actor_id": 5}, "actor id must be a string, not int"),
    "run id not a string": ({"run_id": 5}, "run id must be a string, not int"),
    "dedupe key on two lines": ({"dedupe_key": "a\nb"}, "dedupe key must be one line of printable text"),
}


@pytest.mark.parametrize("case", sorted(FIELD_MESSAGES))
def test_record_event_names_the_bad_argument_in_its_message(gw, case):
    overrides, message = FIELD_MESSAGES[case]
    before = gw.store.dump()
    with pytest.raises(InvalidArgument) as refused:
        gw.record_event(CHILD, "goal_changed", **{**EVENT, **overrides})
    assert refused.value.message == message
    assert gw.store.dump() == before


def test_record_event_names_unknown_and_missing_keywords(gw):
    with pytest.raises(TypeError) as unknown:
        gw.record_event(CHILD, "goal_changed", colour="red", **EVENT)  # type: ignore[call-arg]
    assert str(unknown.value) == "record_event() got unexpected keyword arguments ['colour']"
    with pytest.raises(TypeError) as missing:
        gw.record_event(CHILD, "goal_changed")  # type: ignore[call-arg]
    assert str(missing.value) == "record_event() missing required keyword arguments ['actor_type', 'summary']"
