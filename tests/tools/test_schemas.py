"""Tool argument schemas: malformed calls are refused naming the field; defaults apply."""

from __future__ import annotations

import json
import math

import pytest
from jsonschema import Draft202012Validator

from sessionstate import UnknownTool
from sessionstate.tools.tool_errors import ToolArgumentError
from sessionstate.tools.schemas import (
    TOOL_SCHEMAS,
    export_schemas,
    tool_names,
    validate_tool_args,
)

LONG_KEY = "k" * 513
HUGE_MESSAGE = "m" * 20_001

# (tool, args, the field the error must name)
MALFORMED = [
    # sessions_list
    ("sessions_list", {"kinds": "main"}, "kinds"),
    ("sessions_list", {"kinds": ["main", "nonsense"]}, "kinds[1]"),
    ("sessions_list", {"kinds": []}, "kinds"),
    ("sessions_list", {"kinds": ["cron", "cron"]}, "kinds"),
    ("sessions_list", {"limit": 0}, "limit"),
    ("sessions_list", {"limit": 201}, "limit"),
    ("sessions_list", {"limit": "10"}, "limit"),
    ("sessions_list", {"limit": 2.5}, "limit"),
    ("sessions_list", {"activeMinutes": -5}, "activeMinutes"),
    ("sessions_list", {"activeMinutes": 10**12}, "activeMinutes"),
    ("sessions_list", {"recentMessages": 21}, "recentMessages"),
    ("sessions_list", {"includeTitle": "yes"}, "includeTitle"),
    ("sessions_list", {"label": "ops\u0007"}, "label"),
    ("sessions_list", {"agentId": "main\n"}, "agentId"),
    ("sessions_list", {"search": ""}, "search"),
    ("sessions_list", {"kind": ["main"]}, "kind"),
    # sessions_history
    ("sessions_history", {}, "sessionKey"),
    ("sessions_history", {"sessionKey": "main", "sessionId": "abc"}, "sessionId"),
    ("sessions_history", {"sessionKey": LONG_KEY}, "sessionKey"),
    ("sessions_history", {"sessionKey": 42}, "sessionKey"),
    ("sessions_history", {"sessionId": "s1", "includeTools": 1}, "includeTools"),
    ("sessions_history", {"sessionKey": "main", "limit": -1}, "limit"),
    ("sessions_history", {"sessionKey": "main", "offset": -1}, "offset"),
    ("sessions_history", {"sessionKey": "main", "offset": "2"}, "offset"),
    ("sessions_history", {"sessionKey": "main", "includeTool": True}, "includeTool"),
    # sessions_send
    ("sessions_send", {"message": "hello"}, "sessionKey"),
    ("sessions_send", {"sessionKey": "main"}, "message"),
    ("sessions_send", {"sessionKey": "main", "message": ""}, "message"),
    ("sessions_send", {"sessionKey": "main", "message": " \n\t "}, "message"),
    ("sessions_send", {"sessionKey": "main", "message": HUGE_MESSAGE}, "message"),
    ("sessions_send", {"sessionKey": "main", "message": "a\u0000b"}, "message"),
    ("sessions_send", {"sessionKey": "main", "message": "hi", "timeoutSeconds": -1}, "timeoutSeconds"),
    ("sessions_send", {"sessionKey": "main", "message": "hi", "timeoutSeconds": 601}, "timeoutSeconds"),
    ("sessions_send", {"sessionKey": "main", "message": "hi", "timeoutSeconds": math.nan}, "timeoutSeconds"),
    ("sessions_send", {"sessionKey": "main", "message": "hi", "timeoutSeconds": math.inf}, "timeoutSeconds"),
    ("sessions_send", {"sessionKey": "main", "message": "hi", "timeoutSeconds": True}, "timeoutSeconds"),
    ("sessions_send", {"sessionKey": "main", "message": "hi", "watch": "true"}, "watch"),
    ("sessions_send", {"sessionKey": ["main"], "message": "hi"}, "sessionKey"),
    ("sessions_send", {"sessionKey": "ma\u0085in", "message": "hi"}, "sessionKey"),
    # sessions_spawn
    ("sessions_spawn", {}, "task"),
    ("sessions_spawn", {"task": "a", "message": "b"}, "message"),
    ("sessions_spawn", {"task": "go", "runtime": "docker"}, "runtime"),
    ("sessions_spawn", {"task": "go", "sandbox": True}, "sandbox"),
    ("sessions_spawn", {"task": "go", "sandbox": "off"}, "sandbox"),
    ("sessions_spawn", {"task": "go", "context": "shared"}, "context"),
    ("sessions_spawn", {"task": "go", "thread": "yes"}, "thread"),
    ("sessions_spawn", {"task": "go", "timeoutSeconds": -3}, "timeoutSeconds"),
    ("sessions_spawn", {"task": "go", "model": "x" * 201}, "model"),
    ("sessions_spawn", {"task": "go", "agentId": "other"}, "agentId"),
    ("sessions_spawn", {"task": None}, "task"),
    # sessions_yield
    ("sessions_yield", {"message": 7}, "message"),
    ("sessions_yield", {"reason": "done"}, "reason"),
    # subagents
    ("subagents", {"action": "restart"}, "action"),
    ("subagents", {"action": "kill"}, "target"),
    ("subagents", {"action": "steer", "target": "agent:main:subagent:1"}, "message"),
    ("subagents", {"action": "steer", "message": "focus"}, "target"),
    ("subagents", {"action": "steer", "target": "all", "message": "stop"}, "target"),
    ("subagents", {"action": "kill", "target": "all", "message": "bye"}, "message"),
    ("subagents", {"action": "list", "target": "run-1"}, "target"),
    ("subagents", {"action": "kill", "target": ""}, "target"),
    # session_status
    ("session_status", {"changesSince": -1}, "changesSince"),
    ("session_status", {"changesSince": "3"}, "changesSince"),
    ("session_status", {"changesSince": 1.5}, "changesSince"),
    ("session_status", {"model": ""}, "model"),
    ("session_status", {"sessionKey": "current", "verbose": True}, "verbose"),
    ("session_status", {"sessionKey": "\u001b[31mred"}, "sessionKey"),
]


