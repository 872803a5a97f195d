"""The Pi provider: where it finds sessions (Pi's order), what counts, and an oversized line,
against files Pi's own session code wrote (upstream_tools.PiDriver) where Node and Pi are here."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionstate.upstream.providers import CheckStatus, PiSessionProvider
from sessionstate.upstream.providers.pi_session import encoded_cwd, session_dirs

from tests.upstream.upstream_tools import PiDriver


@pytest.fixture
def pi(tmp_path: Path) -> Iterator[PiDriver]:
    driver = PiDriver(tmp_path)
    yield driver
    driver.close()


def test_an_oversized_line_neither_blocks_the_cursor_nor_is_skipped_unread(pi: PiDriver) -> None:
    provider = pi.provider(window=4096)
    session = pi.new_thread()
    marker = provider.check(session, None).marker
    pi.human(session, "a long paste: " + "y" * 20_000)  # five windows long
    pi.human(session, "and a short one after it")
    pi.non_human(session)
    seen = []
    for _ in range(10):
        result = provider.check(session, marker)
        assert result.status is CheckStatus.FOUND
        seen += result.activities
        if result.marker == marker:
            break
        marker = result.marker
    assert [(a.text[:13], a.text_truncated) for a in seen] == [("a long paste:", True), ("and a short o", False)]
    assert json.loads(marker)["off"] == pi.files[session].stat().st_size


def test_an_image_only_turn_counts_and_a_bash_line_does_not(pi: PiDriver) -> None:
    provider = pi.provider()
    session = pi.new_thread()
    marker = provider.check(session, None).marker
    pi.call(op="user", id=session, content=[{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}])
    pi.non_human(session)
    (image,) = provider.check(session, marker).activities
    assert image.text == ""


def test_sessions_are_found_where_pi_puts_them(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    (agent / "sessions" / encoded_cwd("/home/dev/app")).mkdir(parents=True)
    assert encoded_cwd("/home/dev/app") == "--home-dev-app--"
    root, dirs = session_dirs({"PI_CODING_AGENT_DIR": str(agent)}, cwd=str(tmp_path))
    assert (root, dirs) == (agent / "sessions", [agent / "sessions" / "--home-dev-app--"])
    (agent / "settings.json").write_text(json.dumps({"sessionDir": str(tmp_path / "configured")}))
    assert session_dirs({"PI_CODING_AGENT_DIR": str(agent)}, cwd=str(tmp_path))[1] == [tmp_path / "configured"]
    (tmp_path / ".pi").mkdir()
    (tmp_path / ".pi" / "settings.json").write_text(json.dumps({"sessionDir": str(tmp_path / "project")}))
    assert session_dirs({"PI_CODING_AGENT_DIR": str(agent)}, cwd=str(tmp_path))[1] == [tmp_path / "project"]
    explicit = {"PI_CODING_AGENT_DIR": str(agent), "PI_CODING_AGENT_SESSION_DIR": str(tmp_path / "env")}
    assert session_dirs(explicit, cwd=str(tmp_path))[1] == [tmp_path / "env"]


def test_only_v3_files_are_linked_and_an_absent_root_is_an_error(tmp_path: Path) -> None:
    directory = tmp_path / "sessions" / "--p--"
    directory.mkdir(parents=True)
    old = '{"type":"session","id":"old-1","timestamp":"2025-01-01T00:00:00Z","cwd":"/p"}\n'
    (directory / "2025-01-01T00-00-00-000Z_old-1.jsonl").write_text(old)
    provider = PiSessionProvider(env={"PI_CODING_AGENT_DIR": str(tmp_path)})
    assert provider.check("old-1", None).status is CheckStatus.ERROR
    assert provider.check("absent-1", None).status is CheckStatus.MISSING
    assert PiSessionProvider(env={"PI_CODING_AGENT_DIR": str(tmp_path / "nope")}).check("x-1", None).status is CheckStatus.ERROR


def test_a_session_path_that_is_no_longer_a_regular_file_is_missing(tmp_path: Path) -> None:
    directory = tmp_path / "sessions" / "--p--"
    (directory / "2025-01-01T00-00-00-000Z_gone-1.jsonl").mkdir(parents=True)
    provider = PiSessionProvider(env={"PI_CODING_AGENT_DIR": str(tmp_path)})
    assert provider.check("gone-1", '{"v":1,"off":0}').status is CheckStatus.MISSING
