"""A deterministic runner for the demo and the tests.

Rules are tried in order; the first whose session pattern (``fnmatch``) and purpose match
answers. A rule's replies are used one per call, the last one repeating. ``delay`` is spent
in ``ctx.wait`` so a run can be cancelled or time out while it "works"; steering guidance that
arrives during the delay is acknowledged in the reply. Without a matching rule the defaults
answer: ``received: <first line>`` to a message, ``REPLY_SKIP`` in the reply-back loop (so
loops end at once unless a test scripts them), ``done: <first line>`` for a task.
"""

from __future__ import annotations

import fnmatch
import threading
from dataclasses import dataclass, field

from ..shared.fencing import fenced_text
from .base import REPLY_SKIP, RunCancelled, RunContext, TurnRequest, TurnResult


@dataclass
class Rule:
    pattern: str = "*"
    purpose: str | None = None  # None matches every purpose
    replies: list[str | None] = field(default_factory=list)
    delay: float = 0.0
    fail: str | None = None  # raise RuntimeError(fail) instead of replying
    ignore_cancel: bool = False  # a misbehaving runner: keeps "working" after cancel
    calls: int = 0

    def matches(self, request: TurnRequest) -> bool:
        return fnmatch.fnmatchcase(request.session_key, self.pattern) and (
            self.purpose is None or self.purpose == request.purpose
        )


def _first_line(text: str) -> str:
    # A fenced prompt (inter-session message, task, steering) is read for its content.
    unfenced = fenced_text(text)
    lines = [line for line in (text if unfenced is None else unfenced).splitlines() if line.strip()]
    return (lines[0] if lines else "").strip()[:120]


class ScriptedRunner:
    def __init__(self, rules: list[Rule] | None = None) -> None:
        self.rules = list(rules or [])
        self.requests: list[TurnRequest] = []
        self._lock = threading.Lock()

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.insert(0, rule)  # newest rule wins
        return rule

    def run_turn(self, request: TurnRequest, ctx: RunContext) -> TurnResult:
        with self._lock:
            self.requests.append(request)
            rule = next((r for r in self.rules if r.matches(request)), None)
            index = rule.calls if rule else 0
            if rule:
                rule.calls += 1
        if rule is None:
            return TurnResult(self._default(request), input_tokens=len(request.prompt) // 4, output_tokens=8)
        steered: list[str] = []
        if rule.delay > 0:
            if rule.ignore_cancel:
                threading.Event().wait(rule.delay)
            elif ctx.wait(rule.delay):
                raise RunCancelled(ctx.reason or "cancelled")
        steered += [fenced_text(note) or note for note in ctx.take_steering()]
        if rule.fail is not None:
            raise RuntimeError(rule.fail)
        text = rule.replies[min(index, len(rule.replies) - 1)] if rule.replies else self._default(request)
        if steered and text is not None:
            text = f"{text} (steered: {'; '.join(steered)})"
        return TurnResult(text, input_tokens=len(request.prompt) // 4, output_tokens=len(text or "") // 4)

    @staticmethod
    def _default(request: TurnRequest) -> str:
        if request.purpose == "reply_back":
            return REPLY_SKIP
        prefix = "done" if request.purpose == "task" else "received"
        return f"{prefix}: {_first_line(request.prompt)}"
