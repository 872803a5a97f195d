"""Local Claude JSONL provider against real files in a temporary projects root."""

from __future__ import annotations

import json
import os
import random
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from sessionstate.upstream.claude_lines import TEXT_PREFIX_CHARS
from sessionstate.upstream.providers import CheckResult, CheckStatus, ClaudeJsonlProvider
from sessionstate.upstream.providers import claude_jsonl
from tests.upstream.jsonl_fixtures import (
    TranscriptBuilder,
    append_bytes,
    encode,
    realistic_session,
)

MiB = 1024 * 1024


@pytest.fixture
def root(tmp_path: Path) -> Path:
    projects = tmp_path / "projects"
    (projects / "-home-dev-other-project").mkdir(parents=True)
    return projects


@pytest.fixture
def builder() -> TranscriptBuilder:
    return TranscriptBuilder("7d2f5a10-4c1e-4b8a-9f3d-2e6c8b0a1d55")


def offset_of(result: CheckResult) -> int:
    assert result.marker is not None
    return int(json.loads(result.marker)["off"])


def ids(result: CheckResult) -> list[str]:
    return [activity.activity_id for activity in result.activities]


def drain(provider: ClaudeJsonlProvider, thread_id: str, marker: str | None, limit: int = 10_000) -> tuple[list[str], str | None]:
    """Check until nothing is left to read; return all activity ids found."""
    found: list[str] = []
    for _ in range(limit):
        result = provider.check(thread_id, marker)
        assert result.status is CheckStatus.FOUND, result.detail
        found += ids(result)
        if result.marker == marker:
            return found, marker
        marker = result.marker
    raise AssertionError("the scan never settled")


def test_activity_found_exactly_once_and_marker_advanced(root: Path, builder: TranscriptBuilder) -> None:
    path = builder.path_under(root)
    lines, humans = realistic_session(builder)
    path.write_bytes(b"".join(encode(line) for line in lines))
    provider = ClaudeJsonlProvider(root)

    first = provider.check(builder.session_id, None)
    assert first.status is CheckStatus.FOUND
    assert set(ids(first)) == humans and len(ids(first)) == len(humans)
    assert offset_of(first) == path.stat().st_size
    prompt = next(a for a in first.activities if a.text.startswith("Fix"))
    assert prompt.occurred_at is not None and not prompt.text_truncated

    second = provider.check(builder.session_id, first.marker)
    assert second.activities == [] and offset_of(second) == offset_of(first)

    later = builder.user_prompt("ship it")
    append_bytes(path, encode(builder.assistant_text("ok")) + encode(later))
    third = provider.check(builder.session_id, second.marker)
    assert ids(third) == [later["uuid"]] and third.activities[0].text == "ship it"
    # A fresh provider (e.g. after a gateway restart) resumes from the marker alone.
    assert ClaudeJsonlProvider(root).check(builder.session_id, third.marker).activities == []


def test_partial_trailing_line_is_not_classified_until_complete(root: Path, builder: TranscriptBuilder) -> None:
    path = builder.path_under(root)
    head = encode(builder.assistant_text("hi"))
    prompt = builder.user_prompt("naïve café — finish me")
    raw = encode(prompt)
    cut = raw.index("é".encode()) + 1  # mid UTF-8 character
    path.write_bytes(head + raw[:cut])
    provider = ClaudeJsonlProvider(root)

    result = provider.check(builder.session_id, None)
    assert result.activities == [] and offset_of(result) == len(head)
    append_bytes(path, raw[cut:-1])  # the whole JSON object, but no newline yet
    result = provider.check(builder.session_id, result.marker)
    assert result.activities == [] and offset_of(result) == len(head)
    append_bytes(path, b"\n")
    result = provider.check(builder.session_id, result.marker)
    assert ids(result) == [prompt["uuid"]] and result.activities[0].text == "naïve café — finish me"
    assert offset_of(result) == path.stat().st_size


