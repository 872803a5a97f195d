"""Local Claude Code transcripts: ``<root>/<project-slug>/<session-uuid>.jsonl``.

Theory of operation. A transcript is append-only JSONL. The marker is the byte
offset of the first line not yet classified. Each check reads at most
``scan_cap_bytes`` from there and classifies only *complete* lines; a partial
trailing line (still being written) keeps its bytes unconsumed until its
newline arrives. No byte is ever skipped unclassified.

One line longer than the cap can never fit in a window. The reference blocks
on it for ever; here, when a full window holds no newline, the provider starts
a ``LineScanner`` on that line and streams through it, one window per check,
keeping only the bounded facts classification needs. The scanner's state
rides in the marker, so a restart resumes mid-line. When the line's newline
arrives, the line is classified like any other (with its text cut to a prefix).

The marker is compact JSON::

    {"v": 1, "off": <line start>, "fpn": <n>, "fp": <sha256 of bytes [0, n)>,
     "line": {"pos": <read position>, "scan": <scanner state>}}   # "line" only mid-line

A bare decimal string is accepted as a plain offset. The fingerprint covers
the first ``n`` (at most 4 KiB) already-consumed bytes; if they changed, or the
file shrank below the marker, the transcript was replaced and the scan
restarts at 0 (activity ids are line uuids, so the signal log's dedupe absorbs
any re-read). The fingerprint read is the only read outside the cap.

Outcomes: file not found under any project directory -> ``missing``; root
directory absent, unreadable directories, I/O errors or a damaged marker ->
``error`` (never a miss: an unmounted home must not drop every link).
The self-echo check is not done here; activities carry the text it needs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..claude_lines import (
    LineFacts,
    facts_from_line,
    is_human_turn,
    parse_timestamp,
)
from ..json_stream import LineScanner
from .base import (
    CheckResult,
    UpstreamActivity,
    UpstreamProvider,
)

DEFAULT_SCAN_CAP_BYTES = 1024 * 1024
FINGERPRINT_BYTES = 4096
_THREAD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


class MarkerError(ValueError):
    """A marker this provider did not write (or one damaged in storage)."""


@dataclass(slots=True)
class _Position:
    """Decoded marker: where the scan stands in one transcript file."""

    offset: int = 0  # start of the first unclassified line
    fp_len: int = 0
    fingerprint: str = ""
    read_pos: int | None = None  # mid-line only: bytes fed to the scanner end here
    scanner: LineScanner | None = None

    @property
    def consumed(self) -> int:
        return self.offset if self.read_pos is None else self.read_pos

    @classmethod
    def decode(cls, marker: str | None) -> _Position:
        if marker is None or marker == "":
            return cls()
        if marker.isdigit():
            return cls(offset=int(marker))
        try:
            data = json.loads(marker)
            if not isinstance(data, dict) or data.get("v") != 1:
                raise MarkerError("not a claude-jsonl marker")
            position = cls(
                offset=_non_negative(data["off"]),
                fp_len=_non_negative(data.get("fpn", 0)),
                fingerprint=str(data.get("fp", "")),
            )
            line = data.get("line")
            if line is not None:
                position.read_pos = _non_negative(line["pos"])
                if position.read_pos < position.offset:
                    raise MarkerError("read position before line start")
                position.scanner = LineScanner.from_state(line["scan"])
        except (KeyError, TypeError, ValueError) as exc:
            raise MarkerError(str(exc)) from exc
        return position

    def encode(self) -> str:
        data: dict[str, Any] = {"v": 1, "off": self.offset}
        if self.fp_len:
            data["fpn"] = self.fp_len
            data["fp"] = self.fingerprint
        if self.scanner is not None:
            data["line"] = {"pos": self.read_pos, "scan": self.scanner.to_state()}
        return json.dumps(data, separators=(",", ":"))


def _non_negative(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise MarkerError(f"bad offset {value!r}")
    return value


def _pread_exact(fd: int, size: int, offset: int) -> bytes:
    """Read up to ``size`` bytes at ``offset``, fewer only at end of file."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        chunk = os.pread(fd, size - got, offset + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


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
        try:
            position = _Position.decode(marker)
        except MarkerError as exc:
            return CheckResult.error(marker, f"damaged marker: {exc}")
        try:
            path = self.locate(thread_id)
        except OSError as exc:
            return CheckResult.error(marker, f"cannot search transcripts: {exc}")
        if path is None:
            return CheckResult.missing(marker, "transcript file not found")
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            self._located.pop(thread_id, None)
            return CheckResult.missing(marker, "transcript file removed")
        except OSError as exc:
            return CheckResult.error(marker, f"cannot open transcript: {exc}")
        try:
            return self._scan(fd, position)
        except OSError as exc:
            return CheckResult.error(marker, f"cannot read transcript: {exc}")
        finally:
            os.close(fd)

    def _scan(self, fd: int, position: _Position) -> CheckResult:
        size = os.fstat(fd).st_size
        detail = None
        if self._replaced(fd, size, position):
            position = _Position()
            detail = "transcript replaced or truncated; rescanned from the start"
        start = position.consumed
        data = _pread_exact(fd, min(self.scan_cap_bytes, size - start), start)
        activities: list[UpstreamActivity] = []
        i = 0
        if position.scanner is not None:
            newline = data.find(b"\n")
            if newline == -1:
                position.scanner.feed(data)
                position.read_pos = start + len(data)
                return self._result(fd, activities, position, detail)
            position.scanner.feed(data, 0, newline)
            self._emit(activities, position.scanner.finish(), position.offset)
            position.scanner = None
            position.read_pos = None
            i = newline + 1
        while True:
            newline = data.find(b"\n", i)
            if newline == -1:
                break
            self._emit(activities, facts_from_line(data[i:newline]), start + i)
            i = newline + 1
        position.offset = start + i
        if i == 0 and len(data) == self.scan_cap_bytes:
            # A full window without a newline: this line can never fit in one
            # window, so stream through it instead of blocking on it.
            position.scanner = LineScanner()
            position.scanner.feed(data)
            position.read_pos = start + len(data)
        return self._result(fd, activities, position, detail)

    def _replaced(self, fd: int, size: int, position: _Position) -> bool:
        if size < position.consumed:
            return True
        if position.fp_len:
            head = _pread_exact(fd, position.fp_len, 0)
            return len(head) < position.fp_len or _digest(head) != position.fingerprint
        return False

    def _result(
        self,
        fd: int,
        activities: list[UpstreamActivity],
        position: _Position,
        detail: str | None,
    ) -> CheckResult:
        fp_len = min(position.consumed, FINGERPRINT_BYTES)
        if fp_len != position.fp_len:
            position.fp_len = fp_len
            position.fingerprint = _digest(_pread_exact(fd, fp_len, 0)) if fp_len else ""
        return CheckResult.found(activities, position.encode(), detail)

    @staticmethod
    def _emit(activities: list[UpstreamActivity], facts: LineFacts, line_start: int) -> None:
        if not is_human_turn(facts):
            return
        activities.append(
            UpstreamActivity(
                activity_id=facts.uuid or f"offset:{line_start}",
                occurred_at=parse_timestamp(facts.timestamp),
                text=facts.text,
                text_truncated=facts.text_truncated,
            )
        )
