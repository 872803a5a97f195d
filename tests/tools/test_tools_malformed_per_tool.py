"""At least twenty malformed argument sets for every tool, derived from its published schema.

For each property: values of the wrong JSON type (and a huge string where strings are bounded),
kept only when the property's own schema refuses them, and near-miss spellings of its name;
plus unknown keys and arguments that are not an object. Each call must give an ``invalid_argument`` error result and change nothing.
"""

from __future__ import annotations

import pytest

from sessionstate.services.notice.announce import created_line
from sessionstate.shared.policy import ToolPolicy
from sessionstate.tools.schemas import TOOL_SCHEMAS

from .support import MANAGER, PEER, error_code, full_dump, malformed_sets, open_gateway


@pytest.fixture(scope="module")
def gw(module_db_url):
    gateway, _ = open_gateway(module_db_url, policy=ToolPolicy(visibility="tree"))
    gateway.create_session(MANAGER)
    gateway.create_session(PEER)
    yield gateway
    gateway.runs.stop_runs()
    gateway.close()


@pytest.mark.parametrize("tool", sorted(TOOL_SCHEMAS))
def test_at_least_twenty_malformed_sets_per_tool(tool):
    assert len(malformed_sets(tool)) >= 20, tool


@pytest.mark.parametrize("tool", sorted(TOOL_SCHEMAS))
def test_every_malformed_set_is_an_error_result_and_changes_nothing(gw, tool):
    before = full_dump(gw)
    queued = gw.pending_system_events(MANAGER)
    assert queued == [created_line(PEER, "main", None)]  # R27's announcement, nothing else
    for args in malformed_sets(tool):
        result = gw.call_tool(MANAGER, tool, args)
        assert error_code(result) == "invalid_argument", (tool, repr(args)[:200], result)
    assert full_dump(gw) == before
    assert gw.pending_system_events(MANAGER) == queued and gw.pending_system_events(PEER) == []
