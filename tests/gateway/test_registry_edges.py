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
        gw.registry.register_session("agent:main:main", **{field: "x\ny"})
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
    # Plain create_session writes no metadata row, so the depth is counted up the chain; the
    # count stops at MAX_CHAIN however long the chain is (a guard against walking for ever).
    keys = [f"agent:main:subagent:s{n}" for n in range(MAX_CHAIN + 3)]
    gw.create_session(keys[0])
    for parent, child in zip(keys, keys[1:]):
        gw.create_session(child, kind="subagent", parent=parent)
    assert gw.registry.session_meta(keys[0]).spawn_depth == 0
    assert gw.registry.session_meta(keys[MAX_CHAIN - 1]).spawn_depth == MAX_CHAIN - 1
    assert gw.registry.session_meta(keys[MAX_CHAIN]).spawn_depth == MAX_CHAIN
    assert gw.registry.session_meta(keys[MAX_CHAIN + 1]).spawn_depth == MAX_CHAIN
    assert gw.registry.session_meta(keys[-1]).spawn_depth == MAX_CHAIN
