"""``ToolHost``: what the tools see of their gateway, built from its parts.

The tools sit between the services and the facade: they never import the gateway, only this
protocol. ``Gateway.call_tool`` hands them a host (``facade.gateway.GatewayToolHost``): the
gateway's unit of work and clock, the tools' own settings (the policy, the id factory that
``configure_tools`` sets), and the gateway's parts themselves: ``ops`` (the notice protocol),
``registry``, ``transcripts`` and ``runs``. A tool calls a part's method where it is written
(``gw.runs.kill_run``, ``gw.transcripts.recent``), never an alias of it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..services.child_runs import Runs
from ..services.notice.protocol import NoticeProtocol
from ..services.registry import Registry
from ..services.transcript_service import Transcripts
from ..shared.policy import ToolPolicy


class ToolHost(Protocol):
    clock: Callable[[], float]
    tool_policy: ToolPolicy
    ops: NoticeProtocol
    registry: Registry
    transcripts: Transcripts
    runs: Runs

    def new_id(self) -> str: ...
    def locked(self) -> AbstractContextManager[Any]: ...
    def transaction(self) -> AbstractContextManager[Any]: ...
