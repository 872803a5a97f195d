"""What the gateway tests share: the human lines the wake and drain tests record, a read-only
URL of a test database, and a watcher owing one notice behind a plain line (WATCHER watching
the main sessions of two other agents, so no R27 announcement joins its lines); for child runs,
a run's row as sessions_spawn inserts it, a runner that records why it was cancelled, and the
text of a refusal."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from sessionstate import Gateway, notice_text
from sessionstate.errors import InvalidArgument
from sessionstate.runner.base import RunCancelled, RunContext, TurnRequest, TurnResult
from sessionstate.store import RunRecord
from tests.tools.support import MANAGER


def human(gw: Gateway, key: str) -> None:
    assert gw.record_event(key, "human_direct_message", actor_type="human", summary="hi")


def read_only_url(db_url: str) -> str:
    """The same database opened so that this connection cannot write: SQLite's read-only
    mode, or PostgreSQL transactions that default to read-only (as on a standby)."""
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        return f"sqlite:///file:{url.database}?mode=ro&uri=true"
    options = f"{url.query['options']} -cdefault_transaction_read_only=on"
    return url.update_query_dict({"options": options}).render_as_string(hide_password=False)


WATCHER = "agent:w:main"


# Main sessions of other agents: no R27 announcement joins the watcher's lines.
BEHIND, CAUGHT_UP = "agent:behind:main", "agent:calm:main"


PLAIN = "[gateway] a plain line queued before the notice"


def owing_watcher(gw: Gateway) -> str:
    """WATCHER with a plain line and then one notice queued; returns the notice's text."""
    for key in (WATCHER, BEHIND):
        gw.create_session(key)
    gw.watch(WATCHER, BEHIND)
    since = gw.ops.cursor_positions(WATCHER, BEHIND).last_seen
    gw.ops.enqueue_system_event(WATCHER, PLAIN)
    gw.record_event(BEHIND, "human_direct_message", actor_type="human", summary="typed upstream")
    assert gw.pending_system_events(WATCHER) == [PLAIN, notice_text(BEHIND, since)]
    return notice_text(BEHIND, since)


def human_upstream(gw: Gateway, target: str) -> None:
    gw.record_event(target, "human_direct_message", actor_type="human", summary="typed upstream")


# One unqualified key held by two agents: only the agent id tells their sessions apart.
SHARED_KEY = "worker"


def run_record(
    run_id: str, *, child: tuple[str, str], created_at: float, label: str | None = None,
    timeout_seconds: float | None = None, announce_channel: str | None = None, requester: str = MANAGER,
) -> RunRecord:
    """A running run (MANAGER's unless told), as sessions_spawn would insert it (by default no
    label, no timeout, no stored reply route)."""
    return RunRecord(
        run_id=run_id, requester_key=requester, requester_agent_id="main", child_key=child[0],
        child_agent_id=child[1], runtime="subagent", task="t", label=label, model=None,
        thinking=None, thread=False, context="isolated", timeout_seconds=timeout_seconds,
        status="running", outcome=None, result_text=None, announce_channel=announce_channel,
        announce_to=None, steer_count=0, created_at=created_at, ended_at=None,
    )


def refusal(call) -> str:
    with pytest.raises(InvalidArgument) as refused:
        call()
    return str(refused.value)


class CancelRecordingRunner:
    """Works until cancelled, and remembers why it was cancelled."""

    def __init__(self) -> None:
        self.reasons: list[str | None] = []

    def run_turn(self, request: TurnRequest, ctx: RunContext) -> TurnResult:
        if ctx.wait(30):
            self.reasons.append(ctx.reason)
            raise RunCancelled(ctx.reason or "cancelled")
        return TurnResult(None)


def wait_queued(gw: Gateway, count: int) -> None:
    """Polls until ``count`` callers are queued for the group commit; only a hang takes 30 s."""
    ticks = threading.Event()  # never set: its wait is the poll's pause
    for _ in range(30_000):
        if gw.ops.diagnostics().group_queued >= count:
            return
        ticks.wait(0.001)
    raise AssertionError(f"only {gw.ops.diagnostics().group_queued} of {count} callers queued")


def run_queued(gw: Gateway, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` in threads while holding the write turn until all of them queued (one
    batch); each call's result or exception, in order."""
    outcomes: list[Any] = [None] * len(calls)

    def body(index: int) -> None:
        try:
            outcomes[index] = calls[index]()
        except Exception as exc:  # the test looks at it
            outcomes[index] = exc

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(calls))]
    with gw.locked():
        for thread in threads:
            thread.start()
        wait_queued(gw, len(calls))
    for thread in threads:
        thread.join(30.0)  # only a hang reaches it
        assert not thread.is_alive(), "a caller never returned"
    return outcomes


# The recording tests' world (open_watched_child), and the keywords of their human event.
PEER = "agent:main:peer"
CHILD = "agent:main:subagent:child"
EVENT = {"actor_type": "human", "summary": "hello"}
WAIT = 30.0  # a thread's join: only a hang reaches it


def open_watched_child(db_url: str, **options: Any) -> Gateway:
    """MANAGER, PEER and MANAGER's sub-agent CHILD, PEER watching CHILD, at a fixed time. R27's
    announcement of PEER in MANAGER's queue is off: noise for the tests of recording."""
    gateway = Gateway.open(db_url, clock=lambda: 1_800_000_000.0, notify_on_create=False, **options)
    gateway.create_session(MANAGER)
    gateway.create_session(PEER)
    gateway.create_session(CHILD, kind="subagent", parent=MANAGER)
    gateway.watch(PEER, CHILD)
    return gateway
