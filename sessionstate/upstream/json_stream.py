"""Classify a JSONL line that is too large for one scan window.

The JSONL provider reads at most ``scan_cap_bytes`` per check. A line longer
than that would never be seen whole, and skipping it would lose a human turn,
so ``LineScanner`` parses the line incrementally as its bytes arrive, across
as many checks as it takes, and keeps only what classification needs: the
container stack, the current key on the first few levels, the small fields,
and a bounded prefix of the prompt text (``claude_lines.LineFacts``). Long
strings are skipped with a regex search, never copied whole.

The scanner is a validating JSON parser (strings, escapes, number literals,
UTF-8, bracket matching), so it rejects the same lines ``json.loads`` rejects
and the two paths classify a line alike. Its one extra limit: nesting deeper
than ``MAX_DEPTH`` counts as malformed, which keeps the saved state small.

The whole state round-trips through ``to_state`` / ``from_state`` (plain
JSON-able data), so it can travel inside the provider's marker string and
survive a gateway restart.
"""

from __future__ import annotations

import base64
import codecs
import dataclasses
import json
import re
from typing import Any

from .claude_lines import (
    MAX_NUMBER_CHARS,
    SMALL_FIELD_CHARS,
    TEXT_PREFIX_CHARS,
    LineFacts,
    small_field,
)

#: Deepest nesting accepted; the stack is saved in markers, so it is bounded.
MAX_DEPTH = 512
#: Levels on which keys are tracked: root, message, content array, block.
TRACK_DEPTH = 4
#: Worst case raw JSON bytes per decoded char (a \\uXXXX\\uXXXX surrogate pair).
RAW_PER_CHAR = 12
_UTF8_SLICE = 16 * 1024

# Parser modes.
_VALUE = "V"  # a value must come next
_ARRAY_START = "A"  # after "[": a value or "]"
_OBJECT_START = "O"  # after "{": a key or "}"
_KEY = "K"  # after "," in an object: a key
_COLON = "C"
_NEXT = "N"  # after a value in a container: "," or the closing bracket
_END = "E"  # the root value is complete: only whitespace may follow
_STRING = "S"
_LITERAL = "L"
_BAD = "X"  # malformed: ignore everything until the newline

_ARRAY_LEVEL = 0  # key slot of an array level (keys are str, so no clash)