def test_malformed_and_unknown_lines_are_skipped(root: Path, builder: TranscriptBuilder) -> None:
    path = builder.path_under(root)
    before, after = builder.user_prompt("one"), builder.user_prompt("two")
    path.write_bytes(
        encode(before) + b'{"type":"user","message":{"content":"trunc\n' + b"\xff\xfe not json\n"
        + b"\n" + encode(builder.unknown_type()) + encode(after)
    )
    result = ClaudeJsonlProvider(root).check(builder.session_id, None)
    assert ids(result) == [before["uuid"], after["uuid"]]
    assert offset_of(result) == path.stat().st_size


SIDECHAIN_LINE = (
    b'{"type":"user","isSidechain":true,"userType":"external","parentUuid":null,'
    b'"message":{"role":"user","content":"Find every caller of redirect() in src/"}}\n'
)


def test_sidechain_prompt_is_not_reported(root: Path, builder: TranscriptBuilder) -> None:
    path = builder.path_under(root)
    path.write_bytes(encode(builder.user_prompt("history")))
    provider = ClaudeJsonlProvider(root)
    primed = provider.check(builder.session_id, None)
    after = builder.user_prompt("a real person again")
    append_bytes(path, SIDECHAIN_LINE + encode(builder.sidechain_prompt("Run the tests")) + encode(after))
    result = provider.check(builder.session_id, primed.marker)
    assert ids(result) == [after["uuid"]]
    assert offset_of(result) == path.stat().st_size


def test_oversized_sidechain_prompt_streamed_through_is_not_reported(
    root: Path, builder: TranscriptBuilder
) -> None:
    path = builder.path_under(root)
    cap = 512
    long_prompt = builder.sidechain_prompt("Audit every module under src/ and list callers. " * 100)
    human = builder.user_prompt("typed after the sub-agent ran")
    raw = encode(long_prompt)
    assert len(raw) > 4 * cap
    path.write_bytes(raw + encode(human))
    found, marker = drain(ClaudeJsonlProvider(root, scan_cap_bytes=cap), builder.session_id, None)
    assert found == [human["uuid"]]
    assert marker is not None and json.loads(marker)["off"] == path.stat().st_size
    # The flag after the long text (key order is not fixed) is honoured too.
    path.write_bytes(raw.replace(b'"isSidechain":true,', b"")[:-2] + b',"isSidechain":true}\n')
    found, _ = drain(ClaudeJsonlProvider(root, scan_cap_bytes=cap), builder.session_id, None)
    assert found == []


def test_missing_uuid_falls_back_to_byte_offset(root: Path, builder: TranscriptBuilder) -> None:
    path = builder.path_under(root)
    first = encode(builder.assistant_text("x"))
    line = builder.user_prompt("no uuid here")
    del line["uuid"]
    path.write_bytes(first + encode(line))
    result = ClaudeJsonlProvider(root).check(builder.session_id, None)
    assert ids(result) == [f"offset:{len(first)}"]


def test_three_mib_line_is_streamed_across_checks_in_bounded_memory(
    root: Path, builder: TranscriptBuilder
) -> None:
    path = builder.path_under(root)
    huge_text = ("Paste of a very long log line: " + "é∂ 0123456789 \t" * 10) * 15_000
    huge = builder.user_prompt(huge_text)
    small = builder.user_prompt("and a short one after it")
    raw = encode(huge)
    assert len(raw) >= 3 * MiB
    path.write_bytes(encode(builder.summary()) + raw + encode(small))
    del raw, huge, huge_text
    provider = ClaudeJsonlProvider(root)  # default cap: 1 MiB

    marker: str | None = None
    checks_without_result = 0
    found = []
    tracemalloc.start()
    try:
        for _ in range(10):
            tracemalloc.reset_peak()
            result = provider.check(builder.session_id, marker)
            _, peak = tracemalloc.get_traced_memory()
            assert peak < 1.5 * MiB, f"check peaked at {peak} bytes"
            assert result.status is CheckStatus.FOUND
            assert len(result.marker or "") < 64 * 1024  # the mid-line state stays small
            marker = result.marker
            if result.activities:
                found = result.activities
                break
            checks_without_result += 1
    finally:
        tracemalloc.stop()
    assert checks_without_result >= 3
    assert [a.activity_id for a in found] == [builder_uuid(path, 1), small["uuid"]]
    streamed = found[0]
    assert streamed.text_truncated and len(streamed.text) == TEXT_PREFIX_CHARS
    assert streamed.text.startswith("Paste of a very long log line: é∂ 0123")
    assert offset_of(result) == path.stat().st_size


