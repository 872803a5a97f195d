"""The Codex provider against the real ``codex app-server`` (offline; see upstream_tools.py), and
its reading of a page without one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionstate.upstream.providers import CheckStatus, CodexAppServerProvider
from sessionstate.upstream.providers.codex_app_server import encode_marker, new_activities
from sessionstate.upstream.providers.codex_rpc import AppServerClient

from tests.upstream.upstream_tools import CodexDriver


@pytest.fixture
def codex(tmp_path: Path) -> Iterator[tuple[CodexDriver, CodexAppServerProvider]]:
    driver = CodexDriver(tmp_path)
    provider = driver.provider()
    yield driver, provider
    provider.close()
    driver.close()


def test_a_steer_added_to_the_seen_turn_counts(codex: tuple[CodexDriver, CodexAppServerProvider]) -> None:
    driver, provider = codex
    thread = driver.new_thread()
    driver.human(thread, "start the refactor", keep_open=True)
    first = provider.check(thread, None)
    assert [a.text for a in first.activities] == ["history before adoption", "start the refactor"]
    driver.steer(thread, "and keep the old names")
    second = provider.check(thread, first.marker)
    assert [(a.text, a.activity_id.endswith(":2")) for a in second.activities] == [("and keep the old names", True)]
    assert provider.check(thread, second.marker).activities == []


def test_an_unknown_thread_is_missing_and_no_app_server_is_an_error(
    codex: tuple[CodexDriver, CodexAppServerProvider], tmp_path: Path
) -> None:
    _, provider = codex
    gone = provider.check("01a244ba-0000-7000-8000-000000000000", None)
    assert gone.status is CheckStatus.MISSING and "thread not loaded" in (gone.detail or "")
    nothing = CodexAppServerProvider(AppServerClient([str(tmp_path / "no-codex"), "app-server"]))
    assert nothing.check("01a244ba-0000-7000-8000-000000000000", None).status is CheckStatus.ERROR


def test_a_page_without_the_marker_turn_is_a_flagged_burst_only_when_history_goes_on() -> None:
    def turn(turn_id: str, *texts: str) -> dict[str, object]:
        items = [{"type": "userMessage", "id": f"{turn_id}-{i}", "content": [{"type": "text", "text": t}]}
                 for i, t in enumerate(texts)]
        return {"id": turn_id, "items": [*items, {"type": "agentMessage", "id": "a", "text": "ok"}], "startedAt": 5}

    page = [turn("t3", "c"), turn("t2", "b", "b2")]
    (burst,) = new_activities(page, ("t1", 1), more_pages=True)
    assert (burst.turns, burst.burst_overflow, burst.burst_texts) == (3, True, ("b", "b2", "c"))
    assert [a.activity_id for a in new_activities(page, ("t1", 1), more_pages=False)] == ["t2:1", "t2:2", "t3:1"]
    assert [a.activity_id for a in new_activities(page, ("t2", 1), more_pages=True)] == ["t2:2", "t3:1"]
    assert encode_marker("t3", 1) == '{"turnId":"t3","userMessageCount":1}'
