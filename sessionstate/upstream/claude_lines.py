"""What one Claude Code transcript line is, reduced to the facts we classify on.

A line is reduced to a small ``LineFacts`` record, then ``is_human_turn``
decides. Two producers build the record: ``facts_from_line`` (a complete line
in memory, parsed with ``json``) and ``json_stream.LineScanner`` (a line too
large for one scan window, parsed incrementally). Both follow the same rules,
written down here, so a line is classified the same way whichever path saw it;
the only difference is that the streaming path keeps a prefix of the text.

Rules (from the transcript format):

* A direct human turn is a ``type: "user"`` line whose ``message.content`` is a
  string, or a list with at least one ``{"type": "text"}`` block and no
  ``tool_result`` block.
* ``userType``, when present, must be ``"external"``.
* Compaction continuations are injected by the tool, not typed: a text that
  starts "This session is being continued from a previous conversation", or
  ``isCompactSummary: true``.
* Sidechain lines (``isSidechain: true``) belong to a sub-agent the main agent
  started: their ``user`` lines are prompts the agent wrote, never a person.
* Anything else - other line types, unknown shapes, malformed JSON - is simply
  "not a human turn"; it never fails a scan.

Small string fields (``type``, ``uuid``, ``id``, ``timestamp``, ``userType``,
``message.role``, a block's ``type``) are kept only up to ``SMALL_FIELD_CHARS``: ``None`` means absent,
``""`` means present but not a string or too long to be meaningful.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

COMPACTION_PREFIX = "This session is being continued from a previous conversation"

#: Longest value kept for the small identifying fields (uuid, type, ...).
SMALL_FIELD_CHARS = 128
#: How much prompt text the streaming path keeps (enough for echo prefix
#: comparison and compaction detection, small enough to live in a marker).
TEXT_PREFIX_CHARS = 1024
#: Longest number literal accepted, identical on both parse paths so a line
#: is malformed for both or for neither.
MAX_NUMBER_CHARS = 4096


@dataclass(slots=True)
class LineFacts:
    """The few facts about one line that classification needs."""

    malformed: bool = False
    is_object: bool = False
    type: str | None = None
    uuid: str | None = None
    entry_id: str | None = None  # a top-level ``id`` (Pi's entry id)
    timestamp: str | None = None
    user_type: str | None = None
    compact_summary: bool = False
    sidechain: bool = False
    message_is_object: bool = False
    role: str | None = None  # ``message.role`` (Pi's turns name their author there)
    # "string" | "blocks" | "other"; None when message.content is absent.
    content_kind: str | None = None
    has_text_block: bool = False
    has_tool_result: bool = False
    # The prompt: the string content, or the text blocks joined by "\n".
    text: str = ""
    text_truncated: bool = False


def is_human_turn(facts: LineFacts) -> bool:
    """Apply the classification rules in the module docstring."""
    if facts.malformed or not facts.is_object or facts.type != "user":
        return False
    if facts.user_type is not None and facts.user_type != "external":
        return False
    if facts.compact_summary or facts.sidechain or not facts.message_is_object:
        return False
    if facts.content_kind == "string":
        pass
    elif facts.content_kind == "blocks":
        if facts.has_tool_result or not facts.has_text_block:
            return False
    else:
        return False
    return not facts.text.startswith(COMPACTION_PREFIX)


def small_field(value: Any) -> str:
    """The stored form of a present small field (see the module docstring)."""
    if isinstance(value, str) and len(value) <= SMALL_FIELD_CHARS:
        return value
    return ""


def parse_timestamp(value: str | None) -> float | None:
    """ISO 8601 (``Z`` allowed; naive means UTC) to epoch seconds, else ``None``."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _reject_constant(name: str) -> Any:
    # NaN / Infinity are not JSON; the streaming parser rejects them too.
    raise ValueError(f"non-JSON constant {name}")


def _bounded_number(literal: str) -> int:
    # Numbers are never needed, only checked, so the value is a placeholder.
    if len(literal) > MAX_NUMBER_CHARS:
        raise ValueError("number literal too long")
    return 0


def facts_from_line(line: bytes) -> LineFacts:
    """Facts of one complete line (without its newline), text kept in full."""
    try:
        obj = json.loads(
            line.decode("utf-8"),
            parse_constant=_reject_constant,
            parse_int=_bounded_number,
            parse_float=_bounded_number,
        )
    except (ValueError, RecursionError):
        return LineFacts(malformed=True)
    if not isinstance(obj, dict):
        return LineFacts()
    facts = LineFacts(is_object=True)
    if "type" in obj:
        facts.type = small_field(obj["type"])
    if "uuid" in obj:
        facts.uuid = small_field(obj["uuid"])
    if "id" in obj:
        facts.entry_id = small_field(obj["id"])
    if "timestamp" in obj:
        facts.timestamp = small_field(obj["timestamp"])
    if "userType" in obj:
        facts.user_type = small_field(obj["userType"])
    facts.compact_summary = obj.get("isCompactSummary") is True
    facts.sidechain = obj.get("isSidechain") is True
    message = obj.get("message")
    if not isinstance(message, dict):
        return facts
    facts.message_is_object = True
    if "role" in message:
        facts.role = small_field(message["role"])
    if "content" not in message:
        return facts
    content = message["content"]
    if isinstance(content, str):
        facts.content_kind = "string"
        facts.text = content
    elif isinstance(content, list):
        facts.content_kind = "blocks"
        texts: list[str] = []
        for block in content:
            if not isinstance(block, dict) or "type" not in block:
                continue
            block_type = small_field(block["type"])
            if block_type == "tool_result":
                facts.has_tool_result = True
            elif block_type == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
        facts.has_text_block = bool(texts)
        facts.text = "\n".join(texts)
    else:
        facts.content_kind = "other"
    return facts