def builder_uuid(path: Path, index: int) -> str:
    with open(path, "rb") as handle:
        for n, line in enumerate(handle):
            if n == index:
                return str(json.loads(line)["uuid"])
    raise AssertionError("no such line")


def test_each_check_reads_at_most_the_cap(
    root: Path, builder: TranscriptBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = builder.path_under(root)
    lines, _ = realistic_session(builder)
    path.write_bytes(b"".join(encode(line) for line in lines) * 20)
    cap = 700
    read_at: list[tuple[int, int]] = []
    real_pread = os.pread

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        data = real_pread(fd, size, offset)
        read_at.append((offset, len(data)))
        return data

    monkeypatch.setattr(claude_jsonl.os, "pread", counting_pread)
    provider = ClaudeJsonlProvider(root, scan_cap_bytes=cap)
    marker = None
    for _ in range(2000):
        read_at.clear()
        result = provider.check(builder.session_id, marker)
        scanned = sum(size for offset, size in read_at if offset != 0)
        assert scanned <= cap
        if result.marker == marker:
            break
        marker = result.marker
    assert offset_of(result) == path.stat().st_size


def test_missing_file_is_missing(root: Path, builder: TranscriptBuilder) -> None:
    provider = ClaudeJsonlProvider(root)
    assert provider.check(builder.session_id, None).status is CheckStatus.MISSING
    path = builder.path_under(root)
    path.write_bytes(encode(builder.user_prompt("hi")))
    found = provider.check(builder.session_id, None)
    assert found.status is CheckStatus.FOUND
    path.unlink()
    gone = provider.check(builder.session_id, found.marker)
    assert gone.status is CheckStatus.MISSING and gone.marker == found.marker


def test_file_found_under_any_project_slug(root: Path) -> None:
    builder = TranscriptBuilder(cwd="/srv/elsewhere")
    prompt = builder.user_prompt("hello from another project")
    builder.path_under(root).write_bytes(encode(prompt))
    assert ids(ClaudeJsonlProvider(root).check(builder.session_id, None)) == [prompt["uuid"]]


def test_absent_root_and_bad_input_are_errors_not_misses(tmp_path: Path, root: Path) -> None:
    assert ClaudeJsonlProvider(tmp_path / "nope").check("abc", None).status is CheckStatus.ERROR
    provider = ClaudeJsonlProvider(root)
    assert provider.check("../../etc/passwd", None).status is CheckStatus.ERROR
    assert provider.check("abc", "{not a marker").status is CheckStatus.ERROR
    assert provider.check("abc", '{"v":1,"off":-4}').status is CheckStatus.ERROR


def test_unreadable_transcript_is_an_error(
    root: Path, builder: TranscriptBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = builder.path_under(root)
    path.write_bytes(encode(builder.user_prompt("hi")))
    provider = ClaudeJsonlProvider(root)
    if os.geteuid() != 0:  # root ignores file modes
        path.chmod(0)
        assert provider.check(builder.session_id, None).status is CheckStatus.ERROR
        path.chmod(0o600)
    real_open = os.open

    def denied(file, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(file).endswith(".jsonl"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(claude_jsonl.os, "open", denied)
    result = provider.check(builder.session_id, "5")
    assert result.status is CheckStatus.ERROR and result.marker == "5"
    assert "Permission denied" in (result.detail or "")


def test_unreadable_project_directory_is_an_error_not_a_miss(
    root: Path, builder: TranscriptBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_stat = os.stat

    def denied(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).endswith(".jsonl"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(claude_jsonl.os, "stat", denied)
    assert ClaudeJsonlProvider(root).check(builder.session_id, None).status is CheckStatus.ERROR


def test_transcript_path_that_is_a_directory_is_an_error(root: Path, builder: TranscriptBuilder) -> None:
    builder.path_under(root).mkdir()
    assert ClaudeJsonlProvider(root).check(builder.session_id, None).status is CheckStatus.ERROR


def test_replaced_transcript_is_rescanned_from_the_start(root: Path, builder: TranscriptBuilder) -> None:
    path = builder.path_under(root)
    old = [builder.user_prompt(f"old {n}") for n in range(3)]
    path.write_bytes(b"".join(encode(line) for line in old))
    provider = ClaudeJsonlProvider(root)
    marker = provider.check(builder.session_id, None).marker

    # Deleted and re-created, larger than before: the offset alone would land mid-file.
    fresh = TranscriptBuilder(builder.session_id, cwd="/tmp/other")
    new = [fresh.user_prompt(f"new prompt number {n}") for n in range(5)]
    path.unlink()
    path.write_bytes(b"".join(encode(line) for line in new))
    result = provider.check(builder.session_id, marker)
    assert ids(result) == [line["uuid"] for line in new]
    assert "replaced" in (result.detail or "")

    # Truncated below the marker: also rescanned.
    path.write_bytes(encode(new[0]))
    assert ids(provider.check(builder.session_id, result.marker)) == [new[0]["uuid"]]


def test_plain_offset_marker_is_accepted(root: Path, builder: TranscriptBuilder) -> None:
    path = builder.path_under(root)
    first, second = encode(builder.user_prompt("a")), builder.user_prompt("b")
    path.write_bytes(first + encode(second))
    assert ids(ClaudeJsonlProvider(root).check(builder.session_id, str(len(first)))) == [second["uuid"]]


def test_concurrent_append_while_checking(root: Path, builder: TranscriptBuilder) -> None:
    """A writer thread appends in ragged pieces while checks run; nothing lost or doubled."""
    path = builder.path_under(root)
    path.touch()
    rng = random.Random(6)
    lines: list[dict] = []
    humans: list[str] = []
    for n in range(300):
        kind = rng.random()
        if kind < 0.35:
            text = f"prompt {n} " + "ü€" * rng.randint(0, 30) + ("x" * rng.randint(3000, 9000) if n % 25 == 0 else "")
            line = builder.user_prompt(text)
            humans.append(line["uuid"])
        elif kind < 0.55:
            line, _ = builder.assistant_tool_use("Bash", {"command": f"ls {n}"})
        elif kind < 0.75:
            line = builder.tool_result(f"toolu_{n}", "out " * rng.randint(1, 400))
        else:
            line = rng.choice([builder.progress(), builder.system(), builder.summary(), builder.assistant_text("ok")])
        lines.append(line)
    stream = b"".join(encode(line) for line in lines)
    done = threading.Event()

    def writer() -> None:
        at = 0
        while at < len(stream):
            step = rng.randint(1, 2500)
            append_bytes(path, stream[at : at + step])
            at += step
            time.sleep(0.0005)
        done.set()

    provider = ClaudeJsonlProvider(root, scan_cap_bytes=2048)  # small: streamed lines too
    thread = threading.Thread(target=writer)
    thread.start()
    found: list[str] = []
    marker = None
    checks = 0
    while not done.is_set():
        result = provider.check(builder.session_id, marker)
        assert result.status is CheckStatus.FOUND
        found += ids(result)
        marker = result.marker
        checks += 1
    thread.join()
    rest, marker = drain(provider, builder.session_id, marker)
    found += rest
    assert checks > 10
    assert found == humans
    assert offset_of(provider.check(builder.session_id, marker)) == len(stream)
