"""Builders of Claude Code transcript lines for the upstream tests.

Lines follow the shapes in shared/reference/claude-jsonl.md: every line has
``type``, ``uuid``, ``parentUuid`` (chaining to the previous line),
``sessionId`` (the file's stem), an ISO 8601 ``timestamp`` and context fields
(``cwd``, ``version``, ``gitBranch``). Each builder method returns the line's
dict; ``encode`` turns it into the bytes written to the file (compact JSON,
non-ASCII kept as UTF-8 like the real tool writes it, newline-terminated).
"""

from __future__ import annotations

import itertools
import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

COMPACTION_TEXT = (
    "This session is being continued from a previous conversation that ran out of "
    "context. The conversation is summarized below:\nAnalysis: ..."
)


def encode(line: dict[str, Any]) -> bytes:
    """One transcript line as written to disk."""
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


class TranscriptBuilder:
    """Produces realistic, chained transcript lines for one session."""

    def __init__(
        self,
        session_id: str | None = None,
        *,
        cwd: str = "/home/dev/projects/gateway",
        version: str = "1.0.72",
        git_branch: str = "main",
        start: datetime | None = None,
    ) -> None:
        self.session_id = session_id or str(uuid.uuid4())
        self.cwd = cwd
        self.version = version
        self.git_branch = git_branch
        self._clock = start or datetime(2025, 6, 1, 9, 30, tzinfo=timezone.utc)
        self._parent: str | None = None
        self._counter = itertools.count(1)

    @property
    def project_slug(self) -> str:
        """The directory name Claude Code derives from the working directory."""
        return self.cwd.replace("/", "-")

    def _base(self, line_type: str, **extra: Any) -> dict[str, Any]:
        self._clock += timedelta(seconds=1)
        line_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.session_id}/{next(self._counter)}"))
        line: dict[str, Any] = {
            "parentUuid": self._parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": self.version,
            "gitBranch": self.git_branch,
            "type": line_type,
            "uuid": line_uuid,
            "timestamp": self._clock.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }
        line.update(extra)
        self._parent = line_uuid
        return line

    # -- human and tool turns ---------------------------------------------

    def user_prompt(self, text: str) -> dict[str, Any]:
        """A prompt typed by a human: string content."""
        return self._base("user", message={"role": "user", "content": text})

    def user_text_blocks(self, *texts: str) -> dict[str, Any]:
        """A human prompt sent as text blocks (e.g. pasted with an image)."""
        blocks = [{"type": "text", "text": text} for text in texts]
        return self._base("user", message={"role": "user", "content": blocks})

    def sidechain_prompt(self, text: str) -> dict[str, Any]:
        """A sub-agent's prompt, written by the main agent: a user line, not a human turn.

        Sidechain lines chain among themselves (the first has no parent), so the
        main chain's parent is left where it was.
        """
        main_parent, self._parent = self._parent, None
        line = self._base("user", message={"role": "user", "content": text}, isSidechain=True)
        self._parent = main_parent
        return line

    def tool_result(self, tool_use_id: str, output: str, is_error: bool = False) -> dict[str, Any]:
        """A tool's output, carried on a user line: not a human turn."""
        block = {
            "tool_use_id": tool_use_id,
            "type": "tool_result",
            "content": output,
            "is_error": is_error,
        }
        return self._base(
            "user",
            message={"role": "user", "content": [block]},
            toolUseResult={"stdout": output, "stderr": "", "interrupted": False},
        )

    def compaction(self) -> dict[str, Any]:
        """The summary injected after compaction: a user line, not a human turn."""
        return self._base(
            "user",
            message={"role": "user", "content": COMPACTION_TEXT},
            isCompactSummary=True,
        )

    def compaction_without_flag(self) -> dict[str, Any]:
        """Older versions: only the text marks the continuation."""
        return self._base("user", message={"role": "user", "content": COMPACTION_TEXT})

    def assistant_text(self, text: str) -> dict[str, Any]:
        return self._assistant([{"type": "text", "text": text}], "end_turn")

    def assistant_tool_use(self, name: str, tool_input: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """An assistant turn calling a tool; returns the line and the tool_use id."""
        tool_use_id = f"toolu_{next(self._counter):024d}"
        block = {"type": "tool_use", "id": tool_use_id, "name": name, "input": tool_input}
        return self._assistant([{"type": "text", "text": "Let me check."}, block], "tool_use"), tool_use_id

    def _assistant(self, content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
        return self._base(
            "assistant",
            message={
                "id": f"msg_{next(self._counter):020d}",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-20250514",
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": None,
                "usage": {"input_tokens": 1200, "output_tokens": 85, "cache_read_input_tokens": 0},
            },
            requestId=f"req_{next(self._counter):016d}",
        )

    # -- other line types (must be skipped) --------------------------------

    def summary(self, text: str = "Gateway refactor") -> dict[str, Any]:
        return {"type": "summary", "summary": text, "leafUuid": self._parent}

    def system(self, subtype: str = "stop_hook_summary", content: str = "hooks ran") -> dict[str, Any]:
        return self._base("system", subtype=subtype, content=content, level="info", isMeta=False)

    def progress(self) -> dict[str, Any]:
        return self._base(
            "progress", data={"type": "hook_progress", "hookEvent": "PostToolUse"}, toolUseID="toolu_x"
        )

    def file_history_snapshot(self) -> dict[str, Any]:
        return {
            "type": "file-history-snapshot",
            "messageId": self._parent,
            "snapshot": {"trackedFileBackups": {}, "timestamp": self._clock.isoformat()},
            "isSnapshotUpdate": False,
        }

    def permission_mode(self, mode: str = "acceptEdits") -> dict[str, Any]:
        return {"type": "permission-mode", "permissionMode": mode, "sessionId": self.session_id}

    def unknown_type(self) -> dict[str, Any]:
        return self._base("queue-operation", operation="enqueue", content="later")

    # -- files ---------------------------------------------------------------

    def path_under(self, root: Path) -> Path:
        """Where the transcript lives under a ``~/.claude/projects``-like root."""
        directory = root / self.project_slug
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{self.session_id}.jsonl"


def append_bytes(path: Path, data: bytes) -> None:
    """Append raw bytes (possibly a partial line) and flush them to the file."""
    with open(path, "ab") as handle:
        handle.write(data)
        handle.flush()


def realistic_session(builder: TranscriptBuilder) -> tuple[list[dict[str, Any]], set[str]]:
    """A mixed session; returns its lines and the uuids of the human turns."""
    humans: set[str] = set()
    lines: list[dict[str, Any]] = [builder.summary(), builder.permission_mode()]
    prompt = builder.user_prompt("Fix the failing test in store/ please")
    humans.add(prompt["uuid"])
    lines += [builder.file_history_snapshot(), prompt]
    call, tool_id = builder.assistant_tool_use("Bash", {"command": "pytest -q", "description": "Run tests"})
    lines += [call, builder.progress(), builder.tool_result(tool_id, "1 failed, 41 passed")]
    lines += [builder.assistant_text("The cursor ack is off by one; fixed."), builder.system()]
    lines.append(builder.compaction())
    blocks = builder.user_text_blocks("Also", "run the linter — ünïcode ok?")
    humans.add(blocks["uuid"])
    lines += [blocks, builder.unknown_type(), builder.assistant_text("Done.")]
    return lines, humans
