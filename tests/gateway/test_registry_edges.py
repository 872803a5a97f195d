"""The registry's edges that mutmut over ``services/registry.py`` found untested: an optional
metadata line refused by its field's name, and the bound on the parent chain a session without
a metadata row reads its spawn depth from."""

from __future__ import annotations

import pytest

from sessionstate import Gateway, InvalidArgument
from sessionstate.services.registry import MAX_CHAIN, MAX_ROUTE_LENGTH


@pytest.fixture
def gw(db_url):
    gateway = Gateway.open(db_url, notify_on_create=False)
    try:
        yield gateway
    finally:
        gateway.close()


@pytest.mark.parametrize("field", ["channel", "model", "thinking", "runtime"])
def test_an_optional_line_is_refused_by_its_own_name_and_nothing_is_created(gw, field):
    with pytest.raises(InvalidArgument) as refused:
        gw.create_session("agent:main:main", **{field: "x\ny"})
    assert str(refused.value) == f"{field} must be one line of printable text"
    assert gw.registry.list_sessions() == []


def test_a_route_names_its_optional_recipient_when_it_refuses_it(gw):
    gw.create_session("agent:main:main")
    too_long = "t" * (MAX_ROUTE_LENGTH + 1)
    with pytest.raises(InvalidArgument) as refused:
        gw.registry.set_route("agent:main:main", "telegram", too_long)
    assert str(refused.value) == f"to is {MAX_ROUTE_LENGTH + 1} characters; at most {MAX_ROUTE_LENGTH} allowed"
    assert gw.registry.session_meta("agent:main:main").last_channel is None


def test_the_spawn_depth_read_from_the_parent_chain_stops_at_its_bound(gw):
    # The protocol's create_session (gw.ops) writes no metadata row, so the depth is counted up the chain; the
    # count stops at MAX_CHAIN however long the chain is (a guard against walking for ever).
    keys = [f"agent:main:subagent:s{n}" for n in range(MAX_CHAIN + 3)]
    gw.ops.create_session(keys[0])
    for parent, child in zip(keys, keys[1:]):
        gw.ops.create_session(child, kind="subagent", parent=parent)
    assert gw.registry.session_meta(keys[0]).spawn_depth == 0
    assert gw.registry.session_meta(keys[MAX_CHAIN - 1]).spawn_depth == MAX_CHAIN - 1
    assert gw.registry.session_meta(keys[MAX_CHAIN]).spawn_depth == MAX_CHAIN
    assert gw.registry.session_meta(keys[MAX_CHAIN + 1]).spawn_depth == MAX_CHAIN
    assert gw.registry.session_meta(keys[-1]).spawn_depth == MAX_CHAIN


# From mutmut over services/registry.py with its @locked methods reached
# (scripts/mutmut_unwrap_locked.py): the bounds, messages and agent ids of the metadata setters.

@pytest.mark.parametrize("field", ["thinking", "runtime"])
def test_a_short_metadata_line_is_bounded_at_64_characters(gw, field):
    gw.create_session("agent:main:main", **{field: "x" * 64})
    assert getattr(gw.registry.session_meta("agent:main:main"), field) == "x" * 64
    with pytest.raises(InvalidArgument) as refused:
        gw.create_session("agent:main:other", **{field: "x" * 65})
    assert str(refused.value) == f"{field} is 65 characters; at most 64 allowed"
    assert [s.session_key for s in gw.registry.list_sessions()] == ["agent:main:main"]


def test_sandboxed_is_a_boolean_or_inherited(gw):
    gw.create_session("agent:main:main", sandboxed=True)
    assert gw.registry.session_meta("agent:main:main").sandboxed is True
    with pytest.raises(InvalidArgument) as refused:
        gw.create_session("agent:main:other", sandboxed="yes")
    assert str(refused.value) == "sandboxed must be a boolean"
    assert [s.session_key for s in gw.registry.list_sessions()] == ["agent:main:main"]


def test_a_session_id_is_refused_by_its_own_name(gw):
    with pytest.raises(InvalidArgument) as refused:
        gw.registry.resolve_session_id("an id")
    assert str(refused.value) == "session id 'an id' contains whitespace or control characters"


