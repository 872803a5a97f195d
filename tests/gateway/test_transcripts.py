"""What the transcripts service (``services/transcripts.py``) promises: each role's
default actor, a message read back whole, usage given on one side only, a session's first
message creating its metadata row, the largest token counts, the refusals' texts and field
names, bounds reached exactly, a human turn keeping the stored route, the newest user lines,
and the reads the tool layer uses on a resolved session. Its edges with two sessions sharing an
unqualified key are in test_transcript_edges.py."""

from __future__ import annotations

from typing import Any

import pytest

from sessionstate import Gateway, InvalidArgument
from sessionstate.shared.validation import MAX_COUNT

# a token count the session's two counters can still add up without overflowing
LARGEST_TOKEN_COUNT = MAX_COUNT // 2


class Ticks:
    """A clock the test moves by hand, so stored times are known."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ticks() -> Ticks:
    return Ticks(1_800_000_000.0)


@pytest.fixture
def gw(db_url, ticks):
    gateway = Gateway.open(db_url, clock=ticks, notify_on_create=False)
    gateway.ops.create_session("worker", agent_id="ops")
    try:
        yield gateway
    finally:
        gateway.close()


def append(gw: Gateway, role: str = "assistant", text: str = "x", **options: Any) -> int:
    return gw.transcripts.append_message("worker", role, text, agent_id="ops", **options)


def test_each_role_has_its_own_default_actor_and_a_given_actor_wins(gw):
    for role in ("user", "assistant", "tool", "system"):
        append(gw, role, f"a {role} line")
    append(gw, "user", "relayed", actor_type="system", actor_id="relay-bot")
    stored = [(m.role, m.actor_type, m.actor_id) for m in gw.transcripts.transcript("worker", agent_id="ops")]
    assert stored == [
        ("user", "human", None), ("assistant", "agent", None), ("tool", "agent", None),
        ("system", "system", None), ("user", "system", "relay-bot"),
    ]


def test_a_message_reads_back_everything_it_was_appended_with(gw, ticks):
    ticks.now = 1_800_000_123.5
    message_id = append(
        gw, "tool", "result text", actor_id="runner-1", provenance={"kind": "tool", "step": 2},
        tool_calls=[{"name": "search", "args": {"q": "x"}}], tool_result={"hits": [1, 2]},
        input_tokens=11, output_tokens=7,
    )
    (message,) = gw.transcripts.transcript("worker", agent_id="ops")
    assert message.id == message_id
    assert (message.session_key, message.agent_id, message.role, message.text) == ("worker", "ops", "tool", "result text")
    assert (message.actor_type, message.actor_id) == ("agent", "runner-1")
    assert message.provenance == {"kind": "tool", "step": 2}
    assert message.tool_calls == [{"name": "search", "args": {"q": "x"}}]
    assert message.tool_result == {"hits": [1, 2]}
    assert (message.input_tokens, message.output_tokens, message.created_at) == (11, 7, 1_800_000_123.5)


def test_usage_adds_up_even_when_only_one_side_is_given_and_every_message_marks_activity(gw, ticks):
    append(gw, input_tokens=3)
    ticks.now += 5
    append(gw, output_tokens=4)
    meta = gw.registry.session_meta("worker", "ops")
    assert (meta.input_tokens, meta.output_tokens, meta.last_activity_at) == (3, 4, ticks.now)
    ticks.now += 5
    append(gw)  # no usage: the counters stay, the activity time moves
    meta = gw.registry.session_meta("worker", "ops")
    assert (meta.input_tokens, meta.output_tokens, meta.last_activity_at) == (3, 4, ticks.now)


def test_a_sessions_first_message_creates_its_metadata_row(gw):
    assert gw.registry.session_meta("worker", "ops").session_id is None  # defaults: no row yet
    append(gw, "user", "first words")
    meta = gw.registry.session_meta("worker", "ops")
    assert meta.session_id is not None and meta.last_activity_at is not None


def test_the_largest_token_counts_are_taken(gw):
    append(gw, input_tokens=LARGEST_TOKEN_COUNT, output_tokens=LARGEST_TOKEN_COUNT)
    meta = gw.registry.session_meta("worker", "ops")
    assert (meta.input_tokens, meta.output_tokens) == (LARGEST_TOKEN_COUNT, LARGEST_TOKEN_COUNT)


@pytest.mark.parametrize("options, refusal", [
    ({"provenance": ["kind"]}, "provenance must be an object"),
    ({"tool_calls": {"name": "search"}}, "tool_calls must be a list"),
    ({"provenance": {"at": {1}}}, "provenance.at is not JSON (a set)"),
    ({"tool_calls": [{2}]}, "tool_calls[0] is not JSON (a set)"),
    ({"tool_result": {3}}, "tool_result is not JSON (a set)"),
    ({"tool_result": "x" * 999_999}, "tool_result is larger than 1000000 bytes"),
    ({"input_tokens": "3"}, "input_tokens must be an integer, not str"),
    ({"output_tokens": -1}, f"output_tokens must be between 0 and {LARGEST_TOKEN_COUNT}"),
    ({"input_tokens": LARGEST_TOKEN_COUNT + 1}, f"input_tokens must be between 0 and {LARGEST_TOKEN_COUNT}"),
    ({"output_tokens": LARGEST_TOKEN_COUNT + 1}, f"output_tokens must be between 0 and {LARGEST_TOKEN_COUNT}"),
])
def test_a_message_refuses_its_data_by_name_and_stores_nothing(gw, options, refusal):
    with pytest.raises(InvalidArgument) as refused:
        append(gw, **options)
    assert str(refused.value) == refusal
    assert gw.transcripts.transcript("worker", agent_id="ops") == []


def test_a_message_and_its_data_may_reach_their_bounds_exactly(gw):
    # a string counts its length and two quotes against the data bound
    append(gw, "user", "t" * 1_000_000, tool_result="r" * 999_998)
    with pytest.raises(InvalidArgument) as refused:
        append(gw, "user", "t" * 1_000_001)
    assert str(refused.value) == "text is 1000001 characters; at most 1000000 allowed"
    (message,) = gw.transcripts.transcript("worker", agent_id="ops")
    assert (len(message.text), len(message.tool_result)) == (1_000_000, 999_998)


def test_a_human_turn_without_a_channel_keeps_the_stored_route(gw):
    gw.transcripts.human_message("worker", "via chat", channel="telegram", sender="u1", agent_id="ops")
    assert gw.transcripts.human_message("worker", "typed here", sender="u2", agent_id="ops") is None
    meta = gw.registry.session_meta("worker", "ops")
    assert (meta.last_channel, meta.last_to) == ("telegram", "u1")
    texts = [(m.text, m.provenance) for m in gw.transcripts.transcript("worker", agent_id="ops")]
    assert texts == [
        ("via chat", {"kind": "human", "isUser": True, "channel": "telegram"}),
        ("typed here", {"kind": "human", "isUser": True, "channel": None}),
    ]


def test_recent_user_messages_gives_the_newest_user_lines_oldest_first(gw):
    for n in range(12):
        append(gw, "user", f"u{n}")
        append(gw, "assistant", f"a{n}")
    assert gw.transcripts.recent_user_messages("worker", agent_id="ops") == [f"u{n}" for n in range(2, 12)]
    assert gw.transcripts.recent_user_messages("worker", 3, agent_id="ops") == ["u9", "u10", "u11"]


def test_the_tool_layers_reads_of_a_resolved_session(gw, ticks):
    target = ("worker", "ops")
    assert gw.transcripts.stats(target) == (0, None)
    assert gw.transcripts.first_text(target, "user") is None
    for n in range(4):
        ticks.now += 1
        append(gw, "assistant" if n % 2 else "user", f"m{n}")
    assert [m.text for m in gw.transcripts.recent(target, 2)] == ["m2", "m3"]
    assert [m.text for m in gw.transcripts.recent(target, 2, 1)] == ["m1", "m2"]
    assert gw.transcripts.first_text(target, "user") == "m0"
    assert gw.transcripts.first_text(target, "assistant") == "m1"
    assert gw.transcripts.stats(target) == (4, ticks.now)
