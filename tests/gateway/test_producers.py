"""The producers (``services/producers.py``): their refusals under their own names (also of a
value too long to print), the bounds of an op id and of a goal summary, which session and which
actor and time a producer's event carries, and the summary of a compaction without both
counts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sessionstate import Gateway, InvalidArgument
from sessionstate.shared.timefmt import epoch_micros, iso_micros
from tests.helpers import Clock
from tests.tools.support import MANAGER, PEER

HOUR = 3_600.0
NOW = 1_800_000_000.0

@pytest.fixture
def gw(db_url: str) -> Iterator[Gateway]:
    gateway = Gateway.open(db_url, clock=Clock(NOW), record_created=False, notify_on_create=False)
    gateway.create_session(MANAGER)
    try:
        yield gateway
    finally:
        gateway.close()


def events(gw: Gateway, key: str = MANAGER, agent_id: str | None = None) -> list[dict[str, Any]]:
    status = gw.session_status(key, changes_since=0, agent_id=agent_id)
    return list(status["stateChanges"]["events"])


def refused(gw: Gateway, call: Any, message: str) -> None:
    """``call`` raises InvalidArgument whose message matches ``message``, and records nothing."""
    before = events(gw)
    with pytest.raises(InvalidArgument, match=message):
        call()
    assert events(gw) == before


# -- goal_changed -------------------------------------------------------------------------------


def test_a_goal_change_outside_the_three_is_refused_by_a_message_listing_them(gw):
    refused(gw, lambda: gw.producers.goal_changed(MANAGER, "renamed", actor_type="human"),
            r"^goal change must be one of \['created', 'updated', 'cleared'\], got 'renamed'$")


def test_a_goal_changes_bad_actor_id_is_refused_under_its_own_name(gw):
    refused(gw, lambda: gw.producers.goal_changed(MANAGER, "updated", actor_type="agent", actor_id="two words"),
            r"^actor id 'two words' contains whitespace or control characters$")


class Unformattable:
    """A value no f-string can write, as an int of over 4300 digits is (that one is not used here:
    check_actor_type's own message cannot write it either, see the doc's suspected bugs)."""

    def __format__(self, spec: str) -> str:
        raise RuntimeError("cannot be formatted")


def test_a_goal_change_by_an_actor_type_that_is_no_text_is_an_invalid_argument(gw):
    # The actor type goes into the summary only once it is known to be text.
    refused(gw, lambda: gw.producers.goal_changed(MANAGER, "updated", actor_type=Unformattable()),
            r"^unknown actor type")


def test_a_goal_summary_naming_a_long_actor_id_is_cut_to_200_characters(gw):
    actor = "agent:main:" + "a" * 289  # a valid 300-character session key
    sequence = gw.producers.goal_changed(MANAGER, "updated", actor_type="agent", actor_id=actor)
    (event,) = events(gw)
    assert event["sequence"] == sequence
    assert event["summary"] == f"goal updated by {actor}"[:200]
    assert len(event["summary"]) == 200
    assert event["actorId"] == actor  # the id itself is kept whole


# -- compacted ----------------------------------------------------------------------------------


def test_an_op_id_is_refused_under_its_own_name_and_bounded_at_200_characters(gw):
    refused(gw, lambda: gw.producers.compacted(MANAGER, " "), r"^op id must not be empty$")
    refused(gw, lambda: gw.producers.compacted(MANAGER, "o" * 201), r"^op id is 201 characters; at most 200 allowed$")
    sequence = gw.producers.compacted(MANAGER, "o" * 200)
    assert [e["sequence"] for e in events(gw)] == [sequence]


def test_a_compactions_bad_actor_id_is_refused_under_its_own_name(gw):
    refused(gw, lambda: gw.producers.compacted(MANAGER, "op-1", actor_id=""), r"^actor id ")


def test_a_compaction_takes_any_actor_id_a_goal_change_takes(gw):
    """An actor id is a session key (up to 512 characters) for every producer; compacted
    once stopped at 256."""
    long_key = "agent:main:" + "k" * 300
    assert gw.producers.goal_changed(MANAGER, "updated", actor_type="agent", actor_id=long_key) is not None
    assert gw.producers.compacted(MANAGER, "op-long", actor_id=long_key) is not None
    assert events(gw)[-1]["actorId"] == long_key
    too_long = "agent:main:" + "k" * 600
    with pytest.raises(InvalidArgument) as by_goal:
        gw.producers.goal_changed(MANAGER, "updated", actor_type="agent", actor_id=too_long)
    refused(gw, lambda: gw.producers.compacted(MANAGER, "op-2", actor_id=too_long), f"^{by_goal.value}$")


@pytest.mark.parametrize("counts", [{"messages_before": -1}, {"messages_after": "5"}], ids=["negative", "text"])
def test_message_counts_are_refused_under_their_own_name(gw, counts):
    refused(gw, lambda: gw.producers.compacted(MANAGER, "op-1", **counts), r"^message counts must be ")


def test_a_compaction_without_both_counts_says_only_that_history_was_compacted(gw):
    gw.producers.compacted(MANAGER, "op-1")
    gw.producers.compacted(MANAGER, "op-2", messages_before=40)
    gw.producers.compacted(MANAGER, "op-3", messages_after=5)
    gw.producers.compacted(MANAGER, "op-4", messages_before=40, messages_after=5)
    assert [e["summary"] for e in events(gw)] == [
        "history compacted", "history compacted", "history compacted", "history compacted: 40 -> 5 messages"]


def test_a_compaction_carries_its_actor_id_and_its_time(gw):
    gw.producers.compacted(MANAGER, "op-1", actor_type="agent", actor_id=PEER, occurred_at=NOW - HOUR)
    (event,) = events(gw)
    assert (event["actorType"], event["actorId"]) == ("agent", PEER)
    assert event["occurredAt"] == iso_micros(epoch_micros(NOW - HOUR))  # not the clock's NOW


# -- both producers ---------------------------------------------------------------------------


def test_producers_record_on_the_session_of_the_agent_id_given(db_url):
    with Gateway.open(db_url, record_created=False, notify_on_create=False) as gw:
        gw.create_session("worker", agent_id="ops")
        gw.create_session("worker", agent_id="dev")
        goal = gw.producers.goal_changed("worker", "created", actor_type="human", agent_id="dev")
        compaction = gw.producers.compacted("worker", "op-1", agent_id="dev")
        assert [(e["sequence"], e["kind"]) for e in events(gw, "worker", "dev")] == [
            (goal, "goal_changed"), (compaction, "compacted")]
        assert events(gw, "worker", "ops") == []


# -- a refused value too long to print --------------------------------------------------------


@pytest.mark.parametrize("field", ["kind", "actor type", "goal change"])
def test_a_refused_value_too_long_to_print_is_still_an_invalid_argument(gw, field):
    """An int of over 4,300 digits has no repr; the refusal describes it instead of raising
    ValueError while building its message, and a long text is cut in the message."""
    huge = 10**5000
    calls = {
        "kind": lambda value: gw.record_event(MANAGER, value, actor_type="human", summary="x"),
        "actor type": lambda value: gw.record_event(MANAGER, "goal_changed", actor_type=value, summary="x"),
        "goal change": lambda value: gw.producers.goal_changed(MANAGER, value, actor_type="human"),
    }
    refused(gw, lambda: calls[field](huge), f"an int of {huge.bit_length()} bits")
    with pytest.raises(InvalidArgument) as long_text:
        calls[field]("k" * 10_000)
    assert len(str(long_text.value)) < 400
