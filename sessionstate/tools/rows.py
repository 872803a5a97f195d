"""Shared JSON shapes of the tools: transcript rows, derived titles, previews, run rows."""

from __future__ import annotations

from typing import Any

from ..shared.fencing import fenced_text
from ..store import MessageRecord, RunRecord
from ..shared.timefmt import iso_millis
from .sanitize import normalize_assistant_text, redact_secrets

TITLE_CHARS = 80
PREVIEW_CHARS = 160


def history_row(record: MessageRecord) -> dict[str, Any]:
    row: dict[str, Any] = {"role": record.role, "text": record.text, "timestamp": iso_millis(record.created_at)}
    if record.provenance is not None:
        row["provenance"] = record.provenance
    if record.tool_calls is not None:
        row["toolCalls"] = record.tool_calls
    if record.tool_result is not None:
        row["toolResult"] = record.tool_result
    return row


def _one_line(text: str, limit: int) -> str:
    # A fenced message (inter-session, task, steering) is summarised by its content: the
    # result is one JSON string field, which its encoding keeps from standing as a line.
    unfenced = fenced_text(text)
    lines = [ln.strip() for ln in (text if unfenced is None else unfenced).splitlines() if ln.strip()]
    line = " ".join(lines)
    line, _ = redact_secrets(line)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def derived_title(label: str | None, first_user_text: str | None, key: str) -> str:
    if label:
        return label
    if first_user_text:
        title = _one_line(first_user_text, TITLE_CHARS)
        if title:
            return title
    return key


def preview(record: MessageRecord | None) -> str | None:
    if record is None:
        return None
    text = normalize_assistant_text(record.text) if record.role == "assistant" else record.text
    return _one_line(text, PREVIEW_CHARS) or None


def run_json(run: RunRecord, now: float) -> dict[str, Any]:
    end = run.ended_at if run.ended_at is not None else now
    row: dict[str, Any] = {
        "runId": run.run_id,
        "childSessionKey": run.child_key,
        "runtime": run.runtime,
        "status": run.status,
        "task": _one_line(run.task, 200),
        "createdAt": iso_millis(run.created_at),
        "durationSeconds": round(max(0.0, end - run.created_at), 3),
        "steered": run.steer_count,
    }
    for name, value in (("label", run.label), ("model", run.model), ("outcome", run.outcome)):
        if value is not None:
            row[name] = value
    if run.ended_at is not None:
        row["endedAt"] = iso_millis(run.ended_at)
    return row
