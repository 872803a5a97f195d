"""Argument checks shared by the Python API and the tools: bad input raises, nothing changes.

Every string the package accepts passes ``refuse_surrogates`` (directly, or through
``check_line``/``check_text``/``check_json``/``keys.check_key``): a lone surrogate
(``json.loads('"\\ud800"')`` makes one) cannot be encoded as UTF-8, so SQLite, JSON output
and logs would fail on it later, after part of a call had run. Nested JSON values are walked
without recursion and bounded in depth and size before anything serialises them.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..errors import InvalidArgument
from ..statemachine import ACTOR_TYPES, KNOWN_KINDS, RUN_FAILED_OUTCOMES

MAX_SUMMARY_LENGTH = 200
MAX_LABEL_LENGTH = 200
MAX_PAYLOAD_BYTES = 4096
MAX_ID_LENGTH = 256
MAX_SYSTEM_EVENT_CHARS = 20_000
# Nested JSON (event payloads, transcript provenance and tool data, tool arguments): at most
# this many levels of objects/arrays (spec section 12).
MAX_JSON_DEPTH = 16
# Integers in stored JSON are 64-bit: larger ones do not survive other readers.
MAX_JSON_INT = 2**63 - 1
# Counters and limits given as integers (token counts, row limits): SQLite INTEGER range.
MAX_COUNT = 2**63 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
SESSION_KINDS = ("main", "group", "cron", "hook", "node", "subagent", "acp")
# The payload fields a reconciling agent may see (spec section 10).
PAYLOAD_FIELDS = ("outcome", "channel", "turns", "provider", "burstOverflow")


SHOWN_CHARS = 200
"""How much of a refused value a message repeats."""


def shown(value: object) -> str:
    """``repr(value)`` for a refusal's message, cut at ``SHOWN_CHARS``; an int too long for
    ``repr`` (over 4,300 digits) is described, so the refusal is raised and not a ValueError."""
    try:
        text = repr(value)
    except ValueError:
        if isinstance(value, int):
            return f"an int of {value.bit_length()} bits"
        raise
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"


def check_kind(kind: object) -> str:
    if not isinstance(kind, str) or kind not in KNOWN_KINDS:
        raise InvalidArgument(f"unknown event kind {shown(kind)}; expected one of {sorted(KNOWN_KINDS)}")
    return kind


def check_actor_type(actor_type: object) -> str:
    if not isinstance(actor_type, str) or actor_type not in ACTOR_TYPES:
        raise InvalidArgument(f"unknown actor type {shown(actor_type)}; expected one of {list(ACTOR_TYPES)}")
    return actor_type


def refuse_surrogates(value: str, field: str) -> str:
    """``value`` unless it holds a lone surrogate (U+D800..U+DFFF): not valid Unicode text."""
    if not value.isascii():
        found = _SURROGATE.search(value)
        if found is not None:
            raise InvalidArgument(
                f"{field} holds a lone surrogate (U+{ord(found.group()):04X} at index {found.start()});"
                " text must be valid Unicode"
            )
    return value


def check_line(value: object, field: str, max_length: int) -> str:
    """A non-empty, single-line, printable string of bounded length."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{field} must be a string, not {type(value).__name__}")
    if not value.strip():
        raise InvalidArgument(f"{field} must not be empty")
    if len(value) > max_length:
        raise InvalidArgument(f"{field} is {len(value)} characters; at most {max_length} allowed")
    # One C-level pass; same characters as a per-character test. Surrogates are not
    # printable, so valid lines never need the slower surrogate search.
    if not value.isprintable():
        refuse_surrogates(value, field)  # the more precise message when that is the cause
        raise InvalidArgument(f"{field} must be one line of printable text")
    return value


def check_text(value: object, field: str, max_length: int, *, allow_empty: bool = True) -> str:
    """Free text (messages, tasks, replies, system lines): any lines, bounded, valid Unicode."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{field} must be a string, not {type(value).__name__}")
    if not allow_empty and not value:
        raise InvalidArgument(f"{field} must not be empty")
    if len(value) > max_length:
        raise InvalidArgument(f"{field} is {len(value)} characters; at most {max_length} allowed")
    return refuse_surrogates(value, field)


def check_optional_text(value: object, field: str, max_length: int) -> str | None:
    return None if value is None else check_text(value, field, max_length)


def check_count(value: object, field: str, maximum: int = MAX_COUNT) -> int:
    """A non-negative integer (not a bool) no larger than ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{field} must be an integer, not {type(value).__name__}")
    if value < 0 or value > maximum:
        raise InvalidArgument(f"{field} must be between 0 and {maximum}")
    return value


