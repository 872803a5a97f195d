"""What ``watch`` refuses and how it resolves a key: each refusal names what is wrong (the
watcher key, the target key, an unqualified watcher, a self-watch), and an unqualified target
key is watched under the agent id given."""

from __future__ import annotations

import pytest

from sessionstate import Gateway, notice_text
from sessionstate.errors import InvalidArgument
from tests.gateway.helpers import BEHIND, WATCHER

REFUSED_WATCHES = {
    "watcher key": (("agent:w:with space", BEHIND),
                    "watcher key 'agent:w:with space' contains whitespace or control characters"),
    "target key": ((WATCHER, "agent:t:with space"),
                   "target key 'agent:t:with space' contains whitespace or control characters"),
    "unqualified watcher": (("plain-watcher", BEHIND),
                            "watcher 'plain-watcher' is not agent-qualified (agent:<id>:...); "
                            "it gets no proactive notices"),
    "itself": ((WATCHER, WATCHER), "a session cannot watch itself"),
}


@pytest.mark.parametrize("refusal", sorted(REFUSED_WATCHES))
def test_a_refused_watch_says_why(db_url, refusal):
    (watcher, target), message = REFUSED_WATCHES[refusal]
    with Gateway.open(db_url) as gw:
        for key in (WATCHER, BEHIND):
            gw.create_session(key)
        gw.create_session("plain-watcher", agent_id="w")  # it exists: only being unqualified is refused
        with pytest.raises(InvalidArgument) as refused:
            gw.watch(watcher, target)
        assert str(refused.value) == message


def test_an_unqualified_target_is_watched_under_the_agent_id_given(db_url):
    """Two agents each have a session named "shared": the agent id says which one is meant."""
    with Gateway.open(db_url) as gw:
        gw.create_session(WATCHER)
        for agent in ("a", "b"):
            gw.create_session("shared", agent_id=agent)
        assert gw.watch(WATCHER, "shared", target_agent_id="b") is True
        since = gw.session_status("shared", agent_id="b")["stateVersion"]
        gw.record_event("shared", "human_direct_message", agent_id="a", actor_type="human", summary="to a")
        assert gw.pending_system_events(WATCHER) == []
        gw.record_event("shared", "human_direct_message", agent_id="b", actor_type="human", summary="to b")
        assert gw.pending_system_events(WATCHER) == [notice_text("shared", since)]
