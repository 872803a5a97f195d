"""Tests from the second mutmut run over services/notice/{wakes,release,rewake}.py (tests/gateway
as the selection; both backends, a fake clock; nothing is timed). Each pins one behaviour the
suite did not hold:

- a wake window shorter than a second is accepted and honoured (only 0 and below are refused);
"""

from __future__ import annotations

from sessionstate import Gateway

MANAGER, CHILD = "agent:main:main", "agent:main:subagent:child"


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def human(gw: Gateway, key: str) -> None:
    assert gw.record_event(key, "human_direct_message", actor_type="human", summary="hi")


def test_a_window_shorter_than_a_second_is_accepted_and_honoured(db_url):
    clock = Clock()
    woken: list[float] = []
    with Gateway.open(db_url, clock=clock, wake_window=0.5,
                      on_wake=lambda watcher, reason: woken.append(clock.now)) as gw:
        assert gw.ops.wake_window == 0.5
        gw.create_session(MANAGER)
        gw.create_session(CHILD, kind="subagent", parent=MANAGER)
        start = clock.now
        human(gw, CHILD)
        assert gw.drain_system_events(MANAGER)
        clock.now = start + 0.25          # inside the half second: owed
        human(gw, CHILD)
        assert gw.ops.diagnostics().owed_wakes == {MANAGER: start + 0.5}
        assert gw.drain_system_events(MANAGER)
        clock.now = start + 0.75          # past it: at once
        human(gw, CHILD)
        assert woken[0] == start and woken[-1] == start + 0.75
