"""Local Pi coding-agent sessions: v3 append-only JSONL files, one per session.

Where the files are (first match wins, as Pi itself resolves them): ``PI_CODING_AGENT_SESSION_DIR``;
else ``sessionDir`` from ``<cwd>/.pi/settings.json`` or ``<agentDir>/settings.json``; else every
``<agentDir>/sessions/<encoded cwd>/`` directory, with ``agentDir`` = ``PI_CODING_AGENT_DIR`` or
``~/.pi/agent``. A session's file is ``<timestamp>_<session id>.jsonl`` in one of them.

The file is read by the shared byte-offset cursor (``jsonl_cursor``): at most 1 MiB past the
marker per check, only complete lines classified, and - unlike the reference, which stops at the
first line it cannot read and so blocks on an oversized one for good - an oversized line is
streamed through across checks and a malformed one is classified "not a turn" and passed.

A human turn is a ``type: "message"`` line whose ``message.role`` is ``"user"`` (content a
string or blocks; an image-only turn has empty text and still counts). ``assistant``,
``toolResult`` and ``bashExecution`` (a command the user ran with ``!``, not a typed turn) and
every other line type carry no turn. The activity id is the entry's ``id``.

Outcomes: the file is absent from every session directory, or no longer a regular file ->
``missing``; no session directory at all, I/O errors, a damaged marker, or a file whose header is
not a v3 session -> ``error``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from ..claude_lines import LineFacts
from .base import CheckResult, UpstreamActivity, UpstreamProvider
from .jsonl_cursor import DEFAULT_SCAN_CAP_BYTES, check_file, line_activity, pread_exact

SESSION_VERSION = 3
HEADER_PROBE_BYTES = 4096
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")


def agent_dir(env: Mapping[str, str]) -> Path:
    explicit = env.get("PI_CODING_AGENT_DIR")
    return Path(explicit).expanduser() if explicit else Path(env.get("HOME") or Path.home()) / ".pi" / "agent"


def encoded_cwd(cwd: str) -> str:
    """The directory name Pi gives a working directory's sessions."""
    return "--" + re.sub(r"[/\\:]", "-", re.sub(r"^[/\\]", "", cwd)) + "--"


def _settings_session_dir(settings: Path) -> Path | None:
    try:
        value = json.loads(settings.read_text(encoding="utf-8")).get("sessionDir")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(value).expanduser() if isinstance(value, str) and value else None


def session_dirs(env: Mapping[str, str] | None = None, cwd: str | None = None) -> tuple[Path, list[Path]]:
    """(the root that must exist, the directories to search), Pi's resolution order."""
    env = os.environ if env is None else env
    explicit = env.get("PI_CODING_AGENT_SESSION_DIR")
    if explicit:
        root = Path(explicit).expanduser()
        return root, [root]
    home = agent_dir(env)
    for settings in (Path(cwd or os.getcwd()) / ".pi" / "settings.json", home / "settings.json"):
        configured = _settings_session_dir(settings)
        if configured is not None:
            return configured, [configured]
    root = home / "sessions"
    if not root.is_dir():
        return root, []
    return root, sorted((Path(e.path) for e in os.scandir(root) if e.is_dir()), key=lambda p: p.name)


def read_header(path: Path) -> dict[str, object] | None:
    """The session header (first line) of a Pi file, or ``None`` when it is not one."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        head = pread_exact(fd, HEADER_PROBE_BYTES, 0)
    finally:
        os.close(fd)
    first = head.split(b"\n", 1)[0]
    try:
        header = json.loads(first)
    except ValueError:
        return None
    return header if isinstance(header, dict) and header.get("type") == "session" else None


def is_continuable(header: Mapping[str, object] | None) -> bool:
    """Only v3 (append-only) sessions are linked: older ones are rewritten when Pi migrates them."""
    return header is not None and header.get("version") == SESSION_VERSION


def is_human_turn(facts: LineFacts) -> bool:
    if facts.malformed or not facts.is_object or facts.type != "message" or not facts.message_is_object:
        return False
    return facts.role == "user" and facts.content_kind in ("string", "blocks")


class PiSessionProvider(UpstreamProvider):
    """Incremental reader of Pi's v3 session files."""

    name: ClassVar[str] = "pi"

    def __init__(self, env: Mapping[str, str] | None = None, cwd: str | None = None,
                 scan_cap_bytes: int = DEFAULT_SCAN_CAP_BYTES) -> None:
        if scan_cap_bytes < 1:
            raise ValueError("scan_cap_bytes must be positive")
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self.scan_cap_bytes = scan_cap_bytes

    def locate(self, session_id: str) -> Path | None:
        """The session's file; ``None`` when definitely absent, ``OSError`` when that cannot be told."""
        root, dirs = session_dirs(self.env, self.cwd)
        if not root.is_dir():
            raise FileNotFoundError(f"Pi session directory {root} is not a directory")
        suffix = f"_{session_id}.jsonl"
        for directory in dirs:
            for entry in sorted(os.scandir(directory), key=lambda e: e.name):
                if entry.name.endswith(suffix):
                    return Path(entry.path)
        return None

    def check(self, thread_id: str, marker: str | None) -> CheckResult:
        if not _SESSION_ID.fullmatch(thread_id):
            return CheckResult.error(marker, f"not a Pi session id: {thread_id!r}")

        def admit(path: Path) -> str | None:
            if marker is None and not is_continuable(read_header(path)):
                return "not a v3 Pi session file (only those are linked)"
            return None

        return check_file(lambda: self.locate(thread_id), marker, self.scan_cap_bytes, self._classify, admit,
                          irregular_is_missing=True)

    @staticmethod
    def _classify(facts: LineFacts, line_start: int) -> UpstreamActivity | None:
        return line_activity(facts, facts.entry_id or f"offset:{line_start}") if is_human_turn(facts) else None
