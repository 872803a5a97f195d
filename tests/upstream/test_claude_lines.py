"""Classification of single transcript lines, on realistic fixture lines."""

from __future__ import annotations

import json

import pytest

from sessionstate.upstream.claude_lines import (
    facts_from_line,
    is_human_turn,
    parse_timestamp,
)
from tests.upstream.jsonl_fixtures import TranscriptBuilder, encode, realistic_session


def classify(line: dict | bytes) -> bool:
    raw = line if isinstance(line, bytes) else encode(line)
    return is_human_turn(facts_from_line(raw.rstrip(b"\n")))


@pytest.fixture
def builder() -> TranscriptBuilder:
    return TranscriptBuilder("3f1c0a52-8d3e-4f0b-9a77-0c6d2b1e9f10")


def test_string_prompt_and_text_blocks_are_human(builder: TranscriptBuilder) -> None:
    assert classify(builder.user_prompt("Why is CI red?"))
    assert classify(builder.user_text_blocks("first", "second"))
    facts = facts_from_line(encode(builder.user_text_blocks("first", "second")).rstrip())
    assert facts.text == "first\nsecond"


@pytest.mark.parametrize(
    "make",
    [
        lambda b: b.tool_result("toolu_1", "ok"),
        lambda b: b.compaction(),
        lambda b: b.compaction_without_flag(),
        lambda b: b.assistant_text("hello"),
        lambda b: b.assistant_tool_use("Read", {"file_path": "/x"})[0],
        lambda b: b.summary(),
        lambda b: b.system(),
        lambda b: b.progress(),
        lambda b: b.file_history_snapshot(),
        lambda b: b.permission_mode(),
        lambda b: b.unknown_type(),
        lambda b: b.sidechain_prompt("Find every caller of redirect() in src/"),
    ],
    ids=[
        "tool_result", "compaction", "compaction-text-only", "assistant-text",
        "assistant-tool_use", "summary", "system", "progress",
        "file-history-snapshot", "permission-mode", "unknown-type", "sidechain-prompt",
    ],
)
def test_non_human_lines(builder: TranscriptBuilder, make) -> None:
    assert not classify(make(builder))


def test_user_type_other_than_external_is_not_human(builder: TranscriptBuilder) -> None:
    line = builder.user_prompt("from a hook")
    line["userType"] = "internal"
    assert not classify(line)
    del line["userType"]  # absent userType is allowed
    assert classify(line)


def test_tool_result_next_to_text_is_not_human(builder: TranscriptBuilder) -> None:
    line = builder.tool_result("toolu_9", "done")
    line["message"]["content"].append({"type": "text", "text": "and more"})
    assert not classify(line)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type":"user","message":{"role":"user","content":"hi"}',  # cut short
        b'{"type":"user","message":{"role":"user","content":"hi"}} x',
        b'{"type":"user","message":{"content":"hi\x01"}}',  # raw control char
        b'{"type":"user","message":{"content":"\\q"}}',  # bad escape
        b'{"type":"user","message":{"content":"hi"},"n":NaN}',
        b'{"type":"user","message":{"content":"\xff"}}',  # not UTF-8
        b"",
        b"   ",
        b'["user"]',
    ],
)
def test_malformed_or_non_object_lines_are_skipped(raw: bytes) -> None:
    assert not classify(raw)


def test_realistic_session_humans(builder: TranscriptBuilder) -> None:
    lines, humans = realistic_session(builder)
    found = {line["uuid"] for line in lines if classify(line)}
    assert found == humans


def test_timestamps() -> None:
    assert parse_timestamp("2025-06-01T09:30:00.000Z") == 1748770200.0
    assert parse_timestamp("2025-06-01T09:30:00") == 1748770200.0
    assert parse_timestamp("yesterday") is None
    assert parse_timestamp(None) is None


def test_duplicate_keys_last_wins() -> None:
    raw = b'{"type":"assistant","type":"user","message":{"content":[{"type":"tool_result"}],"content":"hi"}}'
    assert json.loads(raw)["type"] == "user"
    assert classify(raw)


def test_sidechain_prompts_are_never_human(builder: TranscriptBuilder) -> None:
    # The sub-agent prompt as it appears in a real transcript: external, string content.
    raw = (
        b'{"type":"user","isSidechain":true,"userType":"external","parentUuid":null,'
        b'"message":{"role":"user","content":"Find every caller of redirect() in src/"}}'
    )
    assert facts_from_line(raw).sidechain
    assert not classify(raw)
    blocks = builder.user_text_blocks("Summarise the diff")
    blocks["isSidechain"] = True
    assert not classify(blocks)
    # Only a literal true marks a sidechain; false, absent or odd values do not.
    for value in (False, None, "true", 1):
        line = builder.user_prompt("typed by a person")
        line["isSidechain"] = value
        assert classify(line), value
    line = builder.user_prompt("typed by a person")
    del line["isSidechain"]
    assert classify(line)
