"""Fixtures shared by the session-tool tests, and the malformed argument sets derived from each
tool's published schema (the tool tests and the MCP tests send them)."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from sessionstate import Gateway
from sessionstate.runner import Rule, ScriptedRunner
from sessionstate.shared.policy import ToolPolicy
from sessionstate.tools.schemas import TOOL_SCHEMAS

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


WRONG_VALUES: list[Any] = [None, True, -1, 2**70, 1.5, float("nan"), "", "x" * 100_000, [], [None], {}, {"k": 1}]


NOT_OBJECTS: list[Any] = ["sessionKey", 7, [], [{"sessionKey": PEER}]]


def malformed_sets(tool: str) -> list[Any]:
    schema = TOOL_SCHEMAS[tool]
    sets: list[Any] = [{"zzUnknown": 1}, {"sessionkey": PEER}, {"": None}]
    for name, subschema in schema.get("properties", {}).items():
        # Near-miss names are unknown keys too: a different case, a trailing space.
        sets += [{name.upper(): "x"}, {name + " ": "x"}]
        validator = Draft202012Validator(subschema)
        for value in WRONG_VALUES:
            try:
                refused = not validator.is_valid(value)
            except (TypeError, ValueError, OverflowError):
                refused = True
            if refused:
                sets.append({name: value})
    return sets + NOT_OBJECTS