@pytest.mark.parametrize(("tool", "args", "field"), MALFORMED)
def test_malformed_arguments_are_refused_naming_the_field(
    tool: str, args: dict, field: str
) -> None:
    with pytest.raises(ToolArgumentError) as caught:
        validate_tool_args(tool, args)
    error = caught.value
    assert error.code == "invalid_argument"
    assert field in error.message
    assert error.message.startswith(f"{tool}: ")
    assert len(error.message) < 2000  # a huge argument is not echoed back whole


def test_there_are_at_least_25_malformed_sets_covering_every_tool() -> None:
    assert len(MALFORMED) >= 25
    assert {tool for tool, _, _ in MALFORMED} == set(tool_names())


def test_all_problems_are_reported_together() -> None:
    with pytest.raises(ToolArgumentError) as caught:
        validate_tool_args("sessions_list", {"limit": 0, "kinds": ["bogus"], "extra": 1})
    message = caught.value.message
    for field in ("limit", "kinds[0]", "extra"):
        assert field in message
    assert caught.value.field == "extra"  # fields are reported in sorted order


def test_unknown_key_message_lists_the_allowed_ones() -> None:
    with pytest.raises(ToolArgumentError, match="allowed: .*sessionKey") as caught:
        validate_tool_args("sessions_send", {"sessionKey": "main", "message": "hi", "wait": 5})
    assert caught.value.field == "wait"


@pytest.mark.parametrize("name", ["sessions_kill", "", None, 3, "SESSIONS_LIST"])
def test_unknown_tool(name: object) -> None:
    with pytest.raises(UnknownTool) as caught:
        validate_tool_args(name, {})  # type: ignore[arg-type]
    assert caught.value.code == "unknown_tool"
    assert "sessions_list" in caught.value.message


@pytest.mark.parametrize("args", [[], "sessionKey=main", 5])
def test_arguments_must_be_an_object(args: object) -> None:
    with pytest.raises(ToolArgumentError, match="arguments: expected an object") as caught:
        validate_tool_args("session_status", args)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_argument"


