"""JSON Schemas for the arguments of the seven agent-facing session tools.

Agents are handed these schemas verbatim, and every call is validated against them
before the gateway looks at a single argument, so the schemas are the contract:

* draft 2020-12, ``additionalProperties: false`` everywhere (a misspelt argument is
  an error, never silently ignored), camelCase names as in the reference gateway;
* every string is bounded; session keys, ids, labels and names refuse control
  characters (C0, DEL, C1) so they cannot smuggle newlines into prompts or logs;
  free-text messages may contain tabs and newlines but no other control characters;
* conditional rules (``sessionKey`` xor ``sessionId``, ``subagents`` target and
  message per action) are expressed in the schema itself, so an agent reading the
  schema sees them too. Where a rule needs a clearer error than the generic one, the
  subschema carries an ``errorMessage`` (the ajv-errors convention; validators that
  do not know the keyword ignore it).

``validate_tool_args(name, args)`` returns a new dict with schema defaults filled in
(top-level only: the schemas are flat) or raises ``ToolArgumentError`` whose message
names every offending field (``UnknownTool`` for a name that is not a tool).

Argument names chosen here where the reference is silent (documented per property):
``sessions_list.includeTitle`` / ``includePreview`` / ``recentMessages``,
``sessions_history.limit`` / ``offset`` (paging back from the newest message, with
``nextOffset`` in the result), ``sessions_spawn.timeoutSeconds`` (0 = no run timeout),
and ``sessions_spawn.message`` as an accepted alias of ``task`` (normalised to
``task`` in the returned arguments).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from ..errors import InvalidArgument, UnknownTool
from .tool_errors import ToolArgumentError
from ..shared.validation import check_json

__all__ = [
    "KEY_MAX_CHARS",
    "MESSAGE_MAX_CHARS",
    "SESSION_KINDS",
    "TOOL_SCHEMAS",
    "export_schemas",
    "tool_names",
    "validate_tool_args",
]

DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
KEY_MAX_CHARS: Final = 512
MESSAGE_MAX_CHARS: Final = 20_000
# All arguments of one call together, estimated as compact JSON: far above what the schemas
# allow, so it only stops the walk over an absurd value early.
MAX_ARGUMENT_BYTES: Final = 1_000_000
SESSION_KINDS: Final = ("main", "group", "cron", "hook", "node", "subagent")

# C0 controls, DEL and C1 controls. Checked with ``not``+``pattern`` rather than an
# anchored allow-list because Python's ``$`` also matches before a trailing newline.
_CONTROL_CHARS: Final = "[\\u0000-\\u001f\\u007f-\\u009f]"
# The same, minus tab, LF and CR: what free text may contain.
_TEXT_CONTROL_CHARS: Final = "[\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f]"


def _name(description: str, max_length: int = KEY_MAX_CHARS) -> dict[str, Any]:
    """A single-line identifier-ish string: key, id, label, model name."""
    return {
        "type": "string",
        "description": description,
        "minLength": 1,
        "maxLength": max_length,
        "pattern": "\\S",
        "not": {"pattern": _CONTROL_CHARS},
        "errorMessage": "must not contain control characters",
    }


def _text(description: str, *, required_content: bool = True) -> dict[str, Any]:
    """Free text (a message or task): newlines allowed, bounded, not blank."""
    schema: dict[str, Any] = {
        "type": "string",
        "description": description,
        "maxLength": MESSAGE_MAX_CHARS,
        "not": {"pattern": _TEXT_CONTROL_CHARS},
        "errorMessage": "must not contain control characters other than tab and newline",
    }
    if required_content:
        schema["minLength"] = 1
        schema["pattern"] = "\\S"
    return schema


def _flag(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description, "default": False}


_FORBIDDEN: Final[dict[str, Any]] = {"not": {}}


def _tool(title: str, description: str, properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "$schema": DIALECT,
        "$id": f"urn:sessionstate:tool:{title}:args",
        "title": title,
        "description": description,
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
        **extra,
    }


_SESSION_KEY_DESC = (
    "A session key such as 'main' or 'agent:<agentId>:<rest>', as returned by sessions_list."
)

TOOL_SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    "sessions_list": _tool(
        "sessions_list",
        "List the sessions you may see, newest activity first, with optional filters.",
        {
            "kinds": {
                "type": "array",
                "description": "Only sessions of these kinds.",
                "items": {"enum": list(SESSION_KINDS)},
                "minItems": 1,
                "maxItems": len(SESSION_KINDS),
                "uniqueItems": True,
            },
            "label": _name("Only sessions with exactly this label.", 128),
            "agentId": _name("Only sessions of exactly this agent.", 128),
            "search": _name("Case-insensitive text to look for in key, label and title.", 256),
            "activeMinutes": {
                "type": "integer",
                "description": "Only sessions active within this many minutes (at most a year).",
                "minimum": 1,
                "maximum": 525_600,
            },
            "limit": {
                "type": "integer",
                "description": "Maximum number of rows.",
                "minimum": 1,
                "maximum": 200,
                "default": 50,
            },
            "includeTitle": _flag("Add a derived title to each row."),
            "includePreview": _flag("Add a snippet of each session's last message."),
            "recentMessages": {
                "type": "integer",
                "description": "Add up to this many recent (sanitised) messages per row; 0 = none.",
                "minimum": 0,
                "maximum": 20,
                "default": 0,
            },
        },
    ),
    "sessions_history": _tool(
        "sessions_history",
        "Read one session's transcript: bounded, sanitised, tool results only on request.",
        {
            "sessionKey": _name(_SESSION_KEY_DESC),
            "sessionId": _name("A session id from an earlier sessions_list."),
            "includeTools": _flag("Include tool calls and tool results."),
            "limit": {
                "type": "integer",
                "description": "Read at most this many of the newest messages (after offset).",
                "minimum": 1,
                "maximum": 1000,
                "default": 100,
            },
            "offset": {
                "type": "integer",
                "description": "Skip this many of the newest messages first; pass the last result's nextOffset"
                " to read the page before it.",
                "minimum": 0,
                "maximum": 1_000_000_000,
                "default": 0,
            },
        },
        oneOf=[{"required": ["sessionKey"]}, {"required": ["sessionId"]}],
    ),
    "sessions_send": _tool(
        "sessions_send",
        "Send a message to another session; optionally wait for its reply.",
        {
            "sessionKey": _name(
                _SESSION_KEY_DESC + " Thread keys (ending in ':thread:<id>') are refused."
            ),
            "message": _text("The message; delivered as inter-session data, not as a user turn."),
            "timeoutSeconds": {
                "type": "number",
                "description": "0 = enqueue and return at once; > 0 = wait this long for the reply.",
                "minimum": 0,
                "maximum": 600,
                "default": 30,
            },
            # No schema default: the result reports ``watched`` only when ``watch`` was given.
            "watch": {
                "type": "boolean",
                "description": (
                    "true: become a watcher of the receiving session (stale notices). When given"
                    " (true or false) the result reports 'watched'; omitted means false."
                ),
            },
        },
        required=["sessionKey", "message"],
    ),
    "sessions_spawn": _tool(
        "sessions_spawn",
        "Start an isolated sub-agent session for background work; returns at once.",
        {
            "task": _text("What the child should do."),
            "message": _text("Alias of 'task'."),
            "runtime": {
                "enum": ["subagent", "acp"],
                "description": "'subagent' (native) or 'acp' (external harness agent).",
                "default": "subagent",
            },
            "model": _name("Model override for the child.", 200),
            "thinking": _name("Thinking-level override for the child.", 64),
            "thread": _flag("Bind the spawn to a chat thread."),
            "sandbox": {
                "enum": ["require", "inherit"],
                "description": "'require' forces a sandbox on the child; 'inherit' keeps yours.",
                "default": "inherit",
            },
            "context": {
                "enum": ["fork", "isolated"],
                "description": (
                    "'fork' gives the child your transcript; 'isolated' a clean start. "
                    "Omitted: isolated, except thread-bound native children (fork)."
                ),
            },
            "label": _name("A label for the child session.", 128),
            "timeoutSeconds": {
                "type": "number",
                "description": "Run timeout for the child in seconds; 0 = none.",
                "minimum": 0,
                "maximum": 86_400,
            },
        },
        oneOf=[
            {"required": ["task"]},
            {"required": ["message"]},
        ],
    ),
    "sessions_yield": _tool(
        "sessions_yield",
        "End your turn now so that the next sub-agent result becomes your next message.",
        {"message": _text("Optional text to leave as the turn's reply.", required_content=False)},
    ),
    "subagents": _tool(
        "subagents",
        "List, steer or kill the sub-agents this session spawned.",
        {
            "action": {
                "enum": ["list", "steer", "kill"],
                "description": "What to do.",
                "default": "list",
            },
            "target": _name("A child session key or run id; 'all' (kill only) for every child."),
            "message": _text("Follow-up guidance for the child (steer only)."),
        },
        allOf=[
            {
                "if": {"properties": {"action": {"const": "list"}}},
                "then": {
                    "properties": {
                        "target": {**_FORBIDDEN, "errorMessage": "not allowed when action is 'list'"},
                        "message": {**_FORBIDDEN, "errorMessage": "only allowed when action is 'steer'"},
                    }
                },
            },
            {
                "if": {"properties": {"action": {"const": "steer"}}, "required": ["action"]},
                "then": {
                    "required": ["target", "message"],
                    "properties": {
                        "target": {
                            "not": {"const": "all"},
                            "errorMessage": "'all' is only valid when action is 'kill'",
                        }
                    },
                },
            },
            {
                "if": {"properties": {"action": {"const": "kill"}}, "required": ["action"]},
                "then": {
                    "required": ["target"],
                    "properties": {
                        "message": {**_FORBIDDEN, "errorMessage": "only allowed when action is 'steer'"}
                    },
                },
            },
        ],
    ),
    "session_status": _tool(
        "session_status",
        "A /status card for your own or another visible session; optionally set its model.",
        {
            "sessionKey": _name(_SESSION_KEY_DESC + " 'current' (or omitted) means your own session."),
            "changesSince": {
                "type": "integer",
                "description": "Also return the state changes after this stateVersion.",
                "minimum": 0,
                "maximum": 2**53 - 1,
            },
            "model": _name("Set this session's model override; 'default' clears it.", 200),
        },
    ),
}

# Built once: validator construction walks the schema, and check_schema at import
# means a broken schema fails the first import rather than the first agent call.
_VALIDATORS: Final[dict[str, Draft202012Validator]] = {}
for _name_, _schema in TOOL_SCHEMAS.items():
    Draft202012Validator.check_schema(_schema)
    _VALIDATORS[_name_] = Draft202012Validator(_schema)
del _name_, _schema

_JSON_TYPES: Final = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (tuple, "array"),
    (dict, "object"),
    (type(None), "null"),
)


def tool_names() -> list[str]:
    """The seven tool names, in a stable (documentation) order."""
    return list(TOOL_SCHEMAS)


def validate_tool_args(name: str, args: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate ``args`` for tool ``name``; return a fresh dict with defaults applied.

    ``None`` counts as ``{}`` (a call without arguments). Integral floats such as
    ``5.0`` are accepted where an integer is expected (JSON does not distinguish
    them) and returned as ``int``; NaN and infinities are refused. For
    ``sessions_spawn`` a ``message`` given instead of ``task`` is returned as ``task``.

    Raises ``UnknownTool`` for an unknown tool and ``ToolArgumentError`` naming every
    offending field.
    """
    validator = _VALIDATORS.get(name) if isinstance(name, str) else None
    if validator is None:
        raise UnknownTool(f"unknown tool {name!r}; known tools: {', '.join(TOOL_SCHEMAS)}")
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise ToolArgumentError(
            f"{name}: arguments: expected an object, got {_json_type(args)}",
            field="arguments",
        )
    args = dict(args)
    try:
        # Before the validator, deepcopy and _non_finite walk it recursively: refuses lone
        # surrogates in any string, non-JSON values and nesting deeper than MAX_JSON_DEPTH.
        check_json(args, "", max_bytes=MAX_ARGUMENT_BYTES)
    except InvalidArgument as exc:
        raise ToolArgumentError(f"{name}: {exc.message}") from None
    problems = _problems(validator, args)
    if not problems:
        problems = _non_finite(args)
    if problems:
        fields = [field for field, _ in problems]
        detail = "; ".join(f"{field}: {text}" for field, text in problems)
        raise ToolArgumentError(f"{name}: {detail}", field=fields[0])

    result = copy.deepcopy(args)
    schema = TOOL_SCHEMAS[name]
    for prop, prop_schema in schema["properties"].items():
        if prop not in result and "default" in prop_schema:
            result[prop] = copy.deepcopy(prop_schema["default"])
        elif prop_schema.get("type") == "integer" and isinstance(result.get(prop), float):
            result[prop] = int(result[prop])
    if name == "sessions_spawn" and "message" in result:
        result["task"] = result.pop("message")
    return result


