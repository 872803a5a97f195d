"""Paired-node provider: newest-50 window, burst overflow, node failures."""

from __future__ import annotations

from typing import Any

import pytest

from sessionstate.upstream.claude_lines import COMPACTION_PREFIX
from sessionstate.upstream.providers import (
    PROVIDERS,
    CheckStatus,
    ClaudeJsonlProvider,
    CodexAppServerProvider,
    OpenCodeProvider,
    PairedNodeProvider,
    PiSessionProvider,
    provider_class,
)
from tests.upstream.fake_node import InMemoryNodeClient
from sessionstate.upstream.providers.paired_node import EMPTY_THREAD, WINDOW

THREAD = "node-thread-1"


@pytest.fixture
def node() -> InMemoryNodeClient:
    return InMemoryNodeClient()


@pytest.fixture
def provider(node: InMemoryNodeClient) -> PairedNodeProvider:
    return PairedNodeProvider(node)


def test_new_human_items_are_found_once_and_marker_advances(
    node: InMemoryNodeClient, provider: PairedNodeProvider
) -> None:
    first = node.add_item(THREAD, role="user", text="start the migration", timestamp=1748770200.0)
    node.add_item(THREAD, role="assistant", text="on it")
    node.add_item(THREAD, role="user", type="tool_result", text="exit 0")
    node.add_item(THREAD, role="user", text=COMPACTION_PREFIX + " ...")
    last = node.add_item(THREAD, role="system", text="hook ran")

    result = provider.check(THREAD, None)
    assert result.status is CheckStatus.FOUND
    assert [(a.activity_id, a.text, a.occurred_at) for a in result.activities] == [
        (first, "start the migration", 1748770200.0)
    ]
    assert result.marker == last

    again = provider.check(THREAD, result.marker)
    assert again.status is CheckStatus.FOUND and again.activities == [] and again.marker == last

    second = node.add_item(THREAD, role="user", text="and roll back", timestamp="2025-06-01T09:31:00Z")
    third = provider.check(THREAD, again.marker)
    assert [a.activity_id for a in third.activities] == [second]
    assert third.activities[0].occurred_at == 1748770260.0
    assert not third.activities[0].burst_overflow
    assert third.marker == second


def test_burst_larger_than_the_window_is_flagged_not_lost(
    node: InMemoryNodeClient, provider: PairedNodeProvider
) -> None:
    marker = node.add_item(THREAD, role="assistant", text="waiting")
    lost = node.add_item(THREAD, role="user", text="scrolled out of the window")
    for n in range(WINDOW + 5):
        if n in (20, 40, 54):
            node.add_item(THREAD, role="user", text=f"human {n}")
        else:
            node.add_item(THREAD, role="assistant", text=f"tool step {n}")

    result = provider.check(THREAD, marker)
    assert result.status is CheckStatus.FOUND
    assert len(result.activities) == 1
    burst = result.activities[0]
    assert burst.burst_overflow
    assert burst.turns == 3
    assert burst.burst_texts == ("human 20", "human 40", "human 54")
    assert burst.text == "human 54"
    items = {item["text"]: item["id"] for item in node.threads[THREAD]}
    assert burst.activity_id == f"burst:{items['human 20']}..{items['human 54']}"
    assert lost not in burst.activity_id.removeprefix("burst:").split("..")
    assert "overflowed" in (result.detail or "")
    assert result.marker == node.threads[THREAD][-1]["id"]
    # The next check is back to normal.
    assert provider.check(THREAD, result.marker).activities == []


def test_window_not_overflowed_by_49_new_items(
    node: InMemoryNodeClient, provider: PairedNodeProvider
) -> None:
    marker = node.add_item(THREAD, role="assistant", text="x")
    for n in range(WINDOW - 1):
        node.add_item(THREAD, role="user" if n % 10 == 0 else "assistant", text=f"t{n}")
    result = provider.check(THREAD, marker)
    assert len(result.activities) == 5
    assert not any(a.burst_overflow for a in result.activities)