def check_json(value: object, field: str, *, max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse anything that is not plain, bounded JSON, without recursion.

    Objects with string keys, lists/tuples, strings without lone surrogates, booleans, None,
    integers within 64 bits and finite floats; at most ``max_depth`` levels of containers.
    ``max_bytes`` bounds a running lower estimate of the compact encoding, so a huge value
    is refused after reading about ``max_bytes`` of it; callers check the exact size of what
    they serialise.
    """
    size = 0
    # (value, parent node, key or index in the parent, depth): a path is spelled out only
    # for the error message, never on the way.
    stack: list[_Node] = [(value, None, None, 0)]
    while stack:
        node = stack.pop()
        item, _, _, depth = node
        if isinstance(item, str):
            if not item.isascii():
                refuse_surrogates(item, _json_path(field, node))
            size += len(item) + 2
        elif item is None or isinstance(item, bool):
            size += 4
        elif isinstance(item, int):
            if not -MAX_JSON_INT <= item <= MAX_JSON_INT:
                raise InvalidArgument(f"{_json_path(field, node)} is an integer out of the 64-bit range")
            size += 1
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidArgument(f"{_json_path(field, node)} must be a finite number")
            size += 1
        elif isinstance(item, (dict, list, tuple)):
            if depth >= max_depth:
                raise InvalidArgument(f"{field} is nested more than {max_depth} levels deep")
            size += 2
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise InvalidArgument(
                            f"{_json_path(field, node)} has a key that is not a string ({type(key).__name__})"
                        )
                    if not key.isascii():
                        refuse_surrogates(key, f"a key of {_json_path(field, node) or 'the object'}")
                    size += len(key) + 3
                    stack.append((child, node, key, depth + 1))
            else:
                stack.extend((child, node, index, depth + 1) for index, child in enumerate(item))
        else:
            raise InvalidArgument(f"{_json_path(field, node)} is not JSON (a {type(item).__name__})")
        if size > max_bytes:
            raise InvalidArgument(f"{field} is larger than {max_bytes} bytes")


_Node = tuple[object, "_Node | None", "str | int | None", int]


def _json_path(field: str, node: _Node) -> str:
    """``payload.a[3].b`` for the node (keys cut at 64 characters)."""
    keys: list[str | int] = []
    current: _Node | None = node
    while current is not None and current[2] is not None:
        keys.append(current[2])
        current = current[1]
    path = field
    for key in reversed(keys):
        if isinstance(key, int):
            path = f"{path}[{key}]"
        else:
            path = f"{path}.{key[:64]}" if path else key[:64]
    return path


def check_optional_id(value: object, field: str) -> str | None:
    if value is None:
        return None
    return check_line(value, field, MAX_ID_LENGTH)


# The most events one changesSince answer carries (spec INV9).
CHANGES_PAGE = 200


def check_changes_since(value: object, field: str = "changesSince") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{field} must be an integer, not {type(value).__name__}")
    if value < 0:
        raise InvalidArgument(f"{field} must be >= 0, got {value}")
    if value > 2**62:
        raise InvalidArgument(f"{field} is out of range")
    return value


def check_timestamp(value: object, field: str = "occurred_at") -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{field} must be finite epoch seconds")
    try:
        seconds = float(value)  # an int beyond the float range raises OverflowError
    except OverflowError:
        raise InvalidArgument(f"{field} is out of range") from None
    if not math.isfinite(seconds):
        raise InvalidArgument(f"{field} must be finite epoch seconds")
    return seconds


def check_seconds(value: object, field: str) -> float:
    """A duration: a finite number of seconds >= 0 (an int beyond the float range is refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{field} must be a number of seconds, not {type(value).__name__}")
    try:
        seconds = float(value)
    except OverflowError:
        raise InvalidArgument(f"{field} is out of range") from None
    if not (math.isfinite(seconds) and seconds >= 0):
        raise InvalidArgument(f"{field} must be a finite number of seconds >= 0")
    return seconds


def encode_payload(kind: str, payload: object) -> str | None:
    if payload is None:
        return None
    if not isinstance(payload, dict):
        raise InvalidArgument("payload must be a JSON object with string keys")
    check_json(payload, "payload", max_bytes=MAX_PAYLOAD_BYTES)  # before json.dumps recurses
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    if len(text.encode()) > MAX_PAYLOAD_BYTES:
        raise InvalidArgument(f"payload is larger than {MAX_PAYLOAD_BYTES} bytes")
    outcome = payload.get("outcome")
    if kind == "run_failed" and outcome is not None and outcome not in RUN_FAILED_OUTCOMES:
        raise InvalidArgument(f"run_failed outcome must be one of {list(RUN_FAILED_OUTCOMES)}")
    return text


def visible_payload(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    data = json.loads(text)
    shown = {k: data[k] for k in PAYLOAD_FIELDS if k in data}
    return shown or None
