"""The OpenCode provider: what counts in an export (from OpenCode's export shape), change
detection, a sequence going backwards, and the export's bounds, against the real ``opencode``
where it is installed (upstream_tools.OpenCodeDriver)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sessionstate.upstream.providers import CheckStatus, OpenCodeProvider
from sessionstate.upstream.providers.opencode_cli import encode_marker, human_turns

from tests.upstream.upstream_tools import OpenCodeDriver


def user(message_id: str, *parts: dict[str, object]) -> dict[str, object]:
    return {"info": {"id": message_id, "role": "user", "time": {"created": 1_000}}, "parts": list(parts)}


def text(value: str, **flags: object) -> dict[str, object]:
    return {"type": "text", "text": value, **flags}


def test_what_counts_as_a_typed_turn() -> None:
    mention = {"type": "file", "source": {"text": {"value": "@src/app.py"}}}
    messages = [
        user("msg_01", text("fix the build")),
        user("msg_02", text("fix the build")),  # a repeat of an earlier message
        user("msg_03", text("look at @src/app.py please"), mention),
        user("msg_04", mention),  # file only
        user("msg_05", {"type": "image", "url": "data:"}),  # image only
        user("msg_06", {"type": "compaction", "auto": True}),
        user("msg_07", text("Continue if you have next steps", metadata={"compaction_continue": True})),
        user("msg_08", text("The following tool was executed by the user")),
        user("msg_09", text("added by a plugin", synthetic=True), text("typed", ignored=True)),
        {"info": {"id": "msg_10", "role": "assistant", "time": {"created": 1_000}}, "parts": [text("answer")]},
        {"info": {"id": "msg_11", "role": "user", "time": {}}, "parts": [text("no creation time")]},
        user("msg_12", text("a real turn")),
    ]
    assert [(a.activity_id, a.text) for a in human_turns(messages, None)] == [
        ("msg_01", "fix the build"), ("msg_03", "look at  please"), ("msg_12", "a real turn")]
    assert [a.activity_id for a in human_turns(messages, "msg_03")] == ["msg_12"]


def test_the_export_runs_only_when_the_session_changed(tmp_path: Path) -> None:
    driver = OpenCodeDriver(tmp_path)
    session = driver.new_thread()
    provider = driver.provider()
    exports: list[str] = []
    export = provider.export
    provider.export = lambda sid: exports.append(sid) or export(sid)  # type: ignore[method-assign]
    first = provider.check(session, None)
    assert [a.text for a in first.activities] == ["history before adoption"] and exports == [session]
    assert provider.check(session, first.marker).marker == first.marker and exports == [session]
    driver.human(session, "typed later")
    assert [a.text for a in provider.check(session, first.marker).activities] == ["typed later"]
    assert exports == [session, session]


def test_a_sequence_that_goes_backwards_starts_over_quietly() -> None:
    provider = OpenCodeProvider("opencode", batch_seconds=0.0)
    provider.sessions = lambda: {"ses_a": (3, 7)}  # type: ignore[method-assign]
    provider.export = lambda sid: {"messages": [user("msg_01", text("one")), user("msg_02", text("two"))]}  # type: ignore[method-assign]
    behind = provider.check("ses_a", encode_marker(9, 7, "msg_02"))
    assert [a.activity_id for a in behind.activities] == ["msg_01", "msg_02"]  # the signal log dedupes them
    assert json.loads(behind.marker or "") == {"seq": 3, "updated": 7, "lastHumanMessageId": "msg_02"}
    ahead = provider.check("ses_a", encode_marker(2, 7, "msg_01"))
    assert [a.activity_id for a in ahead.activities] == ["msg_02"]


def test_a_slow_or_oversized_export_is_an_error_not_a_miss(tmp_path: Path) -> None:
    fake = tmp_path / "opencode"
    fake.write_text(f"#!{sys.executable}\nimport sys, time\n"
                    "if sys.argv[2] == 'db': print('[{\"id\": \"ses_a\", \"seq\": 3, \"updated\": 1}]')\n"
                    "elif sys.argv[3] == 'ses_a': print('{' + ' ' * 5000 + '}')\n"
                    "else: time.sleep(30)\n")
    fake.chmod(0o755)
    capped = OpenCodeProvider(str(fake), batch_seconds=0.0, export_cap_bytes=1000)
    assert "over 1000 bytes" in (capped.check("ses_a", None).detail or "")
    assert capped.check("ses_b", None).status is CheckStatus.MISSING
    slow = OpenCodeProvider(str(fake), batch_seconds=0.0, export_timeout=0.5)
    slow.sessions = lambda: {"ses_b": (1, 1)}  # type: ignore[method-assign]
    result = slow.check("ses_b", None)
    assert result.status is CheckStatus.ERROR and "within 0.5 s" in (result.detail or "")