def test_overflow_without_visible_human_reports_nothing_but_says_so(
    node: InMemoryNodeClient, provider: PairedNodeProvider
) -> None:
    marker = node.add_item(THREAD, role="user", text="go")
    for n in range(WINDOW + 1):
        node.add_item(THREAD, role="assistant", text=f"step {n}")
    result = provider.check(THREAD, marker)
    assert result.status is CheckStatus.FOUND and result.activities == []
    assert "no human item visible" in (result.detail or "")


def test_burst_on_a_thread_seen_empty_is_flagged(
    node: InMemoryNodeClient, provider: PairedNodeProvider
) -> None:
    adopted = provider.check(THREAD, None)  # adoption primes on an empty thread
    assert adopted.status is CheckStatus.FOUND and adopted.activities == []
    assert adopted.marker == EMPTY_THREAD and adopted.marker is not None
    assert provider.check(THREAD, adopted.marker).marker == EMPTY_THREAD  # still empty: stays put
    for n in range(60):
        node.add_item(THREAD, role="user" if n % 2 else "assistant", text=f"item {n}")

    result = provider.check(THREAD, adopted.marker)
    assert result.status is CheckStatus.FOUND
    (burst,) = result.activities
    assert burst.burst_overflow
    assert burst.turns == 25  # the 5 human items that scrolled out cannot be seen
    assert burst.burst_texts == tuple(f"item {n}" for n in range(11, 60, 2))
    assert "overflowed" in (result.detail or "")
    assert result.marker == node.threads[THREAD][-1]["id"]


def test_a_thread_seen_empty_that_grows_within_the_window_reports_each_turn(
    node: InMemoryNodeClient, provider: PairedNodeProvider
) -> None:
    marker = provider.check(THREAD, None).marker
    humans = [node.add_item(THREAD, role="user", text=f"turn {n}") for n in range(3)]
    node.add_item(THREAD, role="assistant", text="ok")
    result = provider.check(THREAD, marker)
    assert [a.activity_id for a in result.activities] == humans
    assert not any(a.burst_overflow for a in result.activities)


def test_node_unavailable_is_an_error_never_missing(
    node: InMemoryNodeClient, provider: PairedNodeProvider
) -> None:
    marker = node.add_item(THREAD, role="user", text="hello")
    node.available = False
    for _ in range(5):
        result = provider.check(THREAD, marker)
        assert result.status is CheckStatus.ERROR
        assert result.marker == marker
        assert result.activities == []
    node.available = True
    node.threads.clear()  # the thread is gone on the node: still not a definite miss
    gone = provider.check(THREAD, marker)
    assert gone.status is CheckStatus.FOUND and gone.activities == [] and gone.marker == marker


def test_rewritten_short_transcript_is_not_a_burst(
    node: InMemoryNodeClient, provider: PairedNodeProvider
) -> None:
    node.add_item(THREAD, role="user", text="fresh start", item_id="new-1")
    result = provider.check(THREAD, "id-that-no-longer-exists")
    assert [a.activity_id for a in result.activities] == ["new-1"]
    assert not result.activities[0].burst_overflow


class _BrokenClient:
    def __init__(self, answer: object) -> None:
        self.answer = answer

    def newest_items(self, thread_id: str, limit: int) -> Any:  # deliberately ill-typed answers
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def test_odd_answers_do_not_raise() -> None:
    assert PairedNodeProvider(_BrokenClient(ConnectionResetError("reset"))).check("t", "m").status is CheckStatus.ERROR
    assert PairedNodeProvider(_BrokenClient({"not": "a list"})).check("t", "m").status is CheckStatus.ERROR
    items = [{"role": "user", "text": "no id"}, "junk", {"id": "a", "role": "user", "text": "ok"}]
    result = PairedNodeProvider(_BrokenClient(items)).check("t", None)
    assert [a.activity_id for a in result.activities] == ["a"]


def test_registry() -> None:
    assert PROVIDERS == {"claude-jsonl": ClaudeJsonlProvider, "paired-node": PairedNodeProvider,
                         "codex": CodexAppServerProvider, "opencode": OpenCodeProvider, "pi": PiSessionProvider}
    assert provider_class("paired-node") is PairedNodeProvider
    with pytest.raises(KeyError, match="claude-jsonl"):
        provider_class("nope")