def test_the_setters_refuse_a_line_by_its_field_name(gw):
    gw.create_session("agent:main:main")
    with pytest.raises(InvalidArgument) as refused:
        gw.registry.set_model_override("agent:main:main", "m\n")
    assert str(refused.value) == "model must be one line of printable text"
    with pytest.raises(InvalidArgument) as refused:
        gw.registry.set_route("agent:main:main", "c\n")
    assert str(refused.value) == "channel must be one line of printable text"
    meta = gw.registry.session_meta("agent:main:main")
    assert meta.model_override is None and meta.last_channel is None


def test_the_setters_write_the_session_of_the_agent_id_given(gw):
    # One unqualified key under two agents: only the agent id tells them apart.
    gw.create_session("worker", agent_id="ops")
    gw.create_session("worker", agent_id="dev")
    gw.registry.set_model_override("worker", "model-ops", agent_id="ops")
    gw.registry.set_route("worker", "telegram", "ops-room", agent_id="ops")
    ops, dev = gw.registry.session_meta("worker", "ops"), gw.registry.session_meta("worker", "dev")
    assert (ops.model_override, ops.last_channel, ops.last_to) == ("model-ops", "telegram", "ops-room")
    assert (dev.model_override, dev.last_channel, dev.last_to) == (None, None, None)


def test_a_registered_child_inherits_its_parents_sandbox_and_counts_its_depth(gw):
    gw.create_session("agent:main:main", sandboxed=True)
    gw.create_session("agent:main:subagent:c", kind="subagent", parent="agent:main:main", run_id="r1")
    gw.create_session("agent:main:subagent:g", kind="subagent", parent="agent:main:subagent:c",
                                 sandboxed=False)
    gw.create_session("agent:main:subagent:h", kind="subagent", parent="agent:main:subagent:g")
    depth_and_sandbox = {key: (meta.spawn_depth, meta.sandboxed) for key, meta in (
        (key, gw.registry.session_meta(key))
        for key in ("agent:main:main", "agent:main:subagent:c", "agent:main:subagent:g", "agent:main:subagent:h"))}
    assert depth_and_sandbox == {
        "agent:main:main": (0, True),
        "agent:main:subagent:c": (1, True),  # inherited
        "agent:main:subagent:g": (2, False),  # given, so not inherited
        "agent:main:subagent:h": (3, False),  # inherited from g
    }
    child = gw.registry.session_record(("agent:main:subagent:c", "main"))
    assert child is not None and (child.parent_key, child.parent_agent_id) == ("agent:main:main", "main")
    # The spawn is recorded in the child's log under the run that made it (R4's dedupe key too).
    spawned = [row for row in gw.store.dump()["session_state_events"] if row[3] == "child_spawned"]
    assert [(row[1], row[5], row[6], row[11]) for row in spawned] == [
        ("agent:main:subagent:c", "agent:main:main", "r1", "child-spawned:r1"),
        ("agent:main:subagent:g", "agent:main:subagent:c", None, None),
        ("agent:main:subagent:h", "agent:main:subagent:g", None, None),
    ]


def test_a_session_registered_without_a_parent_is_not_sandboxed(gw):
    gw.create_session("agent:main:main")
    meta = gw.registry.session_meta("agent:main:main")
    assert (meta.spawn_depth, meta.sandboxed) == (0, False)


def test_register_session_keeps_the_agent_id_given_for_an_unqualified_key(gw):
    gw.create_session("worker", agent_id="ops")
    gw.create_session("worker", agent_id="dev")
    assert sorted((s.session_key, s.agent_id) for s in gw.registry.list_sessions()) == [
        ("worker", "dev"), ("worker", "ops")]
    assert gw.registry.session_meta("worker", "ops").session_id != gw.registry.session_meta("worker", "dev").session_id


def test_an_unqualified_key_registered_without_an_agent_id_gets_its_sessions_agent(gw):
    session_id = gw.create_session("worker", thinking="high", runtime="acp")
    (record,) = gw.registry.list_sessions()
    meta = gw.registry.session_meta("worker")
    assert (meta.session_key, meta.agent_id, meta.session_id) == ("worker", record.agent_id, session_id)
    assert (meta.thinking, meta.runtime) == ("high", "acp")


def test_the_parent_of_a_session_not_there_is_none(gw):
    gw.create_session("agent:main:main")
    assert gw.registry.parent_of(("agent:main:gone", "main")) is None
    assert gw.registry.parent_of(("agent:main:main", "main")) is None
