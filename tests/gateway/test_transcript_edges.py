"""The transcripts service's edges that mutmut over ``services/transcript_service.py`` found
untested once its ``@locked`` methods were reached (scripts/mutmut_unwrap_locked.py): a human
turn into one of two sessions sharing an unqualified key, what the turn stores, and the
arguments refused under their own names."""

from __future__ import annotations

import pytest

from sessionstate import Gateway, InvalidArgument


@pytest.fixture
def gw(db_url):
    gateway = Gateway.open(db_url, notify_on_create=False)
    gateway.create_session("worker", agent_id="ops")
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
