"""The protocol's options when a gateway is opened: their defaults, the smallest values accepted,
and the messages that refuse the others (also for ``Gateway(store)``, whose R27 switches are
on by default)."""

from __future__ import annotations

import pytest

from sessionstate import Gateway, InvalidArgument

MANAGER = "agent:main:main"
PEER = "agent:main:peer"


def test_the_protocol_options_have_their_documented_defaults(db_url):
    with Gateway.open(db_url) as gw:
        assert (gw.ops.retention_days, gw.ops.max_rows, gw.ops.wake_window) == (30, 50_000, 20.0)
        assert gw.ops.stats == {"append_failures": 0, "events_recorded": 0, "notices_enqueued": 0}
        assert gw.cluster.serves("agent:anyone:main"), "R19: every session is served by default"


def test_a_gateway_made_from_a_store_records_and_announces_new_sessions_by_default(db_url):
    """R27's two switches are on by default for ``Gateway(store)`` too, not only for ``open``."""
    with Gateway.open(db_url) as opened:
        gw = Gateway(opened.store, clock=lambda: 1_800_000_000.0)
        gw.create_session(MANAGER)
        gw.create_session(PEER)
        kinds = [e["kind"] for e in gw.session_status(PEER, changes_since=0)["stateChanges"]["events"]]
        assert kinds == ["created"]
        assert len(gw.pending_system_events(MANAGER)) == 1, "the agent's main session hears of PEER"


def test_a_gateway_made_from_a_store_refuses_an_unknown_option_by_name(db_url):
    with Gateway.open(db_url) as opened:
        with pytest.raises(TypeError) as refused:
            Gateway(opened.store, retention=30)  # type: ignore[call-arg]
        assert str(refused.value) == "unexpected keyword arguments ['retention']"


async def _coroutine_hook(watcher: str, reason: str) -> None: ...


@pytest.mark.parametrize("hook", [5, "print", _coroutine_hook], ids=["number", "string", "coroutine function"])
def test_an_on_wake_hook_that_is_not_a_plain_function_is_refused(db_url, hook):
    with pytest.raises(InvalidArgument) as refused:
        Gateway.open(db_url, on_wake=hook)
    assert refused.value.message == "on_wake must be a plain function (a coroutine function: use AsyncGateway.open)"


@pytest.mark.parametrize("days", [0, -1, True, "30", None], ids=repr)
def test_retention_days_must_be_a_positive_number(db_url, days):
    with pytest.raises(InvalidArgument) as refused:
        Gateway.open(db_url, retention_days=days)
    assert refused.value.message == "retention_days must be a positive number"


@pytest.mark.parametrize("rows", [-1, True, 1.5, "10", None], ids=repr)
def test_max_rows_must_be_a_non_negative_integer(db_url, rows):
    with pytest.raises(InvalidArgument) as refused:
        Gateway.open(db_url, max_rows=rows)
    assert refused.value.message == "max_rows must be a non-negative integer"


def test_the_smallest_accepted_retention_and_row_bound_are_kept(db_url):
    with Gateway.open(db_url, retention_days=0.5, max_rows=0, wake_window=5.0, on_wake=print, serve=["agent:a:*"]) as gw:
        assert (gw.ops.retention_days, gw.ops.max_rows, gw.ops.wake_window) == (0.5, 0, 5.0)
        assert gw.cluster.serves("agent:a:main") and not gw.cluster.serves("agent:b:main")
