"""The ``sessions_history`` view: normalise, redact and bound a transcript.

Another agent reads this view, so it must not carry the writer's private
scaffolding (reasoning, recalled memories, raw tool-call payloads, model control
tokens), must not hand out credentials, and must fit in a tool result. Three pure
steps, each usable on its own:

1. ``normalize_assistant_text`` removes scaffolding from assistant text. It only
   ever deletes characters, and it repeats until nothing changes, so it is
   idempotent and never grows the text (joining the text around a removed block can
   form a new tag; the next round removes that too). Text in which nothing matches
   is returned unchanged, byte for byte.
2. ``redact_secrets`` replaces credential-shaped substrings by ``[REDACTED]``,
   keeping the label of ``password=...``-style assignments and of ``Bearer``.
3. ``build_history_view`` applies both to a list of messages, truncates long
   strings and keeps the newest rows that fit in the byte budget.

Deliberate limits: the rules are textual, so a tag inside a Markdown code span is
stripped like any other; a literal ``<think>`` mentioned inside a thinking block
counts as nesting. Both err on the side of hiding text from another agent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

__all__ = [
    "OMITTED_TEXT",
    "REDACTED",
    "TRUNCATION_MARKER",
    "build_history_view",
    "normalize_assistant_text",
    "redact_secrets",
]

REDACTED: Final = "[REDACTED]"
OMITTED_TEXT: Final = "[sessions_history omitted: message too large]"
TRUNCATION_MARKER: Final = "\n…[truncated]"

# --- normalisation -------------------------------------------------------------

_THINKING: Final = frozenset({"think", "thinking", "thought", "antthinking"})
_BLOCK_NAMES: Final = (
    # longest first within a prefix family so that e.g. "thinking" is tried before
    # "think" (the boundary check below would reject the short one anyway)
    "antthinking",
    "thinking",
    "thought",
    "think",
    "relevant[-_]memories",
    "tool_calls",
    "tool_call",
    "function_calls",
    "function_call",
    "minimax:tool_call",
    "invoke",
)
# An opening or closing tag of a block we strip. The name must be followed by
# whitespace, "/", ">" or the end of the text (a tag cut off by truncation), which
# keeps "<thinker>" and "a < b" out. No space is allowed after "<".
_TAG: Final = re.compile(
    r"<(?:(?P<close>/)\s*)?(?P<name>" + "|".join(_BLOCK_NAMES) + r")"
    r"(?P<rest>[\s/][^<>]*)?(?:>|\Z)",
    re.IGNORECASE,
)
# ASCII "<|...|>" and full-width "<｜...｜>" / "＜｜...｜＞" control tokens, mixed too.
_TOKEN_CHARS: Final = r"[^<>＜＞|｜\r\n]"
_CONTROL_TOKEN: Final = re.compile(rf"[<＜][|｜]{_TOKEN_CHARS}{{1,64}}[|｜][>＞]")
# Chat-template role headers: the role name between the tokens goes with them
# (ChatML "<|im_start|>assistant\n", Llama 3 "<|start_header_id|>user<|end_header_id|>").
_ROLE_HEADER: Final = re.compile(
    r"[<＜][|｜]im_start[|｜][>＞](?:system|user|assistant|tool)?[ \t]*\n?"
    r"|[<＜][|｜]start_header_id[|｜][>＞][A-Za-z_]{0,32}[<＜][|｜]end_header_id[|｜][>＞]\n*",
    re.IGNORECASE,
)
# DeepSeek-style tool-call sections delimited by such tokens: drop the payload
# between begin and end (or to the end of the text when it never closes).
_TOKEN_TOOL_SECTION: Final = re.compile(
    r"[<＜][|｜]tool[▁_ ]calls[▁_ ]begin[|｜][>＞].*?"
    r"(?:[<＜][|｜]tool[▁_ ]calls[▁_ ]end[|｜][>＞]|\Z)",
    re.IGNORECASE | re.DOTALL,
)
# Downgraded tool-call scaffolding written as text when a transcript is replayed to
# a provider that cannot take the structured form.
_SCAFFOLD: Final = re.compile(
    r"\[(?:(?P<call>Tool Call:)|(?P<result>Tool Result)[\s:]|(?P<history>Historical context:))",
    re.IGNORECASE,
)
# An opening tag cut off at the very end of the text, checked from the last "<".
_PARTIAL_TAG: Final = re.compile(
    r"<(?P<name>" + "|".join(_BLOCK_NAMES) + r")(?P<rest>[\s/][^<>]*)?", re.IGNORECASE
)
_MAX_PASSES: Final = 16
_ARGUMENTS: Final = re.compile(r"[ \t]*(?:\r?\n)?[ \t]*Arguments:?[ \t]*", re.IGNORECASE)
_MANY_NEWLINES: Final = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
_TRAILING_SPACE: Final = re.compile(r"[ \t]+(?=\n)")


def normalize_assistant_text(text: str) -> str:
    """Strip model scaffolding from assistant text (see the module docstring).

    Removed, case-insensitively:

    * thinking blocks ``<think>``, ``<thinking>``, ``<thought>``, ``<antthinking>``;
      an opening tag that never closes removes everything after it; a closing tag
      with no opening tag removes everything before it (the provider dropped the
      opener and the reasoning came first);
    * ``<relevant-memories>`` / ``<relevant_memories>`` blocks;
    * ``<tool_call>``, ``<tool_calls>``, ``<function_call>``, ``<function_calls>``,
      ``<minimax:tool_call>`` and ``<invoke name=...>`` blocks, unclosed ones to the
      end of the text; stray closing tags (``</minimax:tool_call>``) and
      self-closing ones on their own;
    * blocks nest: an inner tag of any of these names opens a level, a closing tag
      closes the innermost open level of its name and every level opened after it;
    * control tokens ``<|...|>`` and the full-width ``<｜...｜>`` forms, and the
      payload between ``<｜tool▁calls▁begin｜>`` and ``<｜tool▁calls▁end｜>``, and the
      role name of a chat-template header (``<|im_start|>assistant``);
    * ``[Tool Call: ...]`` with a following ``Arguments: <json>``;
      ``[Tool Result ...]`` with its body up to the next such marker or the end;
      ``[Historical context: ...]`` (brackets balanced; unclosed to the end).

    Text that still changes after 16 passes (only adversarially nested fragments
    do) is replaced by ``""``.

    When anything was removed, spaces at a join are not doubled, runs of blank
    lines are collapsed to one, spaces before a newline dropped and the result
    trimmed.
    """
    for _ in range(_MAX_PASSES):
        cleaned = _normalize_once(text)
        if cleaned == text:
            return text
        text = cleaned
    # Real transcripts settle in two or three passes. Text that keeps forming new
    # tags out of the remains of removed ones is built to defeat the filter (and
    # would make this quadratic): hide all of it.
    return ""


def _normalize_once(text: str) -> str:
    out = _strip_partial_tail(_strip_blocks(text))
    for pattern in (_TOKEN_TOOL_SECTION, _ROLE_HEADER, _CONTROL_TOKEN):
        out = _remove(pattern, out)
    out = _strip_scaffolding(out)
    if out == text:
        return text
    out = _TRAILING_SPACE.sub("", out)
    out = _MANY_NEWLINES.sub("\n\n", out)
    return out.strip()


def _canonical(name: str) -> str:
    return name.lower().replace("-", "_")


def _strip_blocks(text: str) -> str:
    kept: list[str] = []
    cursor = 0  # start of the text not yet copied or discarded
    stack: list[str] = []  # open block names, innermost last
    for match in _TAG.finditer(text):
        name = _canonical(match["name"])
        closing = match["close"] is not None
        rest = (match["rest"] or "").strip()
        self_closing = not closing and rest.endswith("/")
        if name == "invoke" and not closing and not rest:
            continue  # a bare "<invoke>" is prose; MiniMax's always has name="..."
        if stack:
            if closing and name in stack:
                del stack[len(stack) - 1 - stack[::-1].index(name) :]
                if not stack:
                    cursor = match.end()
            elif not closing and not self_closing:
                stack.append(name)
            continue
        if closing and name in _THINKING:
            kept.clear()  # orphan closer: what came before it was reasoning
        else:
            kept.append(text[cursor : match.start()])
        if closing or self_closing:
            cursor = match.end()
        else:
            stack.append(name)
    if not stack:
        kept.append(text[cursor:])
    return _splice(kept)


def _strip_partial_tail(text: str) -> str:
    # Degenerate output such as "... <tool_call <tool_call <tool_call " exposes a
    # new cut-off tag each time the last one is removed; peel them all here, in
    # linear time, instead of one per normalisation pass.
    while (start := text.rfind("<")) >= 0:
        match = _PARTIAL_TAG.fullmatch(text, start)
        if match is None or (_canonical(match["name"]) == "invoke" and not match["rest"]):
            break
        text = text[:start]
    return text


def _strip_scaffolding(text: str) -> str:
    kept: list[str] = []
    cursor = 0
    search_from = 0
    while (match := _SCAFFOLD.search(text, search_from)) is not None:
        start = match.start()
        end = _matching_bracket(text, start)
        if end is not None and text.startswith("(", end):
            search_from = match.end()  # "[Tool Result: x](url)" is a Markdown link
            continue
        if end is None:
            end = len(text)
        elif match["call"]:
            args = _ARGUMENTS.match(text, end)
            if args is not None and args.group().strip():
                end = _json_end(text, args.end())
        elif match["result"]:
            following = _SCAFFOLD.search(text, end)
            end = following.start() if following else len(text)
        kept.append(text[cursor:start])
        cursor = search_from = end
    kept.append(text[cursor:])
    return _splice(kept)


def _remove(pattern: re.Pattern[str], text: str) -> str:
    pieces: list[str] = []
    cursor = 0
    for match in pattern.finditer(text):
        pieces.append(text[cursor : match.start()])
        cursor = match.end()
    if not pieces:
        return text
    pieces.append(text[cursor:])
    return _splice(pieces)


def _splice(pieces: list[str]) -> str:
    """Join the text around removed spans; "a <x/> b" becomes "a b", not "a  b"."""
    out = ""
    for piece in pieces:
        if out[-1:] in (" ", "\t") and piece[:1] in (" ", "\t"):
            piece = piece.lstrip(" \t")
        out += piece
    return out


def _matching_bracket(text: str, start: int) -> int | None:
    """Index just past the "]" that closes the "[" at ``start``, or None."""
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return index + 1
    return None


def _json_end(text: str, start: int) -> int:
    """End of the JSON-ish value at ``start``: a balanced {...}/[...] (strings
    respected), a "..." string, or else the rest of the line. Unbalanced: the end."""
    if start >= len(text):
        return start
    opener = text[start]
    if opener not in "{[\"":
        newline = text.find("\n", start)
        return len(text) if newline == -1 else newline
    depth = 0
    in_string = opener == '"'
    escaped = False
    for index in range(start + 1 if in_string else start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
                if depth == 0:
                    return index + 1
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return index + 1
    return len(text)


# --- redaction -------------------------------------------------------------------

_Replacement = str | Callable[[re.Match[str]], str]
_SECRET_PATTERNS: Final[tuple[tuple[re.Pattern[str], _Replacement], ...]] = (
    # PEM private keys, whole block; a block cut off by truncation to the end.
    (
        re.compile(
            r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----.*?(?:-----END \1-----|\Z)", re.DOTALL
        ),
        REDACTED,
    ),
    # JWT: three base64url segments, the first two being JSON objects ("eyJ").
    (re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), REDACTED),
    # OpenAI / Anthropic: sk-..., sk-proj-..., sk-ant-api03-...; a digit is required
    # so that hyphenated prose ("sk-learn-style-...") survives. Lookaheads are
    # bounded: an unbounded one rescans the rest of the text at every candidate.
    (re.compile(r"\bsk-(?=[A-Za-z0-9_-]{0,255}\d)[A-Za-z0-9][A-Za-z0-9_-]{19,}"), REDACTED),
    # GitHub classic tokens and fine-grained PATs.
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), REDACTED),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"), REDACTED),
    # Slack bot/user/app/refresh/legacy tokens.
    (re.compile(r"\bxox[bpars]-[A-Za-z0-9-]{10,}"), REDACTED),
    # AWS access key ids (long-term AKIA, temporary ASIA).
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),
    # Google API keys.
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), REDACTED),
    # AWS secret access keys: only recognisable by their label.
    (
        re.compile(
            r"(?i)(\baws_secret_access_key[\"']?\s*[:=]\s*[\"']?)(?!\[REDACTED\])[A-Za-z0-9/+=]{16,}"
        ),
        r"\1" + REDACTED,
    ),
    # Authorization headers; the token must contain a digit so "Bearer tokens" survives.
    (
        re.compile(r"(?i)(\bBearer\s+)(?!\[REDACTED\])(?=[A-Za-z._~+/=-]{0,255}\d)[A-Za-z0-9._~+/=-]{8,}"),
        r"\1" + REDACTED,
    ),
    # password=..., token: ..., api_key=... (quoted or bare values; JSON keys and
    # prefixed names such as DB_PASSWORD too).
    (
        re.compile(
            r"(?i)((?<![A-Za-z0-9])(?:password|passwd|pwd|token|access[_-]?token|auth[_-]?token|refresh[_-]?token"
            r"|api[_-]?key|apikey|secret[_-]?key|client[_-]?secret)[\"']?\s*[:=]\s*)"
            r"(?:(?P<q>[\"'])(?!\[REDACTED\])(?:(?<=\")[^\"\n]{3,}|(?<=')[^'\n]{3,})(?P=q)"
            r"|(?![\"']|\[REDACTED\])[^\s,;]{4,})"
        ),
        # a quoted value keeps its quotes so that JSON/YAML stays well-formed
        lambda match: match[1] + (match["q"] or "") + REDACTED + (match["q"] or ""),
    ),
)


def redact_secrets(text: str) -> tuple[str, bool]:
    """Replace credential-shaped substrings by ``[REDACTED]``.

    Recognised: PEM private-key blocks; JWTs; OpenAI/Anthropic ``sk-...`` keys;
    GitHub ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` and ``github_pat_`` tokens;
    Slack ``xox[bpars]-`` tokens; AWS ``AKIA``/``ASIA`` key ids and the value after
    ``aws_secret_access_key``; Google ``AIza`` keys; ``Bearer <token>``; and the
    value of ``password``/``token``/``api_key``-style assignments (``=`` or ``:``,
    quoted values in full). Labels are kept (``password=[REDACTED]``). Returns the
    new text and whether anything was replaced; already-redacted text is stable.
    """
    redacted = False
    for pattern, replacement in _SECRET_PATTERNS:
        text, count = pattern.subn(replacement, text)
        redacted = redacted or count > 0
    return text, redacted


# --- the history view -------------------------------------------------------------

_ROLES: Final = frozenset({"user", "assistant", "tool", "system"})
_TOOL_FIELDS: Final = ("toolCalls", "toolResult")
_JSON_SEPARATORS: Final = (",", ":")


class _Flags:
    __slots__ = ("redacted", "truncated")

    def __init__(self) -> None:
        self.redacted = False
        self.truncated = False


def build_history_view(
    messages: Iterable[Mapping[str, Any]],
    *,
    include_tools: bool = False,
    max_text_chars: int = 4000,
    max_bytes: int = 80 * 1024,
) -> dict[str, Any]:
    """Build the bounded, sanitised ``sessions_history`` result for ``messages``.

    ``messages`` are chronological (oldest first) dicts ``{"role", "text",
    "toolCalls"?, "toolResult"?, "provenance"?, ...}``.

    Per row:

    * ``include_tools=False``: rows with role ``tool`` are left out, and the
      ``toolCalls``/``toolResult`` fields are removed from the other rows. These rows
      are filtered by policy and are not counted in ``droppedMessages``.
    * every row has ``role`` and a string ``text`` (missing/None text becomes ``""``);
      assistant text goes through ``normalize_assistant_text``; all other fields
      are kept.
    * every string value in the row (text, tool payloads, provenance, ...) is
      redacted with ``redact_secrets`` and, when longer than ``max_text_chars``
      characters, cut to its first ``max_text_chars`` characters plus
      ``TRUNCATION_MARKER``. Non-JSON values become their ``str()``.

    Then the byte budget: the whole result, serialised as compact UTF-8 JSON, is
    at most ``max_bytes``. Rows are taken newest first while they fit; the first
    row that does not fit and every older row are dropped (a contiguous oldest
    prefix). A row that could not fit even alone is not dropped but replaced by
    ``{"role": <role>, "text": OMITTED_TEXT}``, and the walk goes on.

    Returns ``{"messages", "truncated", "droppedMessages", "contentTruncated",
    "contentRedacted", "bytes"}``: ``droppedMessages`` counts rows dropped for the
    budget; ``contentTruncated`` is true when a kept row had a string cut or was
    replaced by the placeholder; ``contentRedacted`` when a kept row had a
    redaction; ``truncated`` when rows were dropped or replaced; ``bytes`` is the
    size of the compact UTF-8 JSON of the ``messages`` list.

    Raises ``ValueError`` when ``max_bytes`` cannot hold even an empty result and a
    placeholder row, or ``max_text_chars`` < 1; ``TypeError`` for a non-dict row.
    """
    if max_text_chars < 1:
        raise ValueError("max_text_chars must be at least 1")
    rows = [_check_row(row) for row in messages]
    if not include_tools:
        rows = [row for row in rows if row.get("role") != "tool"]

    # Reserve room for the envelope at its widest (false is longer than true,
    # the counters at their largest) so that the total can never overshoot.
    envelope = _size(_result([], len(rows), max_bytes, False, False, False)) - 2
    budget = max_bytes - envelope  # what the messages list may take, brackets included
    if budget < 2 + _size(_omitted("assistant")):
        raise ValueError(f"max_bytes={max_bytes} is too small for a history view")

    kept: list[dict[str, Any]] = []
    used = 2  # "[]"
    content_truncated = redacted = omitted = False
    for index in range(len(rows) - 1, -1, -1):
        flags = _Flags()
        row = _sanitize_row(rows[index], include_tools, max_text_chars, flags)
        size = _size(row)
        if 2 + size > budget:  # could not fit even alone: keep a placeholder
            row = _omitted(row["role"])
            size = _size(row)
            flags = _Flags()
            flags.truncated = omitted = True
        separator = 1 if kept else 0
        if used + separator + size > budget:
            break
        kept.append(row)
        used += separator + size
        content_truncated = content_truncated or flags.truncated
        redacted = redacted or flags.redacted
    kept.reverse()
    dropped = len(rows) - len(kept)
    return _result(kept, dropped, used, dropped > 0 or omitted, content_truncated, redacted)


def _check_row(row: Any) -> Mapping[str, Any]:
    if not isinstance(row, Mapping):
        raise TypeError(f"history rows must be mappings, got {type(row).__name__}")
    return row


def _result(
    messages: list[dict[str, Any]],
    dropped: int,
    size: int,
    truncated: bool,
    content_truncated: bool,
    redacted: bool,
) -> dict[str, Any]:
    return {
        "messages": messages,
        "truncated": truncated,
        "droppedMessages": dropped,
        "contentTruncated": content_truncated,
        "contentRedacted": redacted,
        "bytes": size,
    }


def _omitted(role: Any) -> dict[str, Any]:
    # The role is kept only when it is a known one: an arbitrary role string could
    # itself be what made the row too large.
    return {"role": role if role in _ROLES else "unknown", "text": OMITTED_TEXT}


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=_JSON_SEPARATORS).encode("utf-8"))


def _sanitize_row(
    row: Mapping[str, Any], include_tools: bool, max_chars: int, flags: _Flags
) -> dict[str, Any]:
    role = row.get("role")
    text = row.get("text")
    text = "" if text is None else text if isinstance(text, str) else str(text)
    if role == "assistant":
        text = normalize_assistant_text(_clean_str(text))
    out: dict[str, Any] = {
        "role": role if role in _ROLES else _sanitize_value(role, max_chars, flags),
        "text": _sanitize_value(text, max_chars, flags),
    }
    for key, value in row.items():
        if key in ("role", "text") or (not include_tools and key in _TOOL_FIELDS):
            continue
        out[str(key)] = _sanitize_value(value, max_chars, flags)
    return out


def _sanitize_value(value: Any, max_chars: int, flags: _Flags) -> Any:
    if isinstance(value, str):
        text, changed = redact_secrets(_clean_str(value))
        flags.redacted = flags.redacted or changed
        if len(text) > max_chars:
            text = text[:max_chars] + TRUNCATION_MARKER
            flags.truncated = True
        return text
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, Mapping):
        return {str(key): _sanitize_value(item, max_chars, flags) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sanitize_value(item, max_chars, flags) for item in value]
    return _sanitize_value(str(value), max_chars, flags)


def _clean_str(text: str) -> str:
    # Lone surrogates cannot be encoded as UTF-8; replace them so that the view is
    # always serialisable and measurable.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text
