"""The sessions_history sanitiser: corpus of real-looking transcripts plus properties."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstate.tools.sanitize import (
    OMITTED_TEXT,
    REDACTED,
    TRUNCATION_MARKER,
    build_history_view,
    normalize_assistant_text,
    redact_secrets,
)
from tests.tools.sanitizer_corpus import NORMALIZE_CASES, REDACTION_CASES, UNTOUCHED


def _json_size(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


# --- normalisation corpus ----------------------------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in NORMALIZE_CASES],
                         ids=[c[0] for c in NORMALIZE_CASES])
def test_normalize_corpus(raw: str, expected: str) -> None:
    assert normalize_assistant_text(raw) == expected
    assert normalize_assistant_text(expected) == expected


@pytest.mark.parametrize("text", UNTOUCHED)
def test_ordinary_text_survives_byte_for_byte(text: str) -> None:
    assert normalize_assistant_text(text) == text
    assert redact_secrets(text) == (text, False)


# --- redaction corpus ----------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in REDACTION_CASES],
                         ids=[c[0] for c in REDACTION_CASES])
def test_redaction_corpus(raw: str, expected: str | None) -> None:
    text, changed = redact_secrets(raw)
    assert text == (raw if expected is None else expected)
    assert changed is (expected is not None)
    assert redact_secrets(text) == (text, False)  # stable on its own output


# --- the history view ----------------------------------------------------------------------


def test_view_filters_tools_normalises_and_redacts() -> None:
    messages = [
        {"role": "user", "text": "deploy it; password=hunter2x", "provenance": {"kind": "user"}},
        {"role": "assistant", "text": "<think>ok</think>Calling.", "toolCalls": [{"name": "exec"}]},
        {"role": "tool", "text": "exit 0", "toolResult": {"ok": True}},
        {"role": "assistant", "text": "Done <|im_end|>"},
    ]
    view = build_history_view(messages)
    assert view["messages"] == [
        {"role": "user", "text": f"deploy it; password={REDACTED}", "provenance": {"kind": "user"}},
        {"role": "assistant", "text": "Calling."},
        {"role": "assistant", "text": "Done"},
    ]
    assert view["truncated"] is False
    assert view["droppedMessages"] == 0
    assert view["contentTruncated"] is False
    assert view["contentRedacted"] is True
    assert view["bytes"] == _json_size(view["messages"])
    assert messages[1]["text"] == "<think>ok</think>Calling."  # input untouched


def test_view_with_tools_keeps_and_sanitises_tool_payloads() -> None:
    key = "ghp_" + "a1" * 18
    messages = [
        {"role": "assistant", "text": "", "toolCalls": [{"name": "exec", "args": {"env": key}}]},
        {"role": "tool", "text": "x" * 5000, "toolResult": {"stdout": "token=abcd1234"}},
    ]
    view = build_history_view(messages, include_tools=True)
    call, result = view["messages"]
    assert call["toolCalls"] == [{"name": "exec", "args": {"env": REDACTED}}]
    assert result["toolResult"] == {"stdout": f"token={REDACTED}"}
    assert result["text"] == "x" * 4000 + TRUNCATION_MARKER
    assert view["contentTruncated"] and view["contentRedacted"]
    assert not view["truncated"]


def test_user_text_is_not_normalised() -> None:
    view = build_history_view([{"role": "user", "text": "what does <think>x</think> do?"}])
    assert view["messages"][0]["text"] == "what does <think>x</think> do?"


def test_long_text_cut_at_max_text_chars() -> None:
    view = build_history_view([{"role": "user", "text": "é" * 4001}])
    assert view["messages"][0]["text"] == "é" * 4000 + TRUNCATION_MARKER
    assert view["contentTruncated"] is True
    assert view["truncated"] is False
    exact = build_history_view([{"role": "user", "text": "é" * 4000}])
    assert exact["messages"][0]["text"] == "é" * 4000 and not exact["contentTruncated"]


def test_oldest_rows_are_dropped_to_fit() -> None:
    messages = [{"role": "user", "text": f"{i:04d}" + "x" * 3000} for i in range(60)]
    view = build_history_view(messages)
    kept = view["messages"]
    assert _json_size(view) <= 80 * 1024
    assert view["truncated"] is True
    assert view["droppedMessages"] == 60 - len(kept) > 0
    assert [row["text"][:4] for row in kept] == [f"{i:04d}" for i in range(60 - len(kept), 60)]
    # and the budget is used: one more row would not have fitted
    assert _json_size(view) + _json_size(messages[0]) + 1 > 80 * 1024


def test_oversized_row_is_replaced_not_dropped() -> None:
    huge = {"role": "tool", "text": "ok", "toolResult": {"lines": ["y" * 3000] * 40}}
    messages = [{"role": "user", "text": "first"}, huge, {"role": "assistant", "text": "last"}]
    view = build_history_view(messages, include_tools=True)
    assert view["messages"] == [
        {"role": "user", "text": "first"},
        {"role": "tool", "text": OMITTED_TEXT},
        {"role": "assistant", "text": "last"},
    ]
    assert view["truncated"] is True and view["contentTruncated"] is True
    assert view["droppedMessages"] == 0


def test_odd_rows_are_made_serialisable() -> None:
    view = build_history_view(
        [{"role": "assistant", "text": None, "at": object(), "n": float("nan"), 3: "\ud800"}]
    )
    row = view["messages"][0]
    assert row["text"] == ""
    assert isinstance(row["at"], str) and row["n"] == "nan" and row["3"] == "?"
    json.dumps(view, allow_nan=False)


def test_bad_budgets_and_rows_are_refused() -> None:
    with pytest.raises(ValueError):
        build_history_view([], max_bytes=50)
    with pytest.raises(ValueError):
        build_history_view([], max_text_chars=0)
    with pytest.raises(TypeError):
        build_history_view(["not a row"])  # type: ignore[list-item]


# --- properties ----------------------------------------------------------------------------

# Text built from fragments of the syntax the normaliser cares about, so that the
# generator actually hits tags, tokens and markers (plain st.text() rarely would).
_FRAGMENTS = st.sampled_from([
    "<think>", "</think>", "<thinking>", "</thinking", "<tool_call>", "</tool_call>",
    "<function_calls>", "</function_calls>", '<invoke name="x">', "</invoke>",
    "</minimax:tool_call>", "<relevant-memories>", "</relevant_memories>", "<|im_end|>",
    "<｜Assistant｜>", "<|", "|>", "｜>", "[Tool Call: x]", "\nArguments: {", "[Tool Result ",
    "[Historical context: ", "]", "[", "{", "}", '"', "<", ">", "/", " ", "\n", "\n\n",
    "think", "tool_call", "a", "b < c", "<div>", "<tool_call/>",
])
_TEXT = st.one_of(st.text(max_size=200), st.lists(_FRAGMENTS | st.text(max_size=5), max_size=40).map("".join))


@given(_TEXT)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_normalisation_is_idempotent_and_never_grows(text: str) -> None:
    once = normalize_assistant_text(text)
    assert len(once) <= len(text)
    assert normalize_assistant_text(once) == once


@given(_TEXT)
def test_redaction_is_stable(text: str) -> None:
    once, _ = redact_secrets(text)
    assert redact_secrets(once) == (once, False)


_ROW = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system"]), "text": _TEXT},
    optional={
        "toolCalls": st.lists(st.fixed_dictionaries({"name": st.text(max_size=10),
                                                     "args": st.text(max_size=3000)}), max_size=3),
        "toolResult": st.text(max_size=6000),
        "provenance": st.fixed_dictionaries({"kind": st.sampled_from(["user", "inter_session"]),
                                             "sourceSessionKey": st.text(max_size=30)}),
        "big": st.text(min_size=3000, max_size=5000).map(lambda s: [s] * 4),
    },
)


@given(
    messages=st.lists(_ROW, max_size=30),
    include_tools=st.booleans(),
    max_bytes=st.integers(min_value=400, max_value=20_000),
    max_text_chars=st.integers(min_value=1, max_value=4000),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_view_is_bounded_and_counts_dropped_rows_exactly(
    messages: list[dict], include_tools: bool, max_bytes: int, max_text_chars: int
) -> None:
    view = build_history_view(
        messages, include_tools=include_tools, max_bytes=max_bytes, max_text_chars=max_text_chars
    )
    assert _json_size(view) <= max_bytes
    assert view["bytes"] == _json_size(view["messages"])

    eligible = [m for m in messages if include_tools or m["role"] != "tool"]
    kept = view["messages"]
    assert view["droppedMessages"] == len(eligible) - len(kept)
    # what is kept is the newest suffix, in order, each row or its placeholder
    suffix = eligible[len(eligible) - len(kept):]
    for original, row in zip(suffix, kept, strict=True):
        assert row["role"] == original["role"]
        if row["text"] == OMITTED_TEXT and set(row) == {"role", "text"}:
            continue
        if not include_tools:
            assert "toolCalls" not in row and "toolResult" not in row
    omitted = sum(1 for row in kept if row["text"] == OMITTED_TEXT and set(row) == {"role", "text"})
    assert view["truncated"] == (view["droppedMessages"] > 0 or omitted > 0)


# --- degenerate and adversarial input ---------------------------------------------------


def test_repeated_cut_off_tags_are_peeled_in_one_go() -> None:
    assert normalize_assistant_text("Answer. <tool_call <tool_call <TOOL_CALL ") == "Answer."
    assert normalize_assistant_text("x <invoke") == "x <invoke"


def test_text_that_never_settles_is_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    import sessionstate.tools.sanitize as sanitize

    needs_two_passes = "<thi<think>x</think>nk>hidden</think>shown"
    monkeypatch.setattr(sanitize, "_MAX_PASSES", 1)
    assert sanitize.normalize_assistant_text(needs_two_passes) == ""
    assert sanitize.normalize_assistant_text("plain") == "plain"


@pytest.mark.parametrize(
    "text",
    [
        "sk-" * 20_000,
        "Bearer " * 20_000,
        "<tool_call " * 20_000,
        "[Tool Call: " * 5_000,
        "<|" * 20_000,
        "<tool_c" * 20 + "<tool_call>x</tool_call>" + "all>y</tool_call>" * 20,
    ],
)
def test_degenerate_input_is_handled(text: str) -> None:
    once = normalize_assistant_text(text)
    assert normalize_assistant_text(once) == once and len(once) <= len(text)
    redacted, _ = redact_secrets(text)
    assert redact_secrets(redacted)[0] == redacted