# --- happy paths ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        (
            "sessions_list",
            {},
            {"limit": 50, "includeTitle": False, "includePreview": False, "recentMessages": 0},
        ),
        (
            "sessions_list",
            {"kinds": ["main", "subagent"], "label": "ops", "agentId": "main", "search": "deploy",
             "activeMinutes": 60, "limit": 200, "includeTitle": True, "includePreview": True,
             "recentMessages": 20},
            {"kinds": ["main", "subagent"], "label": "ops", "agentId": "main", "search": "deploy",
             "activeMinutes": 60, "limit": 200, "includeTitle": True, "includePreview": True,
             "recentMessages": 20},
        ),
        ("sessions_list", {"limit": 10.0}, {"limit": 10, "includeTitle": False,
                                             "includePreview": False, "recentMessages": 0}),
        ("sessions_history", {"sessionKey": "main"},
         {"sessionKey": "main", "includeTools": False, "limit": 100, "offset": 0}),
        ("sessions_history", {"sessionId": "0f3c", "includeTools": True, "limit": 1, "offset": 7},
         {"sessionId": "0f3c", "includeTools": True, "limit": 1, "offset": 7}),
        ("sessions_send", {"sessionKey": "agent:ops:main", "message": "status?\nthanks"},
         {"sessionKey": "agent:ops:main", "message": "status?\nthanks", "timeoutSeconds": 30}),
        ("sessions_send", {"sessionKey": "main", "message": "m" * 20_000, "timeoutSeconds": 0,
                           "watch": True},
         {"sessionKey": "main", "message": "m" * 20_000, "timeoutSeconds": 0, "watch": True}),
        ("sessions_send", {"sessionKey": "k" * 512, "message": "hi", "timeoutSeconds": 2.5},
         {"sessionKey": "k" * 512, "message": "hi", "timeoutSeconds": 2.5}),
        ("sessions_spawn", {"task": "summarise the logs"},
         {"task": "summarise the logs", "runtime": "subagent", "thread": False,
          "sandbox": "inherit"}),
        ("sessions_spawn", {"message": "alias", "runtime": "acp", "model": "gpt-x",
                            "thinking": "high", "thread": True, "sandbox": "require",
                            "context": "fork", "label": "worker", "timeoutSeconds": 0},
         {"task": "alias", "runtime": "acp", "model": "gpt-x", "thinking": "high",
          "thread": True, "sandbox": "require", "context": "fork", "label": "worker",
          "timeoutSeconds": 0}),
        ("sessions_yield", {}, {}),
        ("sessions_yield", None, {}),
        ("sessions_yield", {"message": ""}, {"message": ""}),
        ("subagents", {}, {"action": "list"}),
        ("subagents", {"action": "steer", "target": "run-7", "message": "focus on tests"},
         {"action": "steer", "target": "run-7", "message": "focus on tests"}),
        ("subagents", {"action": "kill", "target": "all"}, {"action": "kill", "target": "all"}),
        ("session_status", {}, {}),
        ("session_status", {"sessionKey": "current", "changesSince": 0, "model": "default"},
         {"sessionKey": "current", "changesSince": 0, "model": "default"}),
    ],
)
def test_valid_arguments_come_back_with_defaults(tool: str, args: dict | None, expected: dict) -> None:
    assert validate_tool_args(tool, args) == expected


def test_validation_does_not_mutate_or_alias_the_input() -> None:
    args = {"kinds": ["main"]}
    result = validate_tool_args("sessions_list", args)
    result["kinds"].append("cron")
    assert args == {"kinds": ["main"]}


# --- the published schemas ---------------------------------------------------------------


def test_every_tool_has_a_strict_draft_2020_12_schema() -> None:
    assert tool_names() == [
        "sessions_list", "sessions_history", "sessions_send", "sessions_spawn",
        "sessions_yield", "subagents", "session_status",
    ]
    for name, schema in TOOL_SCHEMAS.items():
        Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["title"] == name
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        for prop, prop_schema in schema["properties"].items():
            assert prop_schema.get("description"), (name, prop)
            if prop_schema.get("type") == "string":
                assert "maxLength" in prop_schema, (name, prop)


def test_export_schemas_round_trips(tmp_path) -> None:
    written = export_schemas(tmp_path / "schemas")
    assert [path.name for path in written] == [f"{name}.json" for name in tool_names()]
    for path in written:
        text = path.read_text("utf-8")
        assert text.endswith("\n")
        assert json.loads(text) == TOOL_SCHEMAS[path.stem]
    again = export_schemas(tmp_path / "schemas")
    assert [p.read_text("utf-8") for p in again] == [p.read_text("utf-8") for p in written]


def test_error_is_a_plain_exception_with_code_and_message() -> None:
    error = ToolArgumentError("limit: must be >= 1")
    assert isinstance(error, Exception)
    assert (error.code, error.message, str(error)) == (
        "invalid_argument", "limit: must be >= 1", "limit: must be >= 1")
