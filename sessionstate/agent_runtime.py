"""The agent-runtime half of ``Gateway``: tool policy, runner, registry metadata,
transcripts, producers and runs, as one mixin (each part in its own module)."""

from __future__ import annotations

from typing import Any

from .errors import InvalidArgument
from .producers import ProducersMixin
from .registry import RegistryMixin
from .runner.base import AgentRunner
from .runner.scripted import ScriptedRunner
from .runs import RunsMixin
from .tools.policy import ToolPolicy
from .transcript_api import TranscriptMixin

DEFAULT_POLICY = ToolPolicy()


class AgentRuntimeMixin(RegistryMixin, TranscriptMixin, ProducersMixin, RunsMixin):
    """State lives in the instance ``__dict__`` with defaults, so ``Gateway.__init__`` (and its
    signature) stays as it is."""

    __dict__: dict[str, Any]

    def configure_tools(self, policy: ToolPolicy | None = None, *, runner: AgentRunner | None = None) -> None:
        """Set the tool policy and/or the runner (defaults: ``ToolPolicy()``, ``ScriptedRunner()``)."""
        if policy is not None:
            if not isinstance(policy, ToolPolicy):
                raise InvalidArgument("policy must be a ToolPolicy")
            self.__dict__["_tool_policy"] = policy
        if runner is not None:
            if not callable(getattr(runner, "run_turn", None)):
                raise InvalidArgument("runner must have a run_turn(request, ctx) method")
            self.__dict__["_runner"] = runner

    @property
    def tool_policy(self) -> ToolPolicy:
        policy: ToolPolicy = self.__dict__.get("_tool_policy", DEFAULT_POLICY)
        return policy

    @property
    def runner(self) -> AgentRunner:
        runner = self.__dict__.get("_runner")
        if runner is None:
            runner = self.__dict__.setdefault("_runner", ScriptedRunner())
        return runner  # type: ignore[no-any-return]
