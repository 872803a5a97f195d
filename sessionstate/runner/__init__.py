"""Agent runners: where replies and child runs come from.

The project has no LLM. ``AgentRunner`` is the interface a real runtime implements;
``ScriptedRunner`` is a deterministic implementation for the demo and the tests; and
``RunExecutor`` runs turns in background threads with real timeouts and cancellation.
"""

from .base import AgentRunner, RunCancelled, RunContext, TurnRequest, TurnResult
from .executor import RunExecutor
from .scripted import Rule, ScriptedRunner

__all__ = [
    "AgentRunner",
    "Rule",
    "RunCancelled",
    "RunContext",
    "RunExecutor",
    "ScriptedRunner",
    "TurnRequest",
    "TurnResult",
]
