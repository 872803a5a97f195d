"""Local OpenCode sessions, read through the ``opencode`` command (its own database code).

Change detection first: one ``opencode --pure db`` query lists every session with its
``event_sequence.seq`` and ``time_updated``; its answer is kept ``batch_seconds`` so that one
tick's checks of many links share one query. ``opencode --pure export <id>`` runs only for a
session whose ``seq`` (or, where no event sequence exists - an imported session - its update
time) moved since the marker: at most ``EXPORT_CONCURRENCY`` at a time, each within
``export_timeout`` seconds and ``export_cap_bytes`` of output (over either: ``error``).

The marker is ``{"seq", "updated", "lastHumanMessageId"}``. A ``seq`` that goes backwards (the
database was rebuilt) resets the marker silently: every visible message is looked at again and
the signal log's dedupe (message ids) absorbs the repeats.

A human turn is a ``user`` message with a creation time and an id above the marker's. Not one:
a message with a ``compaction`` part or a ``compaction_continue`` part; ``synthetic`` or
``ignored`` text parts (left out of the text); the text of an ``@file`` mention (a file part's
``source.text`` span) is cut out; a message left with no text (image- or file-only); the line
"The following tool was executed by the user" (a command the user ran, not a typed turn); a text
equal to one of the session's previous 50 user messages (OpenCode re-sends them). The gateway's
own echoes are dropped by the monitor.

Missing: the session's id is absent from a successful batch query. A failing query or export is
``error``, never a miss.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..normalize import normalize_prompt
from .base import CheckResult, UpstreamActivity, UpstreamProvider

EXPORT_CONCURRENCY = 4
EXPORT_TIMEOUT_SECONDS = 30.0
EXPORT_CAP_BYTES = 32 * 1024 * 1024
DB_TIMEOUT_SECONDS = 30.0
REPEAT_WINDOW = 50
USER_RAN_TOOL = "The following tool was executed by the user"
SESSIONS_QUERY = ("select s.id as id, e.seq as seq, s.time_updated as updated from session s "
                  "left join event_sequence e on e.aggregate_id = s.id")
_SESSION_ID = re.compile(r"ses_[A-Za-z0-9]{1,64}")


class OpenCodeFailed(Exception):
    """The ``opencode`` command failed, timed out or answered too much."""


def _run(command: Sequence[str], env: Mapping[str, str], timeout: float, cap: int) -> bytes:
    try:
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=dict(env))
    except OSError as exc:
        raise OpenCodeFailed(f"cannot run {command[0]}: {exc}") from exc
    chunks: list[bytes] = []
    size = 0
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        process.kill()

    timer = threading.Timer(timeout, expire)
    timer.start()
    try:
        assert process.stdout is not None
        while chunk := process.stdout.read(1 << 16):
            size += len(chunk)
            if size > cap:
                process.kill()
                raise OpenCodeFailed(f"{command[-1]}: output over {cap} bytes")
            chunks.append(chunk)
        process.wait()
    finally:
        timer.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
        stderr = process.stderr.read() if process.stderr is not None else b""
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    if expired.is_set():
        raise OpenCodeFailed(f"{command[-1]}: no answer within {timeout:g} s")
    if process.returncode != 0:
        raise OpenCodeFailed(f"{' '.join(command[1:3])} exited {process.returncode}: {stderr.decode(errors='replace')[-300:]}")
    return b"".join(chunks)


def _parts(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [p for p in message.get("parts") or [] if isinstance(p, dict)]


def is_compaction(message: Mapping[str, Any]) -> bool:
    return any(p.get("type") == "compaction" or (p.get("metadata") or {}).get("compaction_continue") is True
               for p in _parts(message))


def typed_text(message: Mapping[str, Any]) -> str:
    """What the person typed: non-synthetic, non-ignored text parts, ``@file`` mentions cut out."""
    mentions = [((p.get("source") or {}).get("text") or {}).get("value") for p in _parts(message) if p.get("type") == "file"]
    texts = []
    for part in _parts(message):
        if part.get("type") != "text" or part.get("synthetic") is True or part.get("ignored") is True:
            continue
        text = part.get("text")
        if not isinstance(text, str):
            continue
        for mention in mentions:
            if isinstance(mention, str) and mention:
                text = text.replace(mention, "")
        texts.append(text)
    return "\n".join(texts).strip()


def human_turns(messages: Sequence[Mapping[str, Any]], after: str | None) -> list[UpstreamActivity]:
    """The typed user turns of an export's ``messages`` with an id above ``after``, oldest first."""
    found: list[UpstreamActivity] = []
    previous: list[str] = []  # the session's earlier user texts, normalised
    for message in messages:
        info = message.get("info") or {}
        if info.get("role") != "user":
            continue
        text = typed_text(message)
        key = normalize_prompt(text)
        created = (info.get("time") or {}).get("created")
        message_id = info.get("id")
        counts = (isinstance(message_id, str) and (after is None or message_id > after)
                  and not is_compaction(message) and bool(text)
                  and not text.startswith(USER_RAN_TOOL) and key not in previous[-REPEAT_WINDOW:])
        if counts and isinstance(created, (int, float)):
            found.append(UpstreamActivity(str(message_id), float(created) / 1000.0, text))
        if text:
            previous.append(key)
    return found


