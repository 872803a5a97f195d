"""Dropping self-echoes from provider activities, bursts included."""

from __future__ import annotations

from sessionstate.upstream.echo import drop_self_echoes
from sessionstate.upstream.providers.base import UpstreamActivity


def test_drop_self_echoes_keeps_human_turns_and_recounts_bursts() -> None:
    sent = ["status?", "run the build"]
    single_echo = UpstreamActivity("a", None, "Status?")
    single_human = UpstreamActivity("b", None, "who broke main?")
    burst = UpstreamActivity(
        "burst:c..e", None, "run the build", turns=3, burst_overflow=True,
        burst_texts=("hello", "run  the build", "are you there"),
    )
    all_echo_burst = UpstreamActivity(
        "burst:f..g", None, "status?", turns=2, burst_overflow=True,
        burst_texts=("status?", "STATUS?"),
    )
    kept = drop_self_echoes([single_echo, single_human, burst, all_echo_burst], sent)
    assert [activity.activity_id for activity in kept] == ["b", "burst:c..e"]
    assert kept[1].turns == 2
    assert kept[1].burst_texts == ("hello", "are you there")
    assert kept[1].text == "are you there"


def test_truncated_activity_text_is_compared_by_prefix() -> None:
    sent = ["x" * 5000]
    prefix = UpstreamActivity("a", None, "X" * 1024, text_truncated=True)
    assert drop_self_echoes([prefix], sent) == []
    assert drop_self_echoes([prefix], ["x" * 100]) == [prefix]
