"""``Gateway``: the public face of the runtime, and the only door.

``Gateway`` itself is the notice protocol as an application meets it: open and close, the unit
of work (``locked``, ``transaction``), sessions, recording, watching, turns (drain, pending),
``session_status``, ``prune`` and the agent-facing tools. Everything else is one of its named
parts, each a service whose methods are written once, where they live; each part has one name,
its module's, its class's and its attribute's:

- ``registry`` (``services.registry.Registry``): session metadata, routes, the parent chain;
- ``transcripts`` (``services.transcripts.Transcripts``): messages and human turns;
- ``producers`` (``services.producers.Producers``): goal and compaction events;
- ``runs`` (``services.runs.Runs``): child runs, the runner and the background executor;
- ``cluster`` (``services.cluster.Cluster``): several processes on one database (R19-R22:
  ``serve``, ``serves``, ``register``, ``heartbeat``, ``attach``, ``detach``, ``sweep``);
- ``ops`` (``services.notice.protocol.NoticeProtocol``): the whole notice protocol, for
  operators, drills, replays and tests (``diagnostics``, ``queued_events``,
  ``forget_queued``, ``fire_due_wakes``, ``observe``, ``startup_sweep``, cursor inspection,
  ``reset_session``/``delete_session``, the prepared recording of ``facade.aio``).

The session and protocol methods on ``Gateway`` are its parts' own (``PartMethod`` descriptors:
no second signature): ``create_session`` is the registry's, the rest the protocol's. They
share one store, whose ``transaction()`` is the one unit of work: it holds the one lock and
releases every notice, queued line and wake only after the outermost commit (R9). The
agent-facing tools (``sessionstate.tools``) are a layer below: they see the
``tools.host.ToolHost`` protocol, which ``GatewayToolHost`` fills with the same parts.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, Unpack, overload

from ..errors import InvalidArgument
from ..runner.base import AgentRunner
from ..services.change_pump import ChangePump, start_pump
from ..services.cluster import Cluster
from ..services.runs import Runs
from ..services.notice.core import ProtocolOptions
from ..services.notice.protocol import Clock, Diagnostics, NoticeProtocol
from ..services.observing import GatewayObserver
from ..services.producers import Producers
from ..services.registry import Registry
from ..services.retention import AutoPrune
from ..services.trace import trace_path
from ..services.transcripts import Transcripts
from ..shared.config import normalize_url
from ..shared.policy import ToolPolicy
from ..statemachine import NOTIFYING_KINDS, TRANSITIONS
from ..statemachine.effectdata import EFFECT_DATA
from ..store import DEFAULT_SYNCHRONOUS, Decisions, Store, open_store
from ..tools.dispatch import allowed_tools as _allowed_tools, call_tool as _call_tool

__all__ = ["Diagnostics", "Gateway", "GatewayObserver", "GatewayToolHost", "OpenOptions", "PUBLIC_NAMES",
           "PartMethod"]

DEFAULT_POLICY = ToolPolicy()

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S")


class OpenOptions(ProtocolOptions, total=False):
    """``Gateway.open``'s keywords, written once: the protocol's (``on_wake``, ``retention_days``
    30, ``max_rows`` 50 000, ``serve`` every session, ``wake_window`` 20 s) and these;
    ``AsyncGateway.open`` takes the same (``Unpack[OpenOptions]``)."""

    clock: Clock | None  # the gateway's clock, time.time by default
    synchronous: str  # the store's durability level, DEFAULT_SYNCHRONOUS ("NORMAL") by default
    create: bool  # create a missing database (True)
    pump: bool  # run the change pump (False)
    trace: str | os.PathLike[str] | None  # the protocol trace's file ($SESSIONSTATE_TRACE)
    record_created: bool  # R27 (True)
    notify_on_create: bool  # R27 (True)
    auto_prune: bool  # R30: prune at open, then at most hourly (True)


class PartMethod(Generic[_S, _P, _R]):
    """A ``Gateway`` method that is one of its parts' methods of that name (``part``: the
    attribute, ``ops`` or ``registry``), with its signature and doc, never written a second
    time. Each gateway binds it to its own part when it is made (an instance attribute shadows
    this descriptor), so a call on the hot path costs what the part's own does; through the
    class it is looked up at each call."""

    def __init__(self, part: str, method: Callable[Concatenate[_S, _P], _R]) -> None:
        self.part = part
        self.method = method
        self.name = method.__name__
        self.__doc__ = method.__doc__
        self.__wrapped__ = method  # inspect.signature follows it (facade.aio mirrors it)

    def bound(self, gateway: "Gateway") -> Callable[_P, _R]:
        method: Callable[_P, _R] = getattr(getattr(gateway, self.part), self.name)
        return method

    @overload
    def __get__(self, gateway: None, owner: type | None = None) -> "PartMethod[_S, _P, _R]": ...
    @overload
    def __get__(self, gateway: "Gateway", owner: type | None = None) -> Callable[_P, _R]: ...
    def __get__(self, gateway: "Gateway | None", owner: type | None = None) -> Any:
        if gateway is None:
            return self
        return self.bound(gateway)

    def __call__(self, gateway: "Gateway", *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """``Gateway.<name>(gateway, ...)``, as a method called through its class."""
        return self.bound(gateway)(*args, **kwargs)


class Gateway:
    """Session state awareness for one process that owns a state database."""

    def __init__(self, store: Store, *, clock: Clock | None = None, **options: Unpack[ProtocolOptions]) -> None:
        """A gateway over an open ``store``; ``options`` are the protocol's (``on_wake``,
        ``retention_days``, ``max_rows``, ``serve``, ``wake_window``: see ``open``)."""
        self.store = store
        self.clock: Clock = clock or time.time
        self.ops = NoticeProtocol(store, clock=self.clock, **options)
        self.cluster: Cluster = self.ops.cluster
        self.registry = Registry(store, self.clock, self.ops)
        self.transcripts = Transcripts(store, self.clock, self.ops, self.registry)
        self.runs = Runs(store, self.clock, self.ops, self.registry, self.transcripts)
        self.producers = Producers(self.ops)
        for name, member in vars(Gateway).items():
            if isinstance(member, PartMethod):
                setattr(self, name, member.bound(self))
        self._tools = GatewayToolHost(self)
        self._pump: ChangePump | None = None
        self.closed = False

    @classmethod
    def open(cls, url: str | None = None, **options: Unpack[OpenOptions]) -> "Gateway":
        """Open the database at ``url`` and run the startup sweep; ``options`` are
        ``OpenOptions`` (keywords only, each with its default there).

        With ``create`` (the default) a missing file and its directories are created; without
        it a missing file raises ``StorageUnavailable`` and nothing is created. A file this
        release cannot use raises a ``StorageError`` subclass and is left unchanged. The URL's
        scheme picks the backend (``store.open_store``).
        ``serve``: the session key patterns this process serves when unclaimed (R19);
        ``pump``: run the change pump, for a database shared with other gateway processes
        (R22; needed for ``cluster.attach``). ``trace`` (default ``$SESSIONSTATE_TRACE``) appends the
        protocol trace to that file (spec section 15). R27: ``record_created`` logs a
        ``created`` event for each new session; ``notify_on_create`` tells an agent's main
        session, in one line for its next turn, about each session created for that agent (not
        about itself, nor about sub-agents it spawned). Both are on by default; ``record_created``
        is off only for checkers whose model has no ``created`` event.
        ``wake_window``: the seconds within which a watcher is woken at most once, across
        processes (R12, R23; 20 by default); a wake suppressed by it is owed and fired by the
        gateway's wake timer when it ends.
        ``auto_prune`` (R30): run ``prune()`` (R13) now, before the startup sweep, and then
        from a timer thread at most once an hour of the gateway's clock; ``False`` for a host
        that calls ``prune()`` on its own schedule. A read-only database is never pruned.
        """
        if unknown := sorted(options.keys() - OpenOptions.__optional_keys__):
            raise TypeError(f"Gateway.open() got unexpected keyword arguments {unknown}")
        settings: dict[str, Any] = dict(options)  # what is left after these: the protocol's
        clock, pump, trace = settings.pop("clock", None), settings.pop("pump", False), settings.pop("trace", None)
        record_created = settings.pop("record_created", True)
        notify_on_create = settings.pop("notify_on_create", True)
        synchronous, create = settings.pop("synchronous", DEFAULT_SYNCHRONOUS), settings.pop("create", True)
        auto_prune = settings.pop("auto_prune", True)
        if not isinstance(notify_on_create, bool) or not isinstance(record_created, bool):
            raise InvalidArgument("record_created and notify_on_create must be booleans")
        if not isinstance(auto_prune, bool):
            raise InvalidArgument("auto_prune must be a boolean")
        store = open_store(
            normalize_url(url), notifying_kinds=NOTIFYING_KINDS, synchronous=synchronous, create=create,
            decisions=Decisions(TRANSITIONS, EFFECT_DATA),  # the table's, for a backend that decides in SQL
        )
        try:
            gateway = cls(store, clock=clock, **settings)
            gateway.ops.record_created = record_created
            gateway.ops.notify_on_create = notify_on_create
            path = trace_path(trace)
            if path is not None:
                gateway.ops.trace_to(path)
            if pump:
                gateway._pump = start_pump(_Pumped(gateway))
            if auto_prune:  # R30: once now, before the sweep re-queues what pruning expires
                schedule = AutoPrune(lambda: gateway.ops.prune(), gateway.clock,  # looked up each run: observers see it
                                     read_only=lambda: store.read_only)
                gateway.ops.auto_prune = schedule
                schedule.run_due()
            gateway.ops.startup_sweep()
            if gateway.ops.auto_prune is not None:
                gateway.ops.auto_prune.start()
        except BaseException:
            store.close()
            raise
        return gateway

    def close(self, *, unregister: bool = True) -> None:
        """Stop the pump and the wake timer, close the trace and the store (idempotent).

        ``unregister=False`` leaves this server's row and claims behind, as a process that
        died would (a drill: another process releases them once the lease ran out, R20)."""
        if not isinstance(unregister, bool):
            raise InvalidArgument("unregister must be a boolean")
        if self._pump is not None:  # joined outside the lock: its sweep takes the lock
            self._pump.stop()
        if self.ops.auto_prune is not None:  # likewise the prune timer (R30)
            self.ops.auto_prune.stop()
        self.ops.stop_wakes()  # likewise the wake timer
        with self.store.lock:
            if not self.closed:
                self.closed = True
                self.ops.shut(unregister=unregister)
                self.store.close()

    def __enter__(self) -> "Gateway":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the unit of work -------------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[Store]:
        """Hold the one lock without a transaction: for reads that must see one state."""
        with self.store.lock:
            yield self.store

    @contextmanager
    def transaction(self) -> Iterator[Store]:
        """One transaction around several gateway calls and an extension's own writes.

        Holds the lock; every call inside it joins the transaction, and its notices, queued
        lines and wakes are released only after the outermost commit (R9), or dropped with a
        rollback. Yields the store so that an extension's own table can write in it.
        """
        with self.store.transaction():
            yield self.store

    # -- sessions and the notice protocol ---------------------------------------------------

    create_session = PartMethod("registry", Registry.create_session)
    record_event = PartMethod("ops", NoticeProtocol.record_event)
    record_events = PartMethod("ops", NoticeProtocol.record_events)
    watch = PartMethod("ops", NoticeProtocol.watch)
    unwatch = PartMethod("ops", NoticeProtocol.unwatch)
    drain_system_events = PartMethod("ops", NoticeProtocol.drain_system_events)
    pending_system_events = PartMethod("ops", NoticeProtocol.pending_system_events)
    session_status = PartMethod("ops", NoticeProtocol.session_status)
    prune = PartMethod("ops", NoticeProtocol.prune)

    # -- the agent-facing tools -------------------------------------------------------------

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
            self._tools.id_factory = id_factory
        if policy is not None:
            self._tools.tool_policy = policy
        if runner is not None:
            self.runs.runner = runner

    def call_tool(self, caller_key: str, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run an agent-facing tool; failures come back as error results, never raised."""
        return _call_tool(self._tools, caller_key, name, args)

    def allowed_tools(self, caller_key: str) -> list[str]:
        """The tools ``caller_key`` may call now (its policy's profile, deny list and spawn
        depth), in the schemas' order; ``UnknownSession`` for an unknown caller."""
        with self.store.lock:
            return _allowed_tools(self._tools, caller_key)


