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
from .runs import RunsMixin
from .tools.policy import ToolPolicy
from .transcript_api import TranscriptMixin

DEFAULT_POLICY = ToolPolicy()


class AgentRuntimeMixin(RegistryMixin, TranscriptMixin, ProducersMixin, RunsMixin):
    """State lives in the instance ``__dict__`` with defaults, so ``Gateway.__init__`` (and its
    signature) stays as it is."""

    __dict__: dict[str, Any]

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
        if id_factory is not None:
            if not callable(id_factory):
                raise InvalidArgument("id_factory must be callable")
            self.__dict__["_id_factory"] = id_factory
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

    def new_id(self) -> str:
        """A fresh token for run ids, exchange ids and child session keys."""
        factory = self.__dict__.get("_id_factory")
        return str(factory()) if factory is not None else uuid.uuid4().hex[:12]
