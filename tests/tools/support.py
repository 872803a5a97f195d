"""Fixtures shared by the session-tool tests."""

from __future__ import annotations

from typing import Any

from sessionstate import Gateway
from sessionstate.runner import Rule, ScriptedRunner
from sessionstate.shared.policy import ToolPolicy

MANAGER = "agent:main:main"
PEER = "agent:main:peer"
OTHER = "agent:other:main"


def full_dump(gw: Gateway) -> dict[str, Any]:
    """The core dump plus the tool tables: 'nothing changed' means nothing at all."""
    dump: dict[str, Any] = dict(gw.store.dump())
    dump["session_meta"] = gw.store.meta.dump()
    dump["session_messages"] = gw.store.transcripts.dump()
    dump["agent_runs"] = gw.store.runs.dump()
    return dump


def open_gateway(url: str, *, policy: ToolPolicy | None = None, rules: list[Rule] | None = None, **kwargs: Any) -> tuple[Gateway, ScriptedRunner]:
    gw = Gateway.open(url, **kwargs)
    runner = ScriptedRunner(rules)
    gw.configure_tools(policy or ToolPolicy(), runner=runner)
    return gw, runner


def ok(result: dict[str, Any]) -> dict[str, Any]:
    assert result.get("status") != "error", result
    return result


def error_code(result: dict[str, Any]) -> str:
    assert result["status"] == "error", result
    assert isinstance(result["error"]["message"], str) and result["error"]["message"]
    return str(result["error"]["code"])
