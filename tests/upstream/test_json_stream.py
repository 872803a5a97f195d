"""The streaming line scanner agrees with the whole-line parser.

Every generated line (Claude-shaped, random JSON, or corrupted) is fed to a
``LineScanner`` in random chunks, with its state round-tripped through JSON
at every chunk boundary (as it travels in a marker), and must produce the same
facts as ``facts_from_line`` - with the text cut to the streaming prefix.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstate.upstream.claude_lines import (
    COMPACTION_PREFIX,
    TEXT_PREFIX_CHARS,
    LineFacts,
    facts_from_line,
    is_human_turn,
)
from sessionstate.upstream.json_stream import LineScanner


def truncate_text(facts: LineFacts, limit: int = TEXT_PREFIX_CHARS) -> LineFacts:
    """``facts`` with its text cut to ``limit`` chars, as the streaming path keeps it."""
    if len(facts.text) <= limit:
        return facts
    return replace(facts, text=facts.text[:limit], text_truncated=True)

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_long_text = st.builds(lambda piece, n: piece * n, st.text(min_size=1, max_size=3), st.integers(300, 1500))
_texts = (
    st.text(max_size=40)
    | _long_text
    | st.text(max_size=20).map(lambda tail: COMPACTION_PREFIX + tail)
    | st.just("")
)


def _shuffled(mapping: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.permutations(list(mapping.items())).map(dict)


_block = (
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "tool_result", "image", "tool_use"]) | _json},
        optional={"text": _texts | _json, "content": _json, "tool_use_id": st.text(max_size=5)},
    ).flatmap(_shuffled)
    | _json
)
_content = _texts | st.lists(_block, max_size=4) | _json
_message = (
    st.fixed_dictionaries(
        {}, optional={"role": st.sampled_from(["user", "assistant"]), "content": _content, "model": _json}
    ).flatmap(_shuffled)
    | _json
)
_line = (
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["user", "assistant", "summary", "system"]) | _json,
            "uuid": st.uuids().map(str) | _json,
            "timestamp": st.just("2025-06-01T09:30:00.000Z") | _json,
            "userType": st.sampled_from(["external", "internal"]) | _json,
            "isCompactSummary": st.booleans() | _json,
            "isSidechain": st.booleans() | _json,
            "message": _message,
            "parentUuid": _json,
            "cwd": st.text(max_size=10),
        },
    ).flatmap(_shuffled)
    | _json
)


# Lines shaped like real user lines, so that human turns are common.
_text_block = st.fixed_dictionaries({"type": st.just("text"), "text": _texts}).flatmap(_shuffled)
_user_like = st.fixed_dictionaries(
    {
        "type": st.just("user"),
        "message": st.fixed_dictionaries(
            {"role": st.just("user"), "content": _texts | st.lists(_text_block | _block, min_size=1, max_size=4)}
        ).flatmap(_shuffled),
    },
    optional={
        "uuid": st.uuids().map(str),
        "userType": st.just("external"),
        "isCompactSummary": st.booleans(),
        "isSidechain": st.booleans(),
        "timestamp": st.just("2025-06-01T09:30:00.000Z"),
    },
).flatmap(_shuffled)


@st.composite
def encoded_lines(draw: st.DrawFn) -> bytes:
    value = draw(_user_like | _line)
    raw = json.dumps(
        value,
        ensure_ascii=draw(st.booleans()),
        separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])),
    ).encode("utf-8")
    mutation = draw(st.sampled_from(["none", "none", "none", "cut", "insert", "pad"]))
    if mutation == "cut" and raw:
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    elif mutation == "insert":
        at = draw(st.integers(0, len(raw)))
        junk = draw(st.sampled_from([b"x", b"\\", b'"', b"}", b"]", b",", b"\xc3", b"\x00", b" ", b"\r", b"1"]))
        raw = raw[:at] + junk + raw[at:]
    elif mutation == "pad":
        raw = b" \t" + raw + b" \r"
    return raw


def stream(raw: bytes, cuts: list[int], round_trip: bool = True) -> LineFacts:
    scanner = LineScanner()
    previous = 0
    for cut in sorted(set(cuts)) + [len(raw)]:
        scanner.feed(raw, previous, cut)
        previous = cut
        if round_trip:
            scanner = LineScanner.from_state(json.loads(json.dumps(scanner.to_state())))
    return scanner.finish()


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_streaming_facts_equal_whole_line_facts(data: st.DataObject) -> None:
    raw = data.draw(encoded_lines())
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=8))
    expected = truncate_text(facts_from_line(raw), TEXT_PREFIX_CHARS)
    assert stream(raw, cuts) == expected


def test_byte_at_a_time() -> None:
    raw = json.dumps(
        {"type": "user", "uuid": "u-1", "message": {"content": [{"text": "h\u00e9\U0001f600 \\\"q\"", "type": "text"}]}},
        ensure_ascii=False,
    ).encode()
    facts = stream(raw, list(range(len(raw))))
    assert facts == facts_from_line(raw)
    assert facts.text == "h\u00e9\U0001f600 \\\"q\""


def test_sidechain_flag_is_seen_wherever_it_sits_in_a_streamed_line() -> None:
    text = "Find every caller of redirect() in src/ " * 200
    for before in (True, False):  # the flag ahead of the long text, or after it
        line: dict[str, Any] = {"type": "user", "userType": "external"}
        if before:
            line["isSidechain"] = True
        line["message"] = {"role": "user", "content": text}
        if not before:
            line["isSidechain"] = True
        raw = json.dumps(line).encode()
        facts = stream(raw, list(range(0, len(raw), 61)))
        assert facts.sidechain and facts.text_truncated
        assert not is_human_turn(facts)
    duplicate = b'{"isSidechain":true,"type":"user","message":{"content":"hi"},"isSidechain":false}'
    assert is_human_turn(stream(duplicate, list(range(len(duplicate)))))  # last key wins, as in json


def test_long_text_is_cut_to_prefix_without_splitting_escapes() -> None:
    text = "\U0001f600" * 5000
    raw = json.dumps({"type": "user", "message": {"content": text}}).encode()  # \ud83d\ude00 escapes
    facts = stream(raw, list(range(0, len(raw), 997)))
    assert facts.text_truncated
    assert facts.text == text[:TEXT_PREFIX_CHARS]


def test_too_deep_nesting_is_malformed_and_state_stays_small() -> None:
    raw = b"[" * 5000 + b"]" * 5000
    scanner = LineScanner()
    scanner.feed(raw, 0, 2500)
    assert len(json.dumps(scanner.to_state())) < 4096
    scanner.feed(raw, 2500, len(raw))
    assert scanner.finish().malformed


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type":"user","message":{"content":"\\u12x4"}}',
        b'{"type":"user","message":{"content":"\\u12"}}',
        b'{"x":"\\u12x4","type":"user","message":{"content":"hi"}}',
        b'{"x":"\\q","type":"user","message":{"content":"hi"}}',
        b'{"type":"user","message":{"content":"a\\"}}',
        b'{"type":"user","message":{"content":"\x01"}}',
        b'{"type":"user","message":{"content":"\xe2\x82"}}',
        b'{"type":"user","message":{"content":"hi"},"n":-Infinity}',
        b'{"type":"user","message":{"content":"hi"},"n":01}',
        b'{"type":"user","message":{"content":"hi"},"n":1.}',
        b'{"type":"user","message":{"content":"hi"},"n":[1,]}',
        b'{"type":"user","message":{"content":"hi"},}',
        b'{"type":"user","message":{"content":"hi"}]',
        b'{"type":"user","message":{"content":"hi"}}}',
        b'{"type":"user" "message":{"content":"hi"}}',
        b'{"type":"user","message":{"content":"hi"},"n":tru}',
        b'{"type":"user","message":{"content":"hi"},"n":' + b"9" * 5000 + b"}",
        b"",
        b"\xef\xbb\xbf{}",
    ],
)
def test_malformed_edge_cases_agree(raw: bytes) -> None:
    assert facts_from_line(raw).malformed
    assert stream(raw, list(range(len(raw)))).malformed
    assert stream(raw, []).malformed


def test_valid_edge_cases_agree() -> None:
    for raw in [
        b'{"t\\u0079pe":"user","message":{"content":"\\ud83d\\ude00 ok"}}',
        b'  {"type":"user","isCompactSummary":true,"message":{"content":"x"}}\r',
        b'{"type":"user","message":{"content":"hi"},"n":-0.5e+3,"m":[true,false,null,{}]}',
        b"12",
        b'"user"',
    ]:
        assert stream(raw, list(range(len(raw)))) == facts_from_line(raw), raw
