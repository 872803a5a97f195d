"""Codex threads, through the Codex app server (``codex app-server``: JSON-RPC over stdio).

The app server answers from Codex's own rollout files (``$CODEX_HOME/sessions/YYYY/MM/DD/
rollout-<timestamp>-<thread id>.jsonl``), loaded or not, with no model and no network: it is
Codex's reading of its files, so this provider never parses them itself.

One check is one ``thread/turns/list`` (newest first, ``page_size`` turns, items included), and
more pages (at most ``max_pages`` in all) only while the marker's turn is not yet seen. The
marker is ``{"turnId": <newest turn seen>, "userMessageCount": <its userMessage items then>}``:
every ``userMessage`` item newer than that counts, including a steer added to the marker's own
turn. Each item is one activity, id ``<turnId>:<n>`` (the item's position among its turn's
user messages), time the item's ``startedAtMs`` (else the turn's ``completedAt ?? startedAt``),
text its text parts joined (an image-only message has empty text and still counts).

If the marker's turn is on none of those pages and they are not the whole history, more turns came
than ``max_pages`` pages hold: the visible user messages are recorded as one flagged burst (the
reference reads one page and loses the rest silently). If the marker's turn is gone from a complete history (a rollback),
every visible message is reported again and the signal log's dedupe absorbs the repeats.

Missing, only on a definite answer: the page is empty (or the list answers "thread not loaded")
**and** ``thread/read`` answers JSON-RPC -32600 "thread not loaded: <id>" (the reference's
rule); or ``thread/turns/list`` answers -32600 "... missing source rollout" (Codex 0.171 says so
when the thread's rollout file was deleted: its ``thread/read`` still answers from the state
database, so the reference's rule alone never fires for a deleted rollout). Anything else - no
app server, a timeout, another error - is ``error``, never a miss.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from .base import CheckResult, UpstreamActivity, UpstreamProvider
from .codex_rpc import AppServerClient, AppServerUnavailable, RpcError

PAGE_SIZE = 100
MAX_PAGES = 10
INVALID_REQUEST = -32600
NOT_LOADED = "thread not loaded"
ROLLOUT_GONE = "missing source rollout"


def decode_marker(marker: str | None) -> tuple[str, int] | None:
    if marker is None or marker == "":
        return None
    data = json.loads(marker)
    turn, count = data["turnId"], data["userMessageCount"]
    if not isinstance(turn, str) or not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError("bad codex marker")
    return turn, count


def encode_marker(turn_id: str, count: int) -> str:
    return json.dumps({"turnId": turn_id, "userMessageCount": count}, separators=(",", ":"))


def user_messages(turn: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [item for item in turn.get("items") or [] if isinstance(item, dict) and item.get("type") == "userMessage"]


def message_text(item: Mapping[str, Any]) -> str:
    parts = [p.get("text") for p in item.get("content") or [] if isinstance(p, dict) and p.get("type") == "text"]
    return "\n".join(p for p in parts if isinstance(p, str))


def _occurred_at(turn: Mapping[str, Any], item: Mapping[str, Any]) -> float | None:
    started = item.get("startedAtMs")
    if isinstance(started, (int, float)) and not isinstance(started, bool):
        return started / 1000.0
    seconds = turn.get("completedAt") or turn.get("startedAt")
    return float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else None


def new_activities(turns: Sequence[Mapping[str, Any]], seen: tuple[str, int] | None,
                   more_pages: bool) -> list[UpstreamActivity]:
    """The user messages of ``turns`` (newest first) after ``seen``, oldest first; a burst past
    the page comes back as one flagged activity."""
    fresh: list[UpstreamActivity] = []
    found_marker = False
    for turn in turns:
        turn_id = str(turn.get("id"))
        messages = user_messages(turn)
        skip = 0
        if seen is not None and turn_id == seen[0]:
            found_marker = True
            skip = min(seen[1], len(messages))
        for n in range(len(messages), skip, -1):
            item = messages[n - 1]
            fresh.append(UpstreamActivity(f"{turn_id}:{n}", _occurred_at(turn, item), message_text(item)))
        if found_marker:
            break
    fresh.reverse()
    if seen is None or found_marker or not more_pages or not fresh:
        return fresh
    newest = fresh[-1]
    return [UpstreamActivity(newest.activity_id, newest.occurred_at, newest.text, turns=len(fresh),
                             burst_overflow=True, burst_texts=tuple(a.text for a in fresh))]


class CodexAppServerProvider(UpstreamProvider):
    """Asks one long-lived ``codex app-server`` about threads."""

    name: ClassVar[str] = "codex"

    def __init__(self, client: AppServerClient | None = None, *, codex: str = "codex",
                 env: Mapping[str, str] | None = None, page_size: int = PAGE_SIZE,
                 max_pages: int = MAX_PAGES) -> None:
        if page_size < 1 or max_pages < 1:
            raise ValueError("page_size and max_pages must be positive")
        self.client = client or AppServerClient([codex, "app-server"], env=env)
        self.page_size = page_size
        self.max_pages = max_pages

    def close(self) -> None:
        self.client.close()

    def check(self, thread_id: str, marker: str | None) -> CheckResult:
        try:
            seen = decode_marker(marker)
        except (KeyError, TypeError, ValueError) as exc:
            return CheckResult.error(marker, f"damaged marker: {exc}")
        turns: list[Mapping[str, Any]] = []
        cursor: str | None = None
        for _ in range(self.max_pages):
            try:
                page = self._page(thread_id, cursor)
            except RpcError as exc:
                if exc.code == INVALID_REQUEST and ROLLOUT_GONE in exc.message:
                    return CheckResult.missing(marker, exc.message)
                if exc.code == INVALID_REQUEST and exc.message.startswith(NOT_LOADED) and not turns:
                    return self._confirm_missing(thread_id, marker)
                return CheckResult.error(marker, f"thread/turns/list: {exc}")
            except AppServerUnavailable as exc:
                return CheckResult.error(marker, str(exc))
            turns += [t for t in page.get("data") or [] if isinstance(t, dict) and t.get("id")]
            cursor = page.get("nextCursor") or None
            if cursor is None or seen is None or any(t["id"] == seen[0] for t in turns):
                break
        if not turns:
            return self._confirm_missing(thread_id, marker)
        activities = new_activities(turns, seen, cursor is not None)
        newest = turns[0]
        return CheckResult.found(activities, encode_marker(str(newest["id"]), len(user_messages(newest))))

    def _page(self, thread_id: str, cursor: str | None) -> Mapping[str, Any]:
        params: dict[str, Any] = {"threadId": thread_id, "limit": self.page_size, "itemsView": "full"}
        if cursor is not None:
            params["cursor"] = cursor
        page = self.client.call("thread/turns/list", params)
        return page if isinstance(page, dict) else {}

    def _confirm_missing(self, thread_id: str, marker: str | None) -> CheckResult:
        try:
            self.client.call("thread/read", {"threadId": thread_id})
        except RpcError as exc:
            if exc.code == INVALID_REQUEST and exc.message.startswith(NOT_LOADED):
                return CheckResult.missing(marker, exc.message)
            return CheckResult.error(marker, f"thread/read: {exc}")
        except AppServerUnavailable as exc:
            return CheckResult.error(marker, str(exc))
        return CheckResult.found([], marker)  # a thread with no turns yet
