"""``sessions_list``: the sessions the caller may see, newest activity first, filtered."""

from __future__ import annotations

from typing import Any

from ..shared.timefmt import iso_millis
from .context import ToolContext
from .rows import derived_title, history_row, preview
from .sanitize import build_history_view

RECENT_VIEW_BYTES = 16 * 1024  # per row: the whole list must stay a tool-sized result


def run(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    gw = ctx.gw
    with gw.locked():
        return _list(ctx, args)


def _list(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    gw = ctx.gw
    now = gw.clock()
    kinds = set(args.get("kinds") or ())
    search = args.get("search", "").lower()
    metas = gw.registry.all_meta()
    found: list[tuple[float, dict[str, Any], tuple[str, str]]] = []
    for session in gw.registry.list_sessions():
        target = (session.session_key, session.agent_id)
        if not ctx.visible(target):
            continue  # invisible sessions are not even counted
        if kinds and session.kind not in kinds:
            continue
        if "label" in args and session.label != args["label"]:
            continue
        if "agentId" in args and session.agent_id != args["agentId"]:
            continue
        meta = metas.get(target) or gw.registry.meta_of(target)
        count, last_message_at = gw.transcripts.stats(target)
        activity = max(session.updated_at, meta.last_activity_at or 0.0, last_message_at or 0.0)
        if "activeMinutes" in args and activity < now - args["activeMinutes"] * 60:
            continue
        title = derived_title(session.label, gw.transcripts.first_text(target, "user"), session.session_key)
        if search:
            haystack = " ".join((session.session_key, session.label or "", title, meta.session_id or ""))
            if search not in haystack.lower():
                continue
        row: dict[str, Any] = {
            "key": session.session_key,
            "agentId": session.agent_id,
            "kind": session.kind,
            "sessionId": meta.session_id,
            "label": session.label,
            "channel": meta.channel,
            "model": meta.model_override or meta.model,
            "spawnedBy": session.parent_key,
            "sandboxed": meta.sandboxed,
            "spawnDepth": meta.spawn_depth,
            "inputTokens": meta.input_tokens,
            "outputTokens": meta.output_tokens,
            "totalTokens": meta.input_tokens + meta.output_tokens,
            "messageCount": count,
            "createdAt": iso_millis(session.created_at),
            "updatedAt": iso_millis(activity),
        }
        if args.get("includeTitle"):
            row["title"] = title
        found.append((activity, row, target))
    found.sort(key=lambda item: (-item[0], item[1]["key"], item[1]["agentId"]))
    rows = []
    for _, row, target in found[: args["limit"]]:
        version = gw.ops.state_version(*target)
        if version > 0:
            row["stateVersion"] = version
        if args.get("includePreview"):
            last = [m for m in gw.transcripts.recent(target, 5) if m.role != "tool"]
            row["preview"] = preview(last[-1] if last else None)
        if args.get("recentMessages"):
            records = [m for m in gw.transcripts.recent(target, args["recentMessages"] * 3) if m.role != "tool"]
            view = build_history_view(
                [history_row(m) for m in records[-args["recentMessages"]:]], max_bytes=RECENT_VIEW_BYTES
            )
            row["messages"] = view["messages"]
        rows.append(row)
    return {"count": len(rows), "sessions": rows}
