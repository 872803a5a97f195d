"""The runner interface: one agent turn in, one reply out, cancellable while it runs."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal, Protocol

# reply: answer a sessions_send message; reply_back: one turn of the reply-back loop;
# task: a spawned child's run.
Purpose = Literal["reply", "reply_back", "task"]
REPLY_SKIP = "REPLY_SKIP"


class RunCancelled(Exception):
    """Raised by a runner (or ``RunContext.check``) when its run was cancelled."""


@dataclass(frozen=True)
class TurnRequest:
    session_key: str
    agent_id: str
    purpose: Purpose
    prompt: str  # exactly what the agent sees (inter-session header included)
    sender_key: str | None = None
    model: str | None = None
    thinking: str | None = None
    history: tuple[tuple[str, str], ...] = ()  # (role, text) of the transcript so far


@dataclass(frozen=True)
class TurnResult:
    text: str | None  # None or "" = no reply
    input_tokens: int = 0
    output_tokens: int = 0


class RunContext:
    """What a running turn can see of the world: cancellation and steering guidance.

    Thread-safe: the gateway cancels and steers from other threads.
    """

    def __init__(self) -> None:
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._steering: list[str] = []
        self.reason: str | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
        self._cancelled.set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; ``True`` as soon as the run is cancelled."""
        return self._cancelled.wait(seconds)

    def check(self) -> None:
        if self.cancelled:
            raise RunCancelled(self.reason or "cancelled")

    def steer(self, guidance: str) -> None:
        with self._lock:
            self._steering.append(guidance)

    def take_steering(self) -> list[str]:
        with self._lock:
            taken, self._steering = self._steering, []
        return taken


class AgentRunner(Protocol):
    """Produces one agent turn. May block; must return soon after ``ctx`` is cancelled
    (by raising ``RunCancelled`` or returning). Any other exception is a failed turn."""

    def run_turn(self, request: TurnRequest, ctx: RunContext) -> TurnResult: ...