def decode_marker(marker: str | None) -> dict[str, Any]:
    if marker is None or marker == "":
        return {"seq": None, "updated": None, "lastHumanMessageId": None}
    data = json.loads(marker)
    if not isinstance(data, dict) or not {"seq", "updated", "lastHumanMessageId"} <= set(data):
        raise ValueError("not an opencode marker")
    return data


def encode_marker(seq: Any, updated: Any, last: str | None) -> str:
    return json.dumps({"seq": seq, "updated": updated, "lastHumanMessageId": last}, separators=(",", ":"))


class OpenCodeProvider(UpstreamProvider):
    """Reads local OpenCode sessions through ``opencode --pure db`` and ``export``."""

    name: ClassVar[str] = "opencode"

    def __init__(self, opencode: str = "opencode", *, env: Mapping[str, str] | None = None,
                 batch_seconds: float = 5.0, export_timeout: float = EXPORT_TIMEOUT_SECONDS,
                 export_cap_bytes: int = EXPORT_CAP_BYTES) -> None:
        self.opencode = opencode
        self.env = dict(os.environ if env is None else env)
        self.batch_seconds = batch_seconds
        self.export_timeout = export_timeout
        self.export_cap_bytes = export_cap_bytes
        self._exports = threading.BoundedSemaphore(EXPORT_CONCURRENCY)
        self._batch_lock = threading.Lock()
        self._batch: tuple[float, dict[str, tuple[Any, Any]]] | None = None

    def sessions(self) -> dict[str, tuple[Any, Any]]:
        """Session id -> (seq, updated), from one query shared for ``batch_seconds``."""
        with self._batch_lock:
            now = time.monotonic()
            if self._batch is not None and now - self._batch[0] < self.batch_seconds:
                return self._batch[1]
            out = _run([self.opencode, "--pure", "db", "--format", "json", SESSIONS_QUERY], self.env,
                       DB_TIMEOUT_SECONDS, self.export_cap_bytes)
            rows = json.loads(out or b"[]")
            sessions = {str(r["id"]): (r.get("seq"), r.get("updated")) for r in rows if isinstance(r, dict)}
            self._batch = (now, sessions)
            return sessions

    def export(self, session_id: str) -> dict[str, Any]:
        with self._exports:
            out = _run([self.opencode, "--pure", "export", session_id], self.env, self.export_timeout,
                       self.export_cap_bytes)
        start = out.find(b"{")  # the command may print a progress line before the document
        data = json.loads(out[start:] if start >= 0 else out)
        if not isinstance(data, dict):
            raise ValueError("export is not a JSON object")
        return data

    def check(self, thread_id: str, marker: str | None) -> CheckResult:
        if not _SESSION_ID.fullmatch(thread_id):
            return CheckResult.error(marker, f"not an OpenCode session id: {thread_id!r}")
        try:
            seen = decode_marker(marker)
        except (TypeError, ValueError) as exc:
            return CheckResult.error(marker, f"damaged marker: {exc}")
        try:
            sessions = self.sessions()
        except (OpenCodeFailed, ValueError, KeyError) as exc:
            return CheckResult.error(marker, f"opencode db: {exc}")
        if thread_id not in sessions:
            return CheckResult.missing(marker, "session not in the OpenCode database")
        seq, updated = sessions[thread_id]
        last = seen["lastHumanMessageId"]
        if isinstance(seq, int) and isinstance(seen["seq"], int) and seq < seen["seq"]:
            last = None  # the sequence went backwards: start over, quietly
        elif marker is not None and (seq, updated) == (seen["seq"], seen["updated"]):
            return CheckResult.found([], marker)
        try:
            document = self.export(thread_id)
        except (OpenCodeFailed, ValueError) as exc:
            return CheckResult.error(marker, f"opencode export: {exc}")
        messages = [m for m in document.get("messages") or [] if isinstance(m, dict)]
        activities = human_turns(messages, last)
        if activities:
            last = activities[-1].activity_id
        return CheckResult.found(activities, encode_marker(seq, updated, last))
