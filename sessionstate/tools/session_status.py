"""``session_status``: the core state answer (``stateVersion``, ``changesSince``) plus the
``/status`` card (usage, time, model/runtime, linked task); sets or clears the model override.

The state fields are exactly ``Gateway.session_status``; the card fields are added beside them.
Visibility applies, with one grant: a caller holding a cursor on the target (spawn edge or
watch) may read it, because its stale notice tells it to call exactly this.
"""

from __future__ import annotations

from typing import Any

from ..shared.fencing import quote_untrusted
from ..shared.timefmt import iso_millis
from .context import ToolContext
from .rows import run_json


def run(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    gw = ctx.gw
    with gw.locked():
        key = args.get("sessionKey")
        target = ctx.caller if key in (None, "current") else ctx.resolve(key)
        # A cursor is a grant: the stale notice names this call, so a watcher may always
        # reconcile its target read-only. Setting the model needs visibility.
        if "model" in args or not ctx.watches(target):
            ctx.require_visible(target)
        if "model" in args:
            gw.registry.set_model_override(target[0], args["model"], agent_id=target[1])
        result = gw.ops.session_status(target[0], changes_since=args.get("changesSince"), agent_id=target[1])
        result.update(card(ctx, target))
    return result


def card(ctx: ToolContext, target: tuple[str, str]) -> dict[str, Any]:
    gw = ctx.gw
    now = gw.clock()
    session = gw.registry.session_record(target)
    assert session is not None  # resolved under the same lock
    meta = gw.registry.meta_of(target)
    count, last_message_at = gw.transcripts.stats(target)
    updated = max(session.updated_at, meta.last_activity_at or 0.0, last_message_at or 0.0)
    child_runs = gw.runs.runs_of_child(target)
    active = gw.runs.active_by_requester(target)
    task = run_json(child_runs[0], now) if child_runs else None
    fields: dict[str, Any] = {
        "agentId": target[1],
        "kind": session.kind,
        "sessionId": meta.session_id,
        "label": session.label,
        "model": meta.model_override or meta.model or "default",
        "modelOverride": meta.model_override,
        "runtime": meta.runtime or ("acp" if session.kind == "acp" else "native"),
        "thinking": meta.thinking,
        "sandboxed": meta.sandboxed,
        "spawnDepth": meta.spawn_depth,
        "usage": {
            "inputTokens": meta.input_tokens,
            "outputTokens": meta.output_tokens,
            "totalTokens": meta.input_tokens + meta.output_tokens,
            "messages": count,
        },
        "time": {
            "now": iso_millis(now),
            "createdAt": iso_millis(session.created_at),
            "updatedAt": iso_millis(updated),
            "ageSeconds": round(max(0.0, now - session.created_at), 3),
        },
        "task": task,
        "activeRuns": len(active),
    }
    fields["card"] = _card_text(target, fields)
    return fields


def _card_text(target: tuple[str, str], f: dict[str, Any]) -> str:
    usage, time = f["usage"], f["time"]
    lines = [
        f"Session {target[0]} ({f['kind']}, agent {target[1]})",
        f"Model: {quote_untrusted(f['model']) if f['model'] else None}" + (" (override)" if f["modelOverride"] else "") + f" · runtime {f['runtime']}",
        f"Usage: {usage['inputTokens']} in / {usage['outputTokens']} out · {usage['messages']} messages",
        f"Time: created {time['createdAt']} · updated {time['updatedAt']}",
    ]
    if f["task"]:
        # The task is the requester's text: quoted, so the card's lines stay the gateway's own.
        lines.append(f"Task: run {f['task']['runId']} {f['task']['status']}: {quote_untrusted(f['task']['task'])}")
    if f["activeRuns"]:
        lines.append(f"Sub-agents running: {f['activeRuns']}")
    return "\n".join(lines)
