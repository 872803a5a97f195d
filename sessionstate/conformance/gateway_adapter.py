"""This project's own Gateway behind the adapter protocol (docs/conformance.md).

``python -m sessionstate.conformance.gateway_adapter`` serves one gateway on a SQLite file in a
temporary directory, with the kit's clock. ``--fault NAME`` plants a known defect, so that a
test can show the kit finds it (a probe): ``queue-survives-reset`` keeps a reset watcher's
queued notices (R14), ``drop-follow-up`` loses the follow-up notice a drain opens (R8).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..errors import UnknownSession
from ..facade.gateway import Gateway
from ..shared.keys import resolve_agent_id
from ..shared.validation import CHANGES_PAGE
from .protocol import serve, timed_steps

FAULTS = ("queue-survives-reset", "drop-follow-up")


class GatewayAdapter:
    def __init__(self, fault: str | None = None) -> None:
        self.fault = fault
        self.now = 1_700_000_000.0
        self.dir: Path | None = None
        self.gw: Gateway | None = None
        self.woken: list[tuple[str, str]] = []

    def _open(self) -> Gateway:
        assert self.dir is not None
        return Gateway.open(
            str(self.dir / "state.sqlite"), clock=lambda: self.now,
            on_wake=lambda watcher, reason: self.woken.append((watcher, reason)),
            auto_prune=False,  # the kit's model prunes only as its `prune` step (R30 off)
        )

    def fresh(self) -> None:
        self.close()
        self.dir = Path(tempfile.mkdtemp(prefix="sessionstate-conformance-"))
        self.woken = []
        self.gw = self._open()

    def close(self) -> None:
        if self.gw is not None:
            self.gw.close()
            self.gw = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def handle(self, op: str, r: dict[str, Any]) -> dict[str, Any]:
        if op == "hello":
            return {"implementation": "sessionstate Gateway" + (f" (fault {self.fault})" if self.fault else ""),
                    "recordsCreated": True, "announces": True}
        if op == "fresh":
            self.now = float(r.get("now", self.now))
            self.fresh()
            return {}
        gw = self.gw
        if gw is None:
            raise RuntimeError("no implementation: send fresh first")
        if op == "clock":
            self.now = float(r["now"])
            gw.ops.fire_due_wakes()
            return {}
        if op == "create":
            gw.create_session(r["key"])
            return {}
        if op == "spawn":
            gw.create_session(r["child"], kind="subagent", parent=r["parent"], run_id=r.get("runId"))
            return {}
        if op == "record":
            seq = gw.record_event(r["session"], r["kind"], actor_type=r["actorType"], summary=r.get("summary", ""),
                                  actor_id=r.get("actorId"), dedupe_key=r.get("dedupeKey"))
            return {"sequence": seq}
        if op == "human":
            return {"sequence": gw.transcripts.human_message(r["session"], r.get("text", "hello"))}
        if op == "watch":
            return {"watched": bool(gw.watch(r["watcher"], r["target"]))}
        if op == "drain":
            lines = gw.drain_system_events(r["watcher"])
            if self.fault == "drop-follow-up":
                gw.ops.forget_queued(r["watcher"])
            return {"lines": lines}
        if op == "pending":
            return {"lines": gw.pending_system_events(r["watcher"])}
        if op == "changesSince":
            # The gateway's state read (head, event page, earliest, gap): the level of the
            # reference's listSessionStateEventsSince with getSessionStateVersion.
            return _changes(gw.session_status(r["session"], changes_since=int(r["since"])))
        if op == "changesPage":
            # This project only (the side-by-side's changesSince row): the signal log's own read
            # (head, earliest held sequence, event page) under the gateway's lock, the level of
            # the reference's listSessionStateEventsSince with getSessionStateVersion, without
            # the agent-facing event objects session_status builds.
            return _page(gw, r["session"], int(r["since"]))
        if op == "statusTool":
            # This project only (the side-by-side's tool row): the agent-facing tool call.
            answer = gw.call_tool(r["caller"], "session_status", {"sessionKey": r["session"],
                                                                   "changesSince": int(r["since"])})
            if answer.get("status") == "error":
                raise RuntimeError(f"session_status failed: {answer['error']}")
            return _changes(answer)
        if op == "version":
            return {"stateVersion": gw.ops.state_version(r["session"])}
        if op == "reset":
            kept = gw.pending_system_events(r["session"]) if self.fault == "queue-survives-reset" else []
            gw.ops.reset_session(r["session"])
            for line in kept:
                gw.ops.enqueue_system_event(r["session"], line)
            return {}
        if op == "delete":
            gw.ops.delete_session(r["session"])
            return {}
        if op == "prune":
            return dict(gw.prune())
        if op == "restart":
            gw.close()
            self.gw = self._open()
            return {}
        if op == "bench":
            return timed_steps(self.handle, r["steps"])
        if op == "wakes":
            woken, self.woken = self.woken, []
            return {"wakes": [list(w) for w in woken]}
        raise ValueError(f"unknown op {op!r}")


def _page(gw: Gateway, key: str, since: int) -> dict[str, Any]:
    agent_id = resolve_agent_id(key, None)
    if agent_id is None:
        raise ValueError(f"changesPage needs an agent-qualified key, not {key!r}")
    with gw.store.lock:
        page = gw.store.changes_page(key, agent_id, since, CHANGES_PAGE + 1)
    if page is None:
        raise UnknownSession(f"unknown session {key!r}")
    rows = page.events
    return {"stateVersion": page.last_sequence, "historyGap": page.history_gap(since),
            "truncated": len(rows) > CHANGES_PAGE,
            "events": [{"sequence": row[0], "kind": row[1], "actorType": row[2]} for row in rows[:CHANGES_PAGE]]}


def _changes(status: dict[str, Any]) -> dict[str, Any]:
    changes = status["stateChanges"]
    return {"stateVersion": status["stateVersion"], "historyGap": changes["historyGap"],
            "truncated": changes.get("truncated", False),
            "events": [{"sequence": e["sequence"], "kind": e["kind"], "actorType": e["actorType"]}
                       for e in changes["events"]]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sessionstate.conformance.gateway_adapter")
    parser.add_argument("--fault", choices=FAULTS, help="plant a known defect (a probe for the kit)")
    args = parser.parse_args(argv)
    adapter = GatewayAdapter(args.fault)
    # Answers go to a private copy of stdout; anything else printed goes to stderr.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    try:
        return serve(adapter.handle, sys.stdin, answers)
    finally:
        adapter.close()


if __name__ == "__main__":
    raise SystemExit(main())
