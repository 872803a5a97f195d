"""Property: no tool ever reads or writes a session the caller may not see.

A small world (two agents, a tree, a sandboxed session) under every visibility level and
agent-to-agent switch. For a drawn (caller, target, tool): when the oracle below (written from
the rules, not from ``policy.py``) says the caller may not see the target, the call is an
error result and the database is unchanged; ``sessions_list`` never lists such a target.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings, strategies as st

from sessionstate.runner import Rule
from sessionstate.shared.policy import ToolPolicy

from .support import full_dump, open_gateway

ROOT_A = "agent:a:main"
PEER_A = "agent:a:peer"
CHILD_A = "agent:a:subagent:c1"
GRANDCHILD_A = "agent:a:subagent:c2"
BOXED_A = "agent:a:boxed"
ROOT_B = "agent:b:main"
CHILD_B = "agent:b:subagent:c3"
SESSIONS = (ROOT_A, PEER_A, CHILD_A, GRANDCHILD_A, BOXED_A, ROOT_B, CHILD_B)
PARENT = {CHILD_A: ROOT_A, GRANDCHILD_A: CHILD_A, CHILD_B: ROOT_B}
SANDBOXED = {BOXED_A}
LEVELS = ("self", "tree", "agent", "all")


def agent(key: str) -> str:
    return key.split(":")[1]


def oracle(level: str, a2a: bool, caller: str, target: str) -> bool:
    if caller == target:
        return True
    if caller in SANDBOXED and level in ("agent", "all"):
        level = "tree"
    if agent(caller) != agent(target) and not (level == "all" and a2a):
        return False
    if level == "self":
        return False
    if level == "tree":
        node = PARENT.get(target)
        while node is not None:
            if node == caller:
                return True
            node = PARENT.get(node)
        return False
    return True


_WORLD: dict[str, object] = {}


def world():
    """One database for every example (building it per example would dominate the run)."""
    if not _WORLD:
        url = f"sqlite:///{Path(tempfile.mkdtemp(prefix='visibility-')) / 'state.db'}"
        gw, _ = open_gateway(url, rules=[Rule("*", "reply", ["r"]), Rule("*", "task", ["t"])])
        for key in SESSIONS:
            kind = "subagent" if key in PARENT else "main"
            gw.create_session(key, kind=kind, parent=PARENT.get(key), sandboxed=key in SANDBOXED)
            gw.transcripts.append_message(key, "user", f"hello {key}")
        # No cursors: a watcher's read-only grant (session_status on its watched target) is
        # tested on its own; here visibility alone must decide.
        for parent, children in ((ROOT_A, CHILD_A), (CHILD_A, GRANDCHILD_A), (ROOT_B, CHILD_B)):
            gw.unwatch(parent, children)
        _WORLD["gw"] = gw
    return _WORLD["gw"]


def tool_calls(target: str):
    return [
        ("sessions_history", {"sessionKey": target, "includeTools": True}),
        ("sessions_send", {"sessionKey": target, "message": "hi", "timeoutSeconds": 0, "watch": True}),
        ("session_status", {"sessionKey": target, "changesSince": 0}),
        ("session_status", {"sessionKey": target, "model": "m"}),
        ("subagents", {"action": "kill", "target": target}),
        ("subagents", {"action": "steer", "target": target, "message": "x"}),
    ]


@settings(max_examples=150, deadline=None)
@given(
    level=st.sampled_from(LEVELS),
    a2a=st.booleans(),
    caller=st.sampled_from(SESSIONS),
    target=st.sampled_from(SESSIONS),
    which=st.integers(0, 5),
)
def test_no_tool_touches_an_invisible_session(level, a2a, caller, target, which):
    gw = world()
    gw.configure_tools(ToolPolicy(visibility=level, agent_to_agent=a2a, max_spawn_depth=3))
    listed = gw.call_tool(caller, "sessions_list", {"recentMessages": 3, "includePreview": True})
    assert {row["key"] for row in listed["sessions"]} == {s for s in SESSIONS if oracle(level, a2a, caller, s)}
    if oracle(level, a2a, caller, target):
        return
    tool, args = tool_calls(target)[which]
    before = full_dump(gw)
    result = gw.call_tool(caller, tool, args)
    gw.runs.wait_for_runs()
    assert result["status"] == "error", (level, a2a, caller, target, tool, result)
    assert result["error"]["code"] in {"forbidden", "unknown_session", "tool_not_allowed"}
    assert f"hello {target}" not in repr(result)
    assert full_dump(gw) == before
