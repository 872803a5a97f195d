"""``sessions_send``: a message into another session, optionally waiting for the reply.

Delivery (under the gateway lock, one transaction): the receiver's transcript gets a
``user`` row whose text is the prompt the receiving agent sees, the message fenced as
untrusted data under ``[Inter-session message ... isUser=false]`` (``fencing.py``), with
provenance ``inter_session`` and actor
``agent`` + the sender's key. Then, with ``watch: true``, the sender watches the session
that actually received it, from its current version.

Signal log: an inter-session message records no event. The spec's kinds are fixed
(section 8): it is not a ``human_direct_message``, and agent-to-agent traffic is what the
coordinating agents already know about; the humans stepping in are what watchers need.

The reply comes from the runner in a background job: ``timeoutSeconds: 0`` returns
``accepted`` at once, a positive timeout waits for ``ok``/``no_reply``/``error`` or gives
``timeout`` (the job goes on; its reply still lands in the transcript). After a reply, the
reply-back loop lets the two agents alternate for at most 5 turns; ``REPLY_SKIP`` from either
ends it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..errors import InvalidArgument, SessionStateError
from ..shared.fencing import fence_untrusted
from ..shared.keys import is_agent_qualified
from ..runner.base import REPLY_SKIP, RunContext, TurnRequest, TurnResult
from .context import ToolContext
from .host import ToolHost


log = logging.getLogger("sessionstate")
MAX_REPLY_BACK_TURNS = 5
SessionRef = tuple[str, str]


def frame(sender: str, text: str) -> str:
    """The receiving agent's prompt: tool-routed data, not the end user's words (fenced)."""
    return fence_untrusted(text, f"Inter-session message from {sender} via sessions_send; isUser=false")


def deliver(gw: ToolHost, sender: str, receiver: SessionRef, text: str, exchange_id: str) -> str:
    prompt = frame(sender, text)
    gw.transcripts.append_message(
        receiver[0], "user", prompt, agent_id=receiver[1], actor_type="agent", actor_id=sender,
        provenance={"kind": "inter_session", "sourceSessionKey": sender, "sourceTool": "sessions_send",
                    "isUser": False, "exchangeId": exchange_id},
    )
    return prompt


def run(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    gw = ctx.gw
    exchange_id = f"send-{gw.new_id()}"
    with gw.locked():
        target = ctx.resolve_visible(args["sessionKey"], refuse_thread=True)
        if target == ctx.caller:
            raise InvalidArgument("sessions_send: a session cannot send to itself")
        prompt = deliver(gw, ctx.key, target, args["message"], exchange_id)
        result: dict[str, Any] = {"runId": exchange_id, "sessionKey": target[0], "agentId": target[1]}
        if args.get("watch"):
            result["watched"] = _watch(gw, ctx.key, target)
        elif "watch" in args:  # given as false: still say whether the sender watches it
            result["watched"] = _watches(gw, ctx.key, target)
        meta = gw.registry.meta_of(target)
    done = threading.Event()
    outcome: dict[str, Any] = {}
    gw.runs.executor.start(
        exchange_id,
        lambda rctx: _exchange(gw, ctx.caller, target, prompt, meta.model_override or meta.model, rctx, outcome, done),
    )
    timeout = args["timeoutSeconds"]
    if timeout == 0:
        return {"status": "accepted", **result}
    if not done.wait(timeout):
        return {"status": "timeout", **result}
    return {**outcome, **result}


def _watch(gw: ToolHost, sender: str, target: SessionRef) -> bool:
    """True when the sender watches the receiver after the call (new or existing cursor)."""
    if not is_agent_qualified(sender):
        return False  # R3: such sessions get changesSince, not notices
    gw.ops.watch(sender, target[0], target_agent_id=target[1])
    return True


def _watches(gw: ToolHost, sender: str, target: SessionRef) -> bool:
    """True when the sender already holds a cursor on the receiver (a spawn edge, an earlier watch)."""
    return is_agent_qualified(sender) and gw.ops.cursor_positions(sender, target[0], target_agent_id=target[1]) is not None


def _turn(gw: ToolHost, session: SessionRef, purpose: str, prompt: str, sender: str, model: str | None, rctx: RunContext) -> TurnResult:
    request = TurnRequest(session[0], session[1], purpose, prompt, sender_key=sender, model=model)  # type: ignore[arg-type]
    return gw.runs.runner.run_turn(request, rctx)


def _is_reply(text: str | None) -> bool:
    return bool(text and text.strip() and text.strip() != REPLY_SKIP)


def _exchange(
    gw: ToolHost, sender: SessionRef, target: SessionRef, prompt: str, model: str | None,
    rctx: RunContext, outcome: dict[str, Any], done: threading.Event,
) -> None:
    try:
        try:
            result = _turn(gw, target, "reply", prompt, sender[0], model, rctx)
        except Exception as exc:
            outcome.update(status="error", error={"code": "run_failed", "message": f"{type(exc).__name__}: {exc}"})
            return
        if not _is_reply(result.text):
            outcome.update(status="no_reply")
            return
        reply = str(result.text)
        gw.transcripts.append_message(target[0], "assistant", reply, agent_id=target[1], actor_id=target[0],
                          input_tokens=result.input_tokens, output_tokens=result.output_tokens)
        outcome.update(status="ok", reply=reply)
    finally:
        done.set()
    try:
        _reply_back(gw, sender, target, reply, rctx)
    except SessionStateError as exc:  # a session went away mid-loop
        log.info("reply-back loop %s -> %s stopped: %s", sender[0], target[0], exc)


def _reply_back(gw: ToolHost, sender: SessionRef, target: SessionRef, reply: str, rctx: RunContext) -> int:
    """Alternate sender and target, at most 5 turns; REPLY_SKIP from either ends it."""
    speaker, listener, incoming = sender, target, reply
    exchange = f"reply-back-{gw.new_id()}"
    for turn in range(1, MAX_REPLY_BACK_TURNS + 1):
        if rctx.cancelled:
            return turn - 1
        prompt = deliver(gw, listener[0], speaker, incoming, exchange)
        result = _turn(gw, speaker, "reply_back", prompt, listener[0], None, rctx)
        if not _is_reply(result.text):
            return turn - 1
        incoming = str(result.text)
        gw.transcripts.append_message(speaker[0], "assistant", incoming, agent_id=speaker[1], actor_id=speaker[0],
                          input_tokens=result.input_tokens, output_tokens=result.output_tokens)
        speaker, listener = listener, speaker
    return MAX_REPLY_BACK_TURNS