_NON_WS = re.compile(rb"[^ \t\r\n]")
# Possessive: no backtracking state, so megabytes match in constant memory.
_STRING_RUN = re.compile(rb'(?:[^"\\\x00-\x1f]++|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*+')
_LITERAL_END = re.compile(rb"[^0-9A-Za-z+\-.]")
_LITERAL_OK = re.compile(
    rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null"
)
_LITERAL_START = frozenset(b"-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ESCAPABLE = frozenset(b'"\\/bfnrtu')
_HEX = frozenset(b"0123456789abcdefABCDEF")

# Value paths (keys from the root, _ARRAY_LEVEL for array elements) that
# matter, and the name of what they feed.
_PATH_TARGETS: dict[tuple[Any, ...], str] = {
    (): "root",
    ("type",): "type",
    ("uuid",): "uuid",
    ("id",): "entry_id",
    ("timestamp",): "timestamp",
    ("userType",): "user_type",
    ("isCompactSummary",): "compact",
    ("isSidechain",): "sidechain",
    ("message",): "message",
    ("message", "role"): "role",
    ("message", "content"): "content",
    ("message", "content", _ARRAY_LEVEL): "block",
    ("message", "content", _ARRAY_LEVEL, "type"): "block_type",
    ("message", "content", _ARRAY_LEVEL, "text"): "block_text",
}
_FACT_FIELDS = ("type", "uuid", "entry_id", "timestamp", "user_type", "role")
_SMALL_TARGETS = frozenset({"key", "block_type", *_FACT_FIELDS})


def _decode_complete(raw: bytes) -> str | None:
    """Decode the body of a JSON string whose escapes were already validated."""
    try:
        return str(json.loads('"' + raw.decode("utf-8") + '"'))
    except ValueError:
        return None


def _decode_prefix(raw: bytes) -> str | None:
    """Decode a cut-off string body: drop a partial escape, char or surrogate."""
    cut = 0
    i = 0
    while i < len(raw):
        if raw[i] == 0x5C:
            width = 6 if i + 1 < len(raw) and raw[i + 1] == 0x75 else 2
            if i + width > len(raw):
                break
            i += width
        else:
            i += 1
        cut = i
    try:
        body = codecs.getincrementaldecoder("utf-8")().decode(raw[:cut], final=False)
        text = str(json.loads('"' + body + '"'))
    except ValueError:
        return None
    if text and "\ud800" <= text[-1] <= "\udbff":
        text = text[:-1]
    return text


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class LineScanner:
    """Incremental facts extractor for one line; feed bytes, then ``finish``."""

    def __init__(self) -> None:
        self._stack: list[str] = []  # "o" / "a" per open container
        self._keys: list[Any] = []  # per tracked level: key, None, or _ARRAY_LEVEL
        self._mode = _VALUE
        self._facts = LineFacts()
        # The string or literal being read.
        self._str_key = False
        self._esc = 0  # 0 none, -1 after a backslash, n > 0 hex digits left
        self._target: str | None = None
        self._cap: bytearray | None = None
        self._cap_limit = 0
        self._cap_chars = 0  # chars a text capture must deliver (its budget)
        self._cap_over = False
        self._lit = bytearray()
        # The content block being read (message.content[i]).
        self._block_active = False
        self._block_type: str | None = None
        self._block_text: str | None = None
        self._block_text_over = False
        self._utf8 = codecs.getincrementaldecoder("utf-8")()

    # -- public -----------------------------------------------------------

    def feed(self, data: bytes, start: int = 0, end: int | None = None) -> None:
        """Consume ``data[start:end]`` (no newline in it) without copying it."""
        stop = len(data) if end is None else end
        if self._mode == _BAD:
            return
        self._check_utf8(data, start, stop)
        i = start
        while i < stop and self._mode != _BAD:
            if self._mode == _STRING:
                i = self._scan_string(data, i, stop)
            elif self._mode == _LITERAL:
                i = self._scan_literal(data, i, stop)
            else:
                match = _NON_WS.search(data, i, stop)
                if match is None:
                    return
                i = self._structural(data[match.start()], match.start())

    def finish(self) -> LineFacts:
        """The line's newline arrived: return its facts (text may be a prefix)."""
        if self._mode == _LITERAL:
            self._end_literal()
        if self._mode != _BAD:
            try:
                self._utf8.decode(b"", final=True)
            except UnicodeDecodeError:
                self._mode = _BAD
        if self._mode != _END:
            return LineFacts(malformed=True)
        return dataclasses.replace(self._facts)

    def to_state(self) -> dict[str, Any]:
        """Plain JSON-able state; ``from_state`` rebuilds an equal scanner."""
        self._compact_capture()
        pending, flag = self._utf8.getstate()
        return {
            "stack": "".join(self._stack),
            "keys": list(self._keys),
            "mode": self._mode,
            "sk": self._str_key,
            "esc": self._esc,
            "tg": self._target,
            "cap": None if self._cap is None else _b64(bytes(self._cap)),
            "cl": self._cap_limit,
            "cc": self._cap_chars,
            "co": self._cap_over,
            "lit": self._lit.decode("ascii"),
            "blk": [
                self._block_active,
                self._block_type,
                self._block_text,
                self._block_text_over,
            ],
            "facts": dataclasses.asdict(self._facts),
            "u8": [_b64(pending), flag],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> LineScanner:
        """Rebuild a scanner; raises ``ValueError`` on a damaged state."""
        scanner = cls()
        try:
            stack = state["stack"]
            if not isinstance(stack, str) or set(stack) - {"o", "a"}:
                raise ValueError("bad stack")
            scanner._stack = list(stack)
            scanner._keys = list(state["keys"])
            if len(scanner._keys) != min(len(stack), TRACK_DEPTH):
                raise ValueError("keys do not match the stack")
            scanner._mode = str(state["mode"])
            if scanner._mode not in "VAOKCNESLX" or len(scanner._mode) != 1:
                raise ValueError("bad mode")
            scanner._str_key = bool(state["sk"])
            scanner._esc = int(state["esc"])
            scanner._target = state["tg"]
            cap = state["cap"]
            scanner._cap = None if cap is None else bytearray(base64.b64decode(cap))
            scanner._cap_limit = int(state["cl"])
            scanner._cap_chars = int(state["cc"])
            scanner._cap_over = bool(state["co"])
            scanner._lit = bytearray(str(state["lit"]).encode("ascii"))
            active, block_type, block_text, block_over = state["blk"]
            scanner._block_active = bool(active)
            scanner._block_type = block_type
            scanner._block_text = block_text
            scanner._block_text_over = bool(block_over)
            scanner._facts = LineFacts(**state["facts"])
            pending, flag = state["u8"]
            scanner._utf8.setstate((base64.b64decode(pending), int(flag)))
        except (KeyError, TypeError, ValueError, UnicodeError) as exc:
            raise ValueError(f"damaged scanner state: {exc}") from exc
        return scanner

    def _compact_capture(self) -> None:
        """Shrink a text capture that already holds more chars than it needs.

        The raw budget assumes the worst escaping (12 bytes a char). Before the
        state travels in a marker, a capture that decodes to more than its
        char budget is re-encoded as exactly budget + 1 chars and closed, so
        the marker carries a few KiB instead of the worst case.
        """
        if self._cap is None or self._target not in ("content", "block_text"):
            return
        budget = self._cap_chars
        text = _decode_prefix(bytes(self._cap))
        if text is None or len(text) <= budget:
            return
        body = json.dumps(text[: budget + 1])[1:-1].encode("ascii")
        try:
            body = json.dumps(text[: budget + 1], ensure_ascii=False)[1:-1].encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: keep the ASCII-escaped form
        self._cap = bytearray(body)
        self._cap_limit = len(body)
        self._cap_over = True

    # -- structure --------------------------------------------------------

    def _bad(self) -> int:
        self._mode = _BAD
        return 0  # the feed loop stops on _BAD; the index is irrelevant

    def _check_utf8(self, data: bytes, start: int, stop: int) -> None:
        view = memoryview(data)
        try:
            for at in range(start, stop, _UTF8_SLICE):
                self._utf8.decode(view[at : min(at + _UTF8_SLICE, stop)])
        except UnicodeDecodeError:
            self._mode = _BAD

    def _structural(self, byte: int, i: int) -> int:
        mode = self._mode
        if mode == _VALUE:
            return self._start_value(byte, i)
        if mode == _ARRAY_START:
            if byte == 0x5D:  # ]
                return self._close(i, "a")
            return self._start_value(byte, i)
        if mode in (_OBJECT_START, _KEY):
            if byte == 0x22:
                self._begin_string(is_key=True, target=None)
                return i + 1
            if mode == _OBJECT_START and byte == 0x7D:  # }
                return self._close(i, "o")
            return self._bad()
        if mode == _COLON:
            if byte == 0x3A:
                self._mode = _VALUE
                return i + 1
            return self._bad()
        if mode == _NEXT:
            top = self._stack[-1]
            if byte == 0x2C:  # ,
                self._mode = _KEY if top == "o" else _VALUE
                return i + 1
            if (byte == 0x7D and top == "o") or (byte == 0x5D and top == "a"):
                return self._close(i, top)
        return self._bad()

    def _value_target(self) -> str | None:
        if len(self._stack) > TRACK_DEPTH:
            return None
        return _PATH_TARGETS.get(tuple(self._keys))

    def _start_value(self, byte: int, i: int) -> int:
        if byte == 0x7B:
            kind = "o"
        elif byte == 0x5B:
            kind = "a"
        elif byte == 0x22:
            kind = "s"
        elif byte in _LITERAL_START:
            kind = "l"
        else:
            return self._bad()
        target = self._value_target()
        self._value_started(target, kind)
        if kind in ("o", "a"):
            if len(self._stack) >= MAX_DEPTH:
                return self._bad()
            self._stack.append(kind)
            if len(self._keys) < TRACK_DEPTH:
                self._keys.append(None if kind == "o" else _ARRAY_LEVEL)
            self._mode = _OBJECT_START if kind == "o" else _ARRAY_START
            return i + 1
        if kind == "s":
            self._begin_string(is_key=False, target=target)
            return i + 1
        self._mode = _LITERAL
        self._target = target
        self._lit.clear()
        return i

    def _close(self, i: int, kind: str) -> int:
        self._stack.pop()
        if len(self._keys) > len(self._stack):
            self._keys.pop()
        if kind == "o" and self._block_active and len(self._stack) == 3:
            self._end_block()
        self._after_value()
        return i + 1

    def _after_value(self) -> None:
        self._mode = _NEXT if self._stack else _END

    # -- what the values mean ----------------------------------------------

    def _reset_content(self, kind: str | None) -> None:
        facts = self._facts
        facts.content_kind = kind
        facts.has_text_block = False
        facts.has_tool_result = False
        facts.text = ""
        facts.text_truncated = False

    def _value_started(self, target: str | None, kind: str) -> None:
        """Reset what a value at ``target`` replaces (duplicate keys: last wins)."""
        facts = self._facts
        if target is None:
            return
        if target == "root":
            facts.is_object = kind == "o"
        elif target in _FACT_FIELDS:
            setattr(facts, target, "")  # present; a string value overwrites it
        elif target == "compact":
            facts.compact_summary = False
        elif target == "sidechain":
            facts.sidechain = False
        elif target == "message":
            facts.message_is_object = kind == "o"
            facts.role = None
            self._reset_content(None)
        elif target == "content":
            self._reset_content({"s": "string", "a": "blocks"}.get(kind, "other"))
        elif target == "block":
            self._block_active = kind == "o"
            self._block_type = None
            self._block_text = None
            self._block_text_over = False
        elif target == "block_type":
            self._block_type = ""
        elif target == "block_text":
            self._block_text = None
            self._block_text_over = False

    def _end_block(self) -> None:
        self._block_active = False
        facts = self._facts
        if self._block_type == "tool_result":
            facts.has_tool_result = True
        elif self._block_type == "text" and self._block_text is not None:
            separator = "\n" if facts.has_text_block else ""
            facts.has_text_block = True
            if not facts.text_truncated:
                joined = facts.text + separator + self._block_text
                if self._block_text_over or len(joined) > TEXT_PREFIX_CHARS:
                    facts.text = joined[:TEXT_PREFIX_CHARS]
                    facts.text_truncated = True
                else:
                    facts.text = joined

    # -- strings -------------------------------------------------------------

    def _begin_string(self, *, is_key: bool, target: str | None) -> None:
        if is_key:
            target = "key" if len(self._stack) <= TRACK_DEPTH else None
        chars = 0
        if target in _SMALL_TARGETS:
            chars = SMALL_FIELD_CHARS
        elif target == "content":
            chars = TEXT_PREFIX_CHARS
        elif target == "block_text":
            facts = self._facts
            used = len(facts.text) + (1 if facts.has_text_block else 0)
            chars = max(TEXT_PREFIX_CHARS - used, 0)
        # Enough raw bytes to decode chars + 1 even at 12 bytes a char, so a
        # capture that overflows always yields more than its budget.
        captured = target in _SMALL_TARGETS or target in ("content", "block_text")
        limit = RAW_PER_CHAR * (chars + 1) if captured else 0
        self._mode = _STRING
        self._str_key = is_key
        self._esc = 0
        self._target = target
        self._cap = bytearray() if limit else None
        self._cap_limit = limit
        self._cap_chars = chars
        self._cap_over = False

    def _capture(self, data: bytes, i: int, j: int) -> None:
        if self._cap is None or i >= j:
            return
        room = self._cap_limit - len(self._cap)
        take = min(room, j - i)
        if take > 0:
            self._cap += data[i : i + take]
        if take < j - i:
            self._cap_over = True

    def _scan_string(self, data: bytes, i: int, stop: int) -> int:
        while i < stop:
            if self._esc:
                byte = data[i]
                if self._esc == -1:
                    if byte not in _ESCAPABLE:
                        return self._bad()
                    self._esc = 4 if byte == 0x75 else 0
                else:
                    if byte not in _HEX:
                        return self._bad()
                    self._esc -= 1
                self._capture(data, i, i + 1)
                i += 1
                continue
            # One C-speed match over plain bytes and complete valid escapes;
            # only an escape cut by the window end is walked byte by byte.
            run = _STRING_RUN.match(data, i, stop)  # matches at least the empty run
            run_end = run.end() if run is not None else i
            self._capture(data, i, run_end)
            if run_end == stop:
                return stop
            byte = data[run_end]
            if byte == 0x22:
                self._end_string()
                return run_end + 1
            if byte == 0x5C:
                self._capture(data, run_end, run_end + 1)
                self._esc = -1
                i = run_end + 1
                continue
            return self._bad()  # a raw control character
        return i

    def _end_string(self) -> None:
        target = self._target
        value: str | None = None
        if self._cap is not None:
            raw = bytes(self._cap)
            value = _decode_prefix(raw) if self._cap_over else _decode_complete(raw)
            if value is None:
                self._bad()
                return
        over = self._cap_over
        self._cap = None
        if self._str_key:
            if target == "key":
                fits = value is not None and not over and len(value) <= SMALL_FIELD_CHARS
                self._keys[-1] = value if fits else None
            self._mode = _COLON
            return
        facts = self._facts
        if target in _FACT_FIELDS:
            setattr(facts, target, "" if over else small_field(value))
        elif target == "block_type":
            self._block_type = "" if over else small_field(value)
        elif target == "content":
            text = value or ""
            facts.text = text[:TEXT_PREFIX_CHARS]
            facts.text_truncated = over or len(text) > TEXT_PREFIX_CHARS
        elif target == "block_text":
            self._block_text = value or ""
            self._block_text_over = over
        self._after_value()

    # -- literals ------------------------------------------------------------

    def _scan_literal(self, data: bytes, i: int, stop: int) -> int:
        match = _LITERAL_END.search(data, i, stop)
        j = stop if match is None else match.start()
        if len(self._lit) + (j - i) > MAX_NUMBER_CHARS:
            return self._bad()
        self._lit += data[i:j]
        if match is not None:
            self._end_literal()
        return j

    def _end_literal(self) -> None:
        if not _LITERAL_OK.fullmatch(self._lit):
            self._bad()
            return
        if self._target == "compact":
            self._facts.compact_summary = self._lit == b"true"
        elif self._target == "sidechain":
            self._facts.sidechain = self._lit == b"true"
        self._after_value()
