"""The agent-runtime half of ``Gateway``: tool policy, runner, registry metadata,
transcripts, producers and runs, as one mixin (each part in its own module)."""

from __future__ import annotations

import uuid
from typing import Any, Callable

from .errors import InvalidArgument
from .producers import ProducersMixin
from .registry import RegistryMixin
from .runner.base import AgentRunner
from .runner.scripted import ScriptedRunner
from .runner.executor import RunExecutor
from .runs import RunsMixin
from .tools.policy import ToolPolicy
from .transcript_api import TranscriptMixin

DEFAULT_POLICY = ToolPolicy()


class AgentRuntimeMixin(RegistryMixin, TranscriptMixin, ProducersMixin, RunsMixin):
    """The tool-facing half of ``Gateway``; ``Gateway.__init__`` calls ``_init_agent_runtime``."""

    def _init_agent_runtime(self) -> None:
        self._tool_policy: ToolPolicy = DEFAULT_POLICY
        self._runner: AgentRunner | None = None  # a ScriptedRunner is made on first use
        self._id_factory: Callable[[], str] | None = None
        self._run_executor: RunExecutor | None = None

    def configure_tools(
        self,
        policy: ToolPolicy | None = None,
        *,
        runner: AgentRunner | None = None,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        """Set the tool policy, the runner and/or the id factory (defaults: ``ToolPolicy()``,
        ``ScriptedRunner()``, 12 random hex digits). Ids name runs, exchanges and child keys;
        tests pass a counter to make them deterministic."""
        if id_factory is not None and not callable(id_factory):
            raise InvalidArgument("id_factory must be callable")
        if policy is not None and not isinstance(policy, ToolPolicy):
            raise InvalidArgument("policy must be a ToolPolicy")
        if runner is not None and not callable(getattr(runner, "run_turn", None)):
            raise InvalidArgument("runner must have a run_turn(request, ctx) method")
        # Checked first, applied together: a refused call changes nothing.
        if id_factory is not None:
            self._id_factory = id_factory
        if policy is not None:
            self._tool_policy = policy
        if runner is not None:
            self._runner = runner

    @property
    def tool_policy(self) -> ToolPolicy:
        return self._tool_policy

    @property
    def runner(self) -> AgentRunner:
        if self._runner is None:
            self._runner = ScriptedRunner()
        return self._runner

    def new_id(self) -> str:
        """A fresh token for run ids, exchange ids and child session keys."""
        return str(self._id_factory()) if self._id_factory is not None else uuid.uuid4().hex[:12]
