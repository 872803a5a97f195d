"""A byte-offset cursor over an append-only JSONL file, shared by the file-based providers.

Theory of operation. The marker is the byte offset of the first line not yet classified. Each
read takes at most ``scan_cap_bytes`` from there and classifies only *complete* lines; a partial
trailing line (still being written) keeps its bytes unconsumed until its newline arrives. No byte
is ever skipped unclassified.

One line longer than the cap can never fit in a window. The reference blocks on it for ever (in
its Claude and its Pi provider alike); here, when a full window holds no newline, the cursor
starts a ``LineScanner`` on that line and streams through it, one window per read, keeping only
the bounded facts classification needs. The scanner's state rides in the marker, so a restart
resumes mid-line. When the line's newline arrives, the line is classified like any other (its
text cut to a prefix).

The marker is compact JSON::

    {"v": 1, "off": <line start>, "fpn": <n>, "fp": <sha256 of bytes [0, n)>,
     "line": {"pos": <read position>, "scan": <scanner state>}}   # "line" only mid-line

A bare decimal string is accepted as a plain offset. The fingerprint covers the first ``n`` (at
most 4 KiB) already-consumed bytes; if they changed, or the file shrank below the marker, the file
was replaced and the scan restarts at 0 (activity ids name lines, so the signal log's dedupe
absorbs any re-read). The fingerprint read is the only read outside the cap.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..claude_lines import LineFacts, facts_from_line, parse_timestamp
from ..json_stream import LineScanner
from .base import CheckResult, UpstreamActivity

DEFAULT_SCAN_CAP_BYTES = 1024 * 1024
FINGERPRINT_BYTES = 4096

#: Turns one line's facts (and where the line starts) into an activity, or ``None``.
Classifier = Callable[[LineFacts, int], "UpstreamActivity | None"]


class MarkerError(ValueError):
    """A marker this cursor did not write (or one damaged in storage)."""


@dataclass(slots=True)
class Position:
    """Decoded marker: where the scan stands in one file."""

    offset: int = 0  # start of the first unclassified line
    fp_len: int = 0
    fingerprint: str = ""
    read_pos: int | None = None  # mid-line only: bytes fed to the scanner end here
    scanner: LineScanner | None = None

    @property
    def consumed(self) -> int:
        return self.offset if self.read_pos is None else self.read_pos

    @classmethod
    def decode(cls, marker: str | None) -> Position:
        if marker is None or marker == "":
            return cls()
        if marker.isdigit():
            return cls(offset=int(marker))
        try:
            data = json.loads(marker)
            if not isinstance(data, dict) or data.get("v") != 1:
                raise MarkerError("not a byte-offset marker")
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


def pread_exact(fd: int, size: int, offset: int) -> bytes:
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


def scan(fd: int, position: Position, scan_cap_bytes: int, classify: Classifier) -> CheckResult:
    """Classify the complete lines of one window after ``position``; ``found`` with the new marker.

    Raises ``OSError`` on a read failure (the provider turns it into ``error``)."""
    size = os.fstat(fd).st_size
    detail = None
    if _replaced(fd, size, position):
        position = Position()
        detail = "file replaced or truncated; rescanned from the start"
    start = position.consumed
    data = pread_exact(fd, min(scan_cap_bytes, size - start), start)
    activities: list[UpstreamActivity] = []

    def emit(facts: LineFacts, line_start: int) -> None:
        activity = classify(facts, line_start)
        if activity is not None:
            activities.append(activity)

    i = 0
    if position.scanner is not None:
        newline = data.find(b"\n")
        if newline == -1:
            position.scanner.feed(data)
            position.read_pos = start + len(data)
            return _result(fd, activities, position, detail)
        position.scanner.feed(data, 0, newline)
        emit(position.scanner.finish(), position.offset)
        position.scanner = None
        position.read_pos = None
        i = newline + 1
    while True:
        newline = data.find(b"\n", i)
        if newline == -1:
            break
        emit(facts_from_line(data[i:newline]), start + i)
        i = newline + 1
    position.offset = start + i
    if i == 0 and len(data) == scan_cap_bytes:
        # A full window without a newline: this line can never fit in one window, so stream
        # through it instead of blocking on it.
        position.scanner = LineScanner()
        position.scanner.feed(data)
        position.read_pos = start + len(data)
    return _result(fd, activities, position, detail)


def _replaced(fd: int, size: int, position: Position) -> bool:
    if size < position.consumed:
        return True
    if position.fp_len:
        head = pread_exact(fd, position.fp_len, 0)
        return len(head) < position.fp_len or _digest(head) != position.fingerprint
    return False


def _result(fd: int, activities: list[UpstreamActivity], position: Position, detail: str | None) -> CheckResult:
    fp_len = min(position.consumed, FINGERPRINT_BYTES)
    if fp_len != position.fp_len:
        position.fp_len = fp_len
        position.fingerprint = _digest(pread_exact(fd, fp_len, 0)) if fp_len else ""
    return CheckResult.found(activities, position.encode(), detail)


def read_file(path: os.PathLike[str] | str, position: Position, scan_cap_bytes: int,
              classify: Classifier, marker: str | None, *, irregular_is_missing: bool = False) -> CheckResult:
    """One check of the file at ``path`` from ``position`` (decoded from ``marker``, which is
    returned unchanged on ``missing`` and ``error``): ``missing`` when the file is gone, ``error``
    on an I/O failure, else ``scan``'s answer. A path that is not a regular file is ``missing``
    when ``irregular_is_missing`` (Pi's rule), else ``error``."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return CheckResult.missing(marker, "file removed")
    except OSError as exc:
        return CheckResult.error(marker, f"cannot open {path}: {exc}")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            if irregular_is_missing:
                return CheckResult.missing(marker, f"{path} is no longer a regular file")
            return CheckResult.error(marker, f"{path} is not a regular file")
        return scan(fd, position, scan_cap_bytes, classify)
    except OSError as exc:
        return CheckResult.error(marker, f"cannot read {path}: {exc}")
    finally:
        os.close(fd)


def check_file(locate: Callable[[], Path | None], marker: str | None, scan_cap_bytes: int, classify: Classifier,
               admit: Callable[[Path], str | None] | None = None, *, irregular_is_missing: bool = False) -> CheckResult:
    """A file-based provider's whole check: decode ``marker``, ``locate`` the file (``None``:
    definitely absent, ``missing``; ``OSError``: cannot tell, ``error``), let ``admit`` refuse it
    (its reason is an ``error``), then ``read_file``."""
    try:
        position = Position.decode(marker)
    except MarkerError as exc:
        return CheckResult.error(marker, f"damaged marker: {exc}")
    try:
        path = locate()
    except OSError as exc:
        return CheckResult.error(marker, f"cannot search for the file: {exc}")
    if path is None:
        return CheckResult.missing(marker, "file not found")
    refusal = admit(path) if admit is not None else None
    if refusal is not None:
        return CheckResult.error(marker, refusal)
    return read_file(path, position, scan_cap_bytes, classify, marker, irregular_is_missing=irregular_is_missing)


def line_activity(facts: LineFacts, activity_id: str) -> UpstreamActivity:
    """The activity of a line classified as a human turn (its text may be a prefix)."""
    return UpstreamActivity(activity_id, parse_timestamp(facts.timestamp), facts.text,
                            text_truncated=facts.text_truncated)
