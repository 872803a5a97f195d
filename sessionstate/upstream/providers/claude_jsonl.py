"""Local Claude Code transcripts: ``<root>/<project-slug>/<session-uuid>.jsonl``.

A transcript is append-only JSONL, read by the shared byte-offset cursor (``jsonl_cursor``: at
most ``scan_cap_bytes`` per check, only complete lines classified, an oversized line streamed
through, a replaced file rescanned). This module finds the file and says which lines are human
turns (``claude_lines``).

Outcomes: file not found under any project directory -> ``missing``; root directory absent,
unreadable directories, I/O errors or a damaged marker -> ``error`` (never a miss: an unmounted
home must not drop every link). The self-echo check is not done here; activities carry the text
it needs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import ClassVar

from ..claude_lines import LineFacts, is_human_turn
from .base import CheckResult, UpstreamActivity, UpstreamProvider
from .jsonl_cursor import DEFAULT_SCAN_CAP_BYTES, MarkerError, Position, check_file, line_activity

__all__ = ["DEFAULT_SCAN_CAP_BYTES", "ClaudeJsonlProvider", "MarkerError", "Position"]

_THREAD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


class ClaudeJsonlProvider(UpstreamProvider):
    """Incremental scanner of local Claude Code JSONL transcripts."""

    name: ClassVar[str] = "claude-jsonl"

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        scan_cap_bytes: int = DEFAULT_SCAN_CAP_BYTES,
    ) -> None:
        if scan_cap_bytes < 1:
            raise ValueError("scan_cap_bytes must be positive")
        self.root = Path(root) if root is not None else Path.home() / ".claude" / "projects"
        self.scan_cap_bytes = scan_cap_bytes
        self._located: dict[str, Path] = {}

    # -- locating -----------------------------------------------------------

    def locate(self, thread_id: str) -> Path | None:
        """The transcript file of ``thread_id`` under any project directory.

        Returns ``None`` when it definitely does not exist; raises ``OSError``
        when that cannot be told (root absent, a directory unreadable).
        Several matches: the first by project directory name, for stability.
        """
        cached = self._located.get(thread_id)
        if cached is not None and cached.is_file():
            return cached
        self._located.pop(thread_id, None)
        if not self.root.is_dir():
            raise FileNotFoundError(f"transcript root {self.root} is not a directory")
        file_name = f"{thread_id}.jsonl"
        unreadable: OSError | None = None
        for project in sorted(os.scandir(self.root), key=lambda entry: entry.name):
            if not project.is_dir():
                continue
            candidate = Path(project.path) / file_name
            try:
                os.stat(candidate)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                unreadable = exc
                continue
            self._located[thread_id] = candidate
            return candidate
        if unreadable is not None:
            raise unreadable
        return None

    # -- checking -------------------------------------------------------------

    def check(self, thread_id: str, marker: str | None) -> CheckResult:
        if not _THREAD_ID.fullmatch(thread_id):
            return CheckResult.error(marker, f"not a transcript id: {thread_id!r}")
        result = check_file(lambda: self.locate(thread_id), marker, self.scan_cap_bytes, self._classify)
        if result.status == "missing":
            self._located.pop(thread_id, None)
        return result

    @staticmethod
    def _classify(facts: LineFacts, line_start: int) -> UpstreamActivity | None:
        return line_activity(facts, facts.uuid or f"offset:{line_start}") if is_human_turn(facts) else None
