"""The transcripts service's edges: a human turn into one of two sessions sharing an unqualified
key, what the turn stores, and the arguments refused under their own names (the rest of the
service is in test_transcripts.py)."""

from __future__ import annotations

import json

import pytest

from sessionstate import Gateway, InvalidArgument


@pytest.fixture
def gw(db_url):
    gateway = Gateway.open(db_url, notify_on_create=False)
    gateway.ops.create_session("worker", agent_id="ops")
    gateway.create_session("worker", agent_id="dev")
    try:
        yield gateway
    finally:
        gateway.close()


def test_a_human_turn_lands_in_the_session_of_the_agent_id_given(gw):
    gw.transcripts.human_message("worker", "hello", channel="telegram", sender="u1", agent_id="ops")
    (message,) = gw.transcripts.transcript("worker", agent_id="ops")
    assert (message.session_key, message.agent_id, message.role, message.text, message.actor_type) == (
        "worker", "ops", "user", "hello", "human")
    assert message.provenance == {"kind": "human", "isUser": True, "channel": "telegram"}
    assert gw.transcripts.recent_user_messages("worker", agent_id="ops") == ["hello"]
    ops, dev = gw.registry.session_meta("worker", "ops"), gw.registry.session_meta("worker", "dev")
    assert (ops.last_channel, ops.last_to) == ("telegram", "u1")
    assert (dev.last_channel, dev.last_to) == (None, None)
    assert gw.transcripts.transcript("worker", agent_id="dev") == []
    assert gw.transcripts.recent_user_messages("worker", agent_id="dev") == []


def test_a_human_turn_refuses_its_text_by_name_and_stores_nothing(gw):
    with pytest.raises(InvalidArgument) as refused:
        gw.transcripts.human_message("worker", 5, agent_id="ops")  # type: ignore[arg-type]
    assert str(refused.value) == "text must be a string, not int"
    assert gw.transcripts.transcript("worker", agent_id="ops") == []


@pytest.mark.parametrize("read", ["transcript", "recent_user_messages"])
def test_a_read_refuses_its_limit_by_name(gw, read):
    with pytest.raises(InvalidArgument) as refused:
        if read == "transcript":
            gw.transcripts.transcript("worker", limit=-1, agent_id="ops")
        else:
            gw.transcripts.recent_user_messages("worker", -1, agent_id="ops")
    assert str(refused.value).startswith("limit must be between 0 and ")


def test_a_transcript_read_without_a_limit_gives_the_newest_thousand(gw):
    with gw.transaction():
        for n in range(1001):
            gw.transcripts.append_message("worker", "assistant", f"m{n}", agent_id="ops")
    messages = gw.transcripts.transcript("worker", agent_id="ops")
    assert [m.text for m in messages] == [f"m{n}" for n in range(1, 1001)]


def test_a_message_goes_to_the_session_of_the_agent_id_given_and_counts_no_usage_by_default(gw):
    gw.transcripts.append_message("worker", "assistant", "done", agent_id="dev")
    (message,) = gw.transcripts.transcript("worker", agent_id="dev")
    assert (message.agent_id, message.input_tokens, message.output_tokens) == ("dev", 0, 0)
    assert gw.transcripts.transcript("worker", agent_id="ops") == []


@pytest.mark.parametrize("arguments, message", [
    ({"role": "owner", "text": "x"}, "role must be one of ['user', 'assistant', 'tool', 'system']"),
    ({"role": "user", "text": 5}, "text must be a string, not int"),
    ({"role": "user", "text": "x", "actor_id": "a b"}, "actor id 'a b' contains whitespace or control characters"),
])
def test_a_message_refuses_its_arguments_by_name(gw, arguments, message):
    with pytest.raises(InvalidArgument) as refused:
        gw.transcripts.append_message("worker", agent_id="ops", **arguments)
    assert str(refused.value) == message
    assert gw.transcripts.transcript("worker", agent_id="ops") == []


def test_a_watched_human_turn_records_its_channel_in_the_event(gw):
    # R24: the event is recorded only while someone watches; its summary and payload say
    # whether the turn came through a channel.
    gw.create_session("agent:main:main")
    gw.watch("agent:main:main", "worker", target_agent_id="ops")
    through = gw.transcripts.human_message("worker", "hi", channel="telegram", sender="u1", agent_id="ops")
    direct = gw.transcripts.human_message("worker", "hi again", agent_id="ops")
    assert through is not None and direct == through + 1
    events = [row for row in gw.store.dump()["session_state_events"] if row[3] == "human_direct_message"]
    assert [(row[1], row[2], row[4], row[7]) for row in events] == [
        ("worker", "ops", "human", "human message via telegram"),
        ("worker", "ops", "human", "human message"),
    ]
    assert [json.loads(row[8]) if isinstance(row[8], str) else row[8] for row in events] == [
        {"channel": "telegram", "turns": 1}, {"turns": 1}]


def test_a_long_channel_name_is_cut_from_the_events_summary(gw):
    gw.create_session("agent:main:main")
    gw.watch("agent:main:main", "worker", target_agent_id="ops")
    channel = "c" * 250
    assert gw.transcripts.human_message("worker", "hi", channel=channel, agent_id="ops") is not None
    (event,) = [row for row in gw.store.dump()["session_state_events"] if row[3] == "human_direct_message"]
    assert event[7] == ("human message via " + channel)[:200]