def export_schemas(directory: str | Path) -> list[Path]:
    """Write ``<tool>.json`` for every tool into ``directory`` (created if needed).

    Output is deterministic (sorted keys, two-space indent, trailing newline) so the
    files can be committed and diffed. Returns the written paths in tool order.
    """
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in TOOL_SCHEMAS.items():
        path = target / f"{name}.json"
        path.write_text(json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n", "utf-8")
        written.append(path)
    return written


# --- error messages -----------------------------------------------------------


def _problems(validator: Draft202012Validator, args: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, message) for every violation, sorted by field, without duplicates. A field of the
    wrong type gets that message alone: the rules for its values (a string's ``not pattern``,
    say) do not apply to a value of another type, and reporting them would say something false."""
    seen: dict[tuple[str, str], None] = {}
    mistyped: set[str] = set()
    for error in validator.iter_errors(args):
        for item in _describe(error):
            seen.setdefault(item, None)
            if error.validator == "type":
                mistyped.add(item[0])
    kept = [item for item in seen if item[0] not in mistyped or item[1].startswith("expected ")]
    return sorted(kept, key=lambda item: item[0])


def _describe(error: ValidationError) -> Iterable[tuple[str, str]]:
    path = _path(error.absolute_path)
    kind = error.validator
    value: Any = error.validator_value
    instance = error.instance
    custom = error.schema.get("errorMessage") if isinstance(error.schema, dict) else None

    if kind == "required":
        for missing in value:
            if isinstance(instance, dict) and missing not in instance:
                yield _join(path, missing), "required field is missing"
    elif kind == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        for extra in sorted(set(instance) - set(allowed), key=str):
            name = str(extra) if len(str(extra)) <= 64 else str(extra)[:61] + "..."
            yield _join(path, name), f"unknown field (allowed: {', '.join(allowed)})"
    elif kind == "oneOf" and all(set(branch) == {"required"} for branch in value):
        names = [name for branch in value for name in branch["required"]]
        given = [name for name in names if isinstance(instance, dict) and name in instance]
        quoted = " or ".join(repr(name) for name in names)
        verdict = "exactly one of" if given else "one of"
        yield "/".join(names), f"{verdict} {quoted} is required" + (
            f" (got {' and '.join(given)})" if given else ""
        )
    elif kind == "type":
        yield path or "arguments", f"expected {_type_phrase(value)}, got {_json_type(instance)}"
    elif kind == "enum":
        options = ", ".join(json.dumps(option) for option in value)
        yield path, f"must be one of {options}, got {_short(instance)}"
    elif kind == "minLength" and value == 1:
        yield path, "must not be empty"
    elif kind == "pattern" and value == "\\S" and instance == "":
        return  # already reported as empty
    elif kind in ("minLength", "maxLength"):
        bound = "at least" if kind == "minLength" else "at most"
        yield path, f"must be {bound} {value} characters long (got {len(instance)})"
    elif kind == "pattern" and value == "\\S":
        yield path, "must not be blank"
    elif kind in ("minimum", "maximum"):
        relation = ">=" if kind == "minimum" else "<="
        yield path, f"must be {relation} {value}, got {_short(instance)}"
    elif kind == "minItems" and value == 1:
        yield path, "must not be empty"
    elif kind in ("minItems", "maxItems"):
        bound = "at least" if kind == "minItems" else "at most"
        yield path, f"must have {bound} {value} items (got {len(instance)})"
    elif kind == "uniqueItems":
        yield path, "must not contain duplicates"
    elif custom:
        yield path or "arguments", custom
    else:  # a rule without a tailored message: jsonschema's own wording
        yield path or "arguments", error.message


def _non_finite(value: Any, path: str = "") -> list[tuple[str, str]]:
    # JSON has no NaN/Infinity, and comparisons with NaN are always false, so the
    # schema's minimum/maximum would let NaN through.
    if isinstance(value, float) and not math.isfinite(value):
        return [(path or "arguments", "must be a finite number")]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _non_finite(item, _join(path, str(key)))]
    if isinstance(value, (list, tuple)):
        return [p for index, item in enumerate(value) for p in _non_finite(item, f"{path}[{index}]")]
    return []


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text = f"{text}[{part}]" if isinstance(part, int) else _join(text, str(part))
    return text


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _type_phrase(value: Any) -> str:
    names = [value] if isinstance(value, str) else list(value)
    return " or ".join(("an " if name[0] in "aeiou" else "a ") + name for name in names)


def _json_type(value: Any) -> str:
    for python_type, json_name in _JSON_TYPES:
        if isinstance(value, python_type):
            return json_name
    return type(value).__name__


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."