# What ``Gateway`` answers to (``tests/gateway/test_gateway_shape.py`` holds it to this list).
PUBLIC_NAMES = (
    "allowed_tools", "call_tool", "close", "closed", "clock", "cluster", "configure_tools",
    "create_session", "drain_system_events", "locked", "open", "ops", "pending_system_events",
    "producers", "prune", "record_event", "record_events", "registry", "runs", "session_status",
    "store", "transaction", "transcripts", "unwatch", "watch",
)


class GatewayToolHost:
    """The gateway as its tools see it (``tools.host.ToolHost``): its parts, the unit of work,
    and the tools' own settings (policy, id factory) that ``configure_tools`` sets."""

    def __init__(self, gateway: Gateway) -> None:
        self.clock = gateway.clock
        self.locked = gateway.locked
        self.transaction = gateway.transaction
        self.ops = gateway.ops
        self.registry = gateway.registry
        self.transcripts = gateway.transcripts
        self.runs = gateway.runs
        self.tool_policy = DEFAULT_POLICY
        self.id_factory: Callable[[], str] | None = None

    def new_id(self) -> str:
        """A fresh token for run ids, exchange ids and child session keys."""
        return str(self.id_factory()) if self.id_factory is not None else uuid.uuid4().hex[:12]


class _Pumped:
    """What the change pump sees of the gateway (``change_pump.Pumped``)."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self.store = gateway.store
        self.cluster: Cluster = gateway.cluster

    @property
    def closed(self) -> bool:
        return self._gateway.closed
