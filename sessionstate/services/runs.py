"""The runs service: child runs, with the runner and the executor: start, finish (once),
steer, kill, announce.

A run is a row in ``agent_runs`` plus a background job in the
``RunExecutor``. Its end is recorded exactly once: the row's compare-and-set from ``running``
decides which of completion, failure, timeout or kill wins, and the signal-log event carries
the dedupe key ``run-terminal:<runId>`` as a second guard (spec R10). Run events are
log-only kinds; the requester learns of the end through the announce, a system event for
its next turn that names the requester's stored reply route.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..errors import InvalidArgument, SessionStateError, UnknownSession
from ..shared.fencing import fence_untrusted, quote_untrusted
from ..shared.keys import SessionRef, check_key
from .locking import locked
from ..runner.base import AgentRunner, RunCancelled, RunContext, TurnRequest
from .notice.protocol import NoticeProtocol
from .registry import Registry
from ..runner.executor import RunExecutor
from ..runner.scripted import ScriptedRunner
from ..store import COMPLETED, FAILED, RunRecord, Store
from .transcripts import Transcripts
from ..shared.validation import (
    MAX_COUNT,
    MAX_ID_LENGTH,
    check_actor_type,
    check_count,
    check_line,
    check_optional_text,
    check_seconds,
    check_text,
)


log = logging.getLogger("sessionstate")
OUTCOMES = ("completed", "error", "timeout", "cancelled")
ANNOUNCE_TEXT_CHARS = 1000
MAX_RESULT_CHARS = 1_000_000  # a run's result text, as a transcript message
MAX_GUIDANCE_CHARS = 1_000_000


def _check_target(value: object, field: str) -> SessionRef:
    if not isinstance(value, tuple) or len(value) != 2:
        raise InvalidArgument(f"{field} must be a (session key, agent id) pair")
    return check_key(value[0], f"{field} key"), check_key(value[1], f"{field} agent id")


def announce_text(run: RunRecord, outcome: str, text: str | None, route: tuple[str | None, str | None]) -> str:
    """The requester's system line for a finished run: one line, the result bounded.

    Everything in it that another actor wrote (the child's reply or error, the label, the
    stored route) is a ``quote_untrusted`` literal, so no part of it reads as a line of its own.
    """
    name = quote_untrusted(run.label or run.child_key)
    if outcome == "completed":
        body = " ".join((text or "(no reply)").split())
        if len(body) > ANNOUNCE_TEXT_CHARS:
            body = body[:ANNOUNCE_TEXT_CHARS] + "…"
        head = f"completed; reply (untrusted data): {quote_untrusted(body)}"
    elif outcome == "timeout":
        # (a run without a timeout can still be ended as one through finish_run)
        head = f"timed out after {run.timeout_seconds:g}s" if run.timeout_seconds else "timed out"
    else:
        detail = f"; detail (untrusted data): {quote_untrusted(' '.join(text.split())[:300])}" if text else ""
        head = f"failed ({outcome}){detail}"
    via = ""
    if route[0]:
        via = f" [route {quote_untrusted(route[0])}" + (f" -> {quote_untrusted(route[1])}" if route[1] else "") + "]"
    return f"[Sub-agent result] {name} (run {run.run_id}) {head}{via}"


class Runs:
    """Owns the ``agent_runs`` table, the runner (a ``ScriptedRunner`` unless configured) and
    the background executor; records run ends through the notice protocol."""

    def __init__(
        self,
        store: Store,
        clock: Callable[[], float],
        protocol: NoticeProtocol,
        registry: Registry,
        transcripts: Transcripts,
    ) -> None:
        self.store = store
        self.clock = clock
        self.protocol = protocol
        self.registry = registry
        self.transcripts = transcripts
        self._runner: AgentRunner | None = None  # a ScriptedRunner is made on first use
        self._executor: RunExecutor | None = None  # threads start only once a run does

    @property
    def runner(self) -> AgentRunner:
        if self._runner is None:
            self._runner = ScriptedRunner()
        return self._runner

    @runner.setter
    def runner(self, runner: AgentRunner) -> None:
        if not callable(getattr(runner, "run_turn", None)):
            raise InvalidArgument("runner must have a run_turn(request, ctx) method")
        self._runner = runner

    @property
    def executor(self) -> RunExecutor:
        if self._executor is None:
            self._executor = RunExecutor()
        return self._executor

    # -- reading ------------------------------------------------------------------------------

    @locked
    def get_run(self, run_id: str) -> RunRecord | None:
        return self.store.runs.get(check_line(run_id, "run id", MAX_ID_LENGTH))

    @locked
    def runs_of(self, requester: SessionRef, limit: int = 50) -> list[RunRecord]:
        target = _check_target(requester, "requester")
        return self.store.runs.by_requester(*target, check_count(limit, "limit"))

    @locked
    def runs_of_child(self, child: SessionRef) -> list[RunRecord]:
        return self.store.runs.by_child(*_check_target(child, "child"))

    @locked
    def active_runs(self) -> list[RunRecord]:
        return self.store.runs.active()

    # -- lifecycle ----------------------------------------------------------------------------

    def start_run(self, run: RunRecord, prompt: str) -> None:
        """Run the child's task in the background (the row is already committed)."""
        if not isinstance(run, RunRecord):
            raise InvalidArgument("run must be a RunRecord")
        check_text(prompt, "prompt", MAX_RESULT_CHARS)
        timeout = run.timeout_seconds or None

        def job(ctx: RunContext) -> None:
            request = TurnRequest(
                run.child_key, run.child_agent_id, "task", prompt, sender_key=run.requester_key,
                model=run.model, thinking=run.thinking,
            )
            try:
                result = self.runner.run_turn(request, ctx)
            except RunCancelled:
                return  # whoever cancelled (kill, timeout, shutdown) recorded the end
            except Exception as exc:  # the runner failed: the run failed
                if not ctx.cancelled:
                    self._finish_quietly(run.run_id, "error", f"{type(exc).__name__}: {exc}")
                return
            if not ctx.cancelled:  # a late result after a kill or timeout is dropped
                self._finish_quietly(run.run_id, "completed", result.text, usage=(result.input_tokens, result.output_tokens))

        self.executor.start(
            run.run_id, job, timeout=timeout,
            on_timeout=lambda: self._finish_quietly(run.run_id, "timeout", None, actor_type="system"),
        )

    def _finish_quietly(self, run_id: str, outcome: str, text: str | None, **kwargs: Any) -> None:
        try:
            try:
                self.finish_run(run_id, outcome, text=text, **kwargs)
            except InvalidArgument as refused:
                # The runner's reply, usage or error text is over a bound: the run still ends
                # (as an error saying why), or it would stay "running" with nobody to end it.
                log.warning("run %s: its result was refused (%s); it ends as an error", run_id, refused)
                self.finish_run(run_id, "error", text=f"the runner's result was refused: {refused}",
                                actor_type=kwargs.get("actor_type", "agent"))
        except SessionStateError:
            log.info("run %s ended (%s) after its session went away", run_id, outcome)
        except Exception:
            log.exception("recording the end of run %s failed", run_id)

    @locked
    def finish_run(
        self,
        run_id: str,
        outcome: str,
        *,
        text: str | None = None,
        actor_type: str = "agent",
        actor_id: str | None = None,
        announce: bool = True,
        usage: tuple[int, int] = (0, 0),
    ) -> bool:
        """Record the run's end once; ``False`` when it had already ended (or is gone).

        ``outcome`` ``completed`` records ``run_completed``; ``error``/``timeout``/``cancelled``
        record ``run_failed`` with that ``payload.outcome``.
        """
        check_line(run_id, "run id", MAX_ID_LENGTH)
        if not isinstance(outcome, str) or outcome not in OUTCOMES:
            raise InvalidArgument(f"outcome must be one of {list(OUTCOMES)}")
        check_optional_text(text, "text", MAX_RESULT_CHARS)
        check_actor_type(actor_type)
        if actor_id is not None:
            check_key(actor_id, "actor id")
        if not isinstance(usage, tuple) or len(usage) != 2:
            raise InvalidArgument("usage must be an (input tokens, output tokens) pair")
        for name, count in zip(("input tokens", "output tokens"), usage):
            check_count(count, name, MAX_COUNT // 2)
        run = self.store.runs.get(run_id)
        if run is None or run.status != "running":
            return False
        now = self.clock()
        failed = outcome != "completed"
        with self.store.transaction():  # the run row and its event commit together; notices after (R9)
            if not self.store.runs.finish(run_id, FAILED if failed else COMPLETED, outcome if failed else None, text, now):
                return False
            if not failed and text:
                self.transcripts.append_message(
                    run.child_key, "assistant", text, agent_id=run.child_agent_id,
                    actor_id=run.child_key, input_tokens=usage[0], output_tokens=usage[1],
                    provenance={"kind": "run_result", "runId": run_id},
                )
            summary = {"completed": "run completed", "error": "run failed", "timeout": "run timed out",
                       "cancelled": "run cancelled"}[outcome]
            self.protocol.record_event(
                run.child_key, "run_failed" if failed else "run_completed", agent_id=run.child_agent_id,
                actor_type=actor_type, actor_id=actor_id if actor_id is not None else (run.child_key if actor_type == "agent" else None),
                run_id=run_id, summary=f"{summary} ({run_id})"[:200],
                payload={"outcome": outcome} if failed else None,
                dedupe_key=f"run-terminal:{run_id}",
            )
        if announce:
            self._announce(run, outcome, text)
        return True

    def _announce(self, run: RunRecord, outcome: str, text: str | None) -> None:
        requester = (run.requester_key, run.requester_agent_id)
        if self.store.get_session(*requester) is None:
            return  # the requester is gone: nobody to tell
        meta = self.registry.meta_of(requester)
        route = (meta.last_channel, meta.last_to) if meta.last_channel else (run.announce_channel, run.announce_to)
        try:
            self.protocol.enqueue_system_event(run.requester_key, announce_text(run, outcome, text, route))
        except UnknownSession:  # an unqualified requester key shared by several agents
            return
        if meta.yielded_at is not None:
            # The requester ended its turn with sessions_yield to wait for this: wake it
            # even when it is a sub-agent (R12 concerns stale notices, not results).
            self.registry.update_meta(requester, yielded_at=None)
            key, reason = run.requester_key, f"subagent-result: {run.run_id}"
            self.store.after_commit(lambda: self.protocol.wakes.wake(key, reason))

    @locked
    def kill_run(self, run_id: str, *, actor_id: str | None = None, announce: bool = False) -> bool:
        """Cancel a running run: ``run_failed`` with outcome ``cancelled``. ``False`` if not running."""
        check_line(run_id, "run id", MAX_ID_LENGTH)
        ended = self.finish_run(run_id, "cancelled", actor_type="agent" if actor_id else "system",
                                actor_id=actor_id, announce=announce)
        ctx = self.executor.context(run_id)
        if ctx is not None:
            ctx.cancel("cancelled")
        return ended

    @locked
    def steer_run(self, run_id: str, guidance: str, *, sender: str) -> bool:
        """Deliver follow-up guidance into a running child (transcript + the live run)."""
        check_line(run_id, "run id", MAX_ID_LENGTH)
        check_text(guidance, "guidance", MAX_GUIDANCE_CHARS, allow_empty=False)
        check_key(sender, "sender")
        run = self.store.runs.get(run_id)
        if run is None or run.status != "running":
            return False
        prompt = fence_untrusted(guidance, f"Steering from {sender} via subagents; isUser=false")
        with self.store.transaction():
            self.transcripts.append_message(
                run.child_key, "user", prompt, agent_id=run.child_agent_id, actor_type="agent",
                actor_id=sender, provenance={"kind": "steer", "sourceSessionKey": sender, "runId": run_id, "isUser": False},
            )
            self.store.runs.note_steered(run_id)
        ctx = self.executor.context(run_id)
        if ctx is not None:
            ctx.steer(prompt)
        return True

    def wait_for_runs(self, timeout: float = 10.0) -> bool:
        """Wait (without the lock) until no background job runs; ``False`` on timeout."""
        return self.executor.wait_idle(check_seconds(timeout, "timeout"))

    def stop_runs(self, timeout: float = 5.0) -> list[str]:
        """Shutdown: cancel every run this database still has running (``run_failed``,
        ``cancelled``, no announce), then wait for the jobs. Returns the runs it ended."""
        timeout = check_seconds(timeout, "timeout")
        with self.store.lock:
            ended = [r.run_id for r in self.store.runs.active() if self.kill_run(r.run_id)]
        for job in self.executor.active():
            ctx = self.executor.context(job)
            if ctx is not None:
                ctx.cancel("shutdown")
        self.executor.wait_idle(timeout)
        return ended

    # -- rows for the tool layer ------------------------------------------------------------

    @locked
    def insert(self, record: RunRecord) -> None:
        """A new run's row (inside the transaction that creates its child session)."""
        self.store.runs.insert(record)

    @locked
    def active_by_requester(self, requester: SessionRef) -> list[RunRecord]:
        return self.store.runs.active_by_requester(*requester)
