"""Argument checks shared by the Python API and the tools: bad input raises, nothing changes."""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import InvalidArgument
from .statemachine import ACTOR_TYPES, KNOWN_KINDS, RUN_FAILED_OUTCOMES

MAX_SUMMARY_LENGTH = 200
MAX_LABEL_LENGTH = 200
MAX_PAYLOAD_BYTES = 4096
MAX_ID_LENGTH = 256
SESSION_KINDS = ("main", "group", "cron", "hook", "node", "subagent", "acp")
# The payload fields a reconciling agent may see (spec section 10).
PAYLOAD_FIELDS = ("outcome", "channel", "turns", "provider", "burstOverflow")


def check_kind(kind: object) -> str:
    if not isinstance(kind, str) or kind not in KNOWN_KINDS:
        raise InvalidArgument(f"unknown event kind {kind!r}; expected one of {sorted(KNOWN_KINDS)}")
    return kind


def check_actor_type(actor_type: object) -> str:
    if not isinstance(actor_type, str) or actor_type not in ACTOR_TYPES:
        raise InvalidArgument(f"unknown actor type {actor_type!r}; expected one of {list(ACTOR_TYPES)}")
    return actor_type


def check_line(value: object, field: str, max_length: int) -> str:
    """A non-empty, single-line, printable string of bounded length."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{field} must be a string, not {type(value).__name__}")
    if not value.strip():
        raise InvalidArgument(f"{field} must not be empty")
    if len(value) > max_length:
        raise InvalidArgument(f"{field} is {len(value)} characters; at most {max_length} allowed")
    if not value.isprintable():  # one C-level pass; same characters as a per-character test
        raise InvalidArgument(f"{field} must be one line of printable text")
    return value


def check_optional_id(value: object, field: str) -> str | None:
    if value is None:
        return None
    return check_line(value, field, MAX_ID_LENGTH)


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
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgument(f"{field} must be finite epoch seconds")
    return float(value)


def encode_payload(kind: str, payload: object) -> str | None:
    if payload is None:
        return None
    if not isinstance(payload, dict) or not all(isinstance(k, str) for k in payload):
        raise InvalidArgument("payload must be a JSON object with string keys")
    try:
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"payload is not JSON-serialisable: {exc}") from None
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
