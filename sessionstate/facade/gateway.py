"""``Gateway``: the public face of the runtime, a thin facade over its services, and the only door.

Each service is constructed here with what it needs, owns its part and stays private:

- ``_protocol`` (``NoticeProtocol``): the signal log, cursors, queue and wakes (spec R1-R18);
- ``_registry`` (``Registry``): session metadata, routes, the parent chain;
- ``_transcripts`` (``Transcripts``): messages and human turns;
- ``_runs`` (``Runs``): child runs, the runner and the background executor;
- ``_producers`` (``Producers``): goal and compaction events.

Applications, the tools, the operator views, the replays and the tests call the methods
below; none of them holds a service. They share one store, whose ``transaction()`` is the one
unit of work: it holds the one lock and releases every notice, queued line and wake only
after the outermost commit (R9). The agent-facing tools (``sessionstate.tools``) are a layer
below this one: they see the small ``tools.host.ToolHost`` protocol, which
``GatewayToolHost`` here fills from the public methods and the few service calls only the
tools make.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from ..shared.config import normalize_url
from ..errors import InvalidArgument
from ..shared.keys import SessionRef, check_key
from ..services.notice.protocol import Clock, NoticeProtocol, PreparedEvent, WakeHook
from ..services.notice.queue import QueuedEvent
from ..services.notice.group_commit import Waiter
from ..services.observing import GatewayObserver, observe
from ..shared.policy import ToolPolicy
from ..services.producers import Producers
from ..shared.provenance import CursorPositions
from ..services.change_pump import ChangePump, start_pump
from ..services.registry import Registry
from ..runner.base import AgentRunner
from ..runner.executor import RunExecutor
from ..services.child_runs import Runs
from ..services.claims import SERVE_ALL, Serving
from ..statemachine import NOTIFYING_KINDS
from ..store import DEFAULT_SYNCHRONOUS, ChangeFeed, MessageRecord, MetaRecord, RunRecord, Store, open_store
from ..services.trace import Tracer, trace_path
from ..services.transcripts import Transcripts
from ..services.notice.wakes import DEFAULT_WAKE_WINDOW
from ..tools.dispatch import allowed_tools as _allowed_tools, call_tool as _call_tool

DEFAULT_POLICY = ToolPolicy()
_OBSERVER_METHODS = ("recorded", "spawned", "queued", "drained", "wake_fired", "wake_owed")


class Diagnostics(NamedTuple):
    """A snapshot of a gateway's in-memory workings, for operators, drills and tests."""

    owed_wakes: dict[str, float]  # watcher -> when its owed wake falls due (R12)
    owed_wakes_cancelled: int  # owed wakes that fell due with nothing new held (drained meanwhile)
    wake_timer_running: bool  # the wake timer was started (by the first owed wake)
    unwoken: frozenset[str]  # watchers holding a waking line newer than this process's last wake of them
    queued: dict[str, int]  # session -> lines queued for it in this process's memory
    group_batches: int  # group commits of more than one caller so far
    group_queued: int  # callers waiting for the write turn now
    group_idle: bool  # no caller holds or waits for the write turn
    server_id: str | None  # this process's server id (R19-R20) once registered
    tracing: bool  # the protocol trace is being written (spec section 15)


class Gateway:
    """Session state awareness for one process that owns a state database."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        on_wake: WakeHook | None = None,
        retention_days: float = 30,
        max_rows: int = 50_000,
        serve: Sequence[str] = SERVE_ALL,
        wake_window: float = DEFAULT_WAKE_WINDOW,
    ) -> None:
        self.store = store
        self.clock: Clock = clock or time.time
        self._protocol = NoticeProtocol(
            store, clock=self.clock, on_wake=on_wake, retention_days=retention_days, max_rows=max_rows,
            serve=serve, wake_window=wake_window,
        )
        self._registry = Registry(store, self.clock, self._protocol)
        self._transcripts = Transcripts(store, self.clock, self._protocol, self._registry)
        self._runs = Runs(store, self.clock, self._protocol, self._registry, self._transcripts)
        self._producers = Producers(self._protocol)
        self._tools = GatewayToolHost(self, self._registry, self._transcripts, self._runs)
        self._tool_policy = DEFAULT_POLICY
        self._id_factory: Callable[[], str] | None = None
        self._pump: ChangePump | None = None
        self.closed = False

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        clock: Clock | None = None,
        on_wake: WakeHook | None = None,
        retention_days: float = 30,
        max_rows: int = 50_000,
        synchronous: str = DEFAULT_SYNCHRONOUS,
        create: bool = True,
        serve: Sequence[str] = SERVE_ALL,
        pump: bool = False,
        trace: str | os.PathLike[str] | None = None,
        record_created: bool = True,
        notify_on_create: bool = True,
        wake_window: float = DEFAULT_WAKE_WINDOW,
    ) -> "Gateway":
        """Open the database at ``url`` and run the startup sweep.

        With ``create`` (the default) a missing file and its directories are created; without
        it a missing file raises ``StorageUnavailable`` and nothing is created. A file this
        release cannot use raises a ``StorageError`` subclass and is left unchanged. The URL's
        scheme picks the backend (``store.open_store``).
        ``serve``: the session key patterns this process serves when unclaimed (R19);
        ``pump``: run the change pump, for a database shared with other gateway processes
        (R22; needed for ``attach``). ``trace`` (default ``$SESSIONSTATE_TRACE``) appends the
        protocol trace to that file (spec section 15). R27: ``record_created`` logs a
        ``created`` event for each new session; ``notify_on_create`` tells an agent's main
        session, in one line for its next turn, about each session created for that agent (not
        about itself, nor about sub-agents it spawned). Both are on by default; ``record_created``
        is off only for checkers whose model has no ``created`` event.
        ``wake_window``: the seconds within which a watcher is woken at most once, across
        processes (R12, R23; 20 by default); a wake suppressed by it is owed and fired by the
        gateway's wake timer when it ends.
        """
        if not isinstance(notify_on_create, bool) or not isinstance(record_created, bool):
            raise InvalidArgument("record_created and notify_on_create must be booleans")
        store = open_store(
            normalize_url(url), notifying_kinds=NOTIFYING_KINDS, synchronous=synchronous, create=create
        )
        try:
            gateway = cls(store, clock=clock, on_wake=on_wake, retention_days=retention_days,
                          max_rows=max_rows, serve=serve, wake_window=wake_window)
            gateway._protocol.record_created = record_created
            gateway._protocol.notify_on_create = notify_on_create
            path = trace_path(trace)
            if path is not None:
                gateway._protocol.tracer = Tracer(path, store, gateway._protocol.queue)
            if pump:
                gateway._pump = start_pump(_Pumped(gateway))
            gateway.startup_sweep()
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
        self._protocol.stop_wakes()  # likewise the wake timer
        with self.store.lock:
            if not self.closed:
                self.closed = True
                serving = self._protocol.serving
                if unregister:
                    serving.unregister()
                elif serving.feed is not None:
                    serving.feed.close()
                if self._protocol.tracer is not None:
                    self._protocol.tracer.close()
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

    # -- settings ---------------------------------------------------------------------------

    @property
    def retention_days(self) -> float:
        return self._protocol.retention_days

    @retention_days.setter
    def retention_days(self, days: float) -> None:
        self._protocol.retention_days = days

    @property
    def max_rows(self) -> int:
        return self._protocol.max_rows

    @max_rows.setter
    def max_rows(self, rows: int) -> None:
        self._protocol.max_rows = rows

    @property
    def wake_window(self) -> float:
        """Seconds within which a watcher is woken at most once (R12, R23)."""
        return self._protocol.wakes.window

    def fire_due_wakes(self) -> int:
        """Fire the owed wakes due by the gateway's clock now; returns how many fired (R12).

        The gateway's wake timer does this by itself when a wake falls due. A test with a fake
        ``clock`` moves the clock past the window's end and calls this to fire them at once
        (the timer would notice the moved clock within a second)."""
        return self._protocol.fire_due_wakes()

    @property
    def stats(self) -> dict[str, int]:
        return self._protocol.stats

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
            self._runs.runner = runner

    @property
    def tool_policy(self) -> ToolPolicy:
        return self._tool_policy

    @property
    def runner(self) -> AgentRunner:
        return self._runs.runner

    @property
    def run_executor(self) -> RunExecutor:
        return self._runs.executor

    def new_id(self) -> str:
        """A fresh token for run ids, exchange ids and child session keys."""
        return str(self._id_factory()) if self._id_factory is not None else uuid.uuid4().hex[:12]

    def call_tool(self, caller_key: str, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run an agent-facing tool; failures come back as error results, never raised."""
        return _call_tool(self._tools, caller_key, name, args)

    def allowed_tools(self, caller_key: str) -> list[str]:
        """The tools ``caller_key`` may call now (its policy's profile, deny list and spawn
        depth), in the schemas' order; ``UnknownSession`` for an unknown caller."""
        with self.store.lock:
            return _allowed_tools(self._tools, caller_key)

    # -- observing --------------------------------------------------------------------------

    def observe(self, observer: GatewayObserver) -> Callable[[], None]:
        """Report this gateway's recordings, queued and drained notices and wakes to
        ``observer`` (``metrics.instrument`` does); returns the function that stops it.
        A gateway nobody observes pays nothing for it."""
        missing = [name for name in _OBSERVER_METHODS if not callable(getattr(observer, name, None))]
        if missing:
            raise InvalidArgument(f"observer must have the GatewayObserver methods; missing {', '.join(missing)}")
        return observe(self._protocol, observer)

    def diagnostics(self) -> Diagnostics:
        """A snapshot of the in-memory workings: owed wakes, the group commit, the server id."""
        protocol = self._protocol
        with self.store.lock:
            wakes, group = protocol.wakes, protocol.group
            return Diagnostics(
                owed_wakes=wakes.owed(), owed_wakes_cancelled=wakes.owed_cancelled,
                wake_timer_running=wakes.timer is not None,
                unwoken=frozenset(w for w in protocol.queue.sessions() if wakes.holds_unwoken(w)),
                queued={s: n for s in protocol.queue.sessions() if (n := len(protocol.queue.peek(s)))},
                group_batches=group.batches, group_queued=group.queued(), group_idle=group.idle(),
                server_id=protocol.serving.server_id, tracing=protocol.tracer is not None,
            )

    def queued_events(self, session_key: str) -> list[QueuedEvent]:
        """The lines queued in this process's memory for the session, in order, each with its
        notice's target (``None`` for a plain line); unlike ``pending_system_events`` not
        re-derived from the cursors."""
        check_key(session_key)
        with self.store.lock:
            return self._protocol.queue.peek(session_key)

    def forget_queued(self, session_key: str | None = None) -> None:
        """Drop the lines queued in memory (for one session, or all), as a restart does; the
        cursors still owe their notices (R11: the next sweep queues them again)."""
        if session_key is not None:
            check_key(session_key)
        queue = self._protocol.queue
        with self.store.lock:
            for session in [session_key] if session_key is not None else queue.sessions():
                queue.clear(session)

    # -- several processes (spec section 6a) ------------------------------------------------

    def attach(self, session_key: str) -> int:
        """R20: serve ``session_key`` from this process (the last attach wins); returns the
        claim's generation. Needs the change pump."""
        return self._protocol.attach(session_key)

    def detach(self, session_key: str) -> bool:
        """R20: drop this process's claim on ``session_key``; ``True`` when it held one."""
        return self._protocol.detach(session_key)

    def serves(self, session_key: str) -> bool:
        """R19: whether notices for ``session_key`` are queued (and wakes sent) here."""
        return self._protocol.serves(session_key)

    def sweep_changes(self) -> int:
        """R22: one incremental sweep now (what the pump runs on a change); notices queued."""
        return self._protocol.sweep_changes()

    def register_server(self) -> None:
        """R19-R20: become a server (a heartbeat row, the claims as they stand, a change feed)
        without the pump's thread: the caller sweeps (``sweep_changes``) and heartbeats
        itself, as the replays do. ``open(pump=True)`` registers and starts the pump."""
        with self.store.lock:
            self._protocol.serving.register()

    def heartbeat(self) -> None:
        """R20: refresh this server's heartbeat and release the servers whose lease ran out
        (the pump does this every 5 s); nothing before ``register_server``."""
        with self.store.lock:
            self._protocol.serving.heartbeat()

    def serve(self, patterns: Sequence[str]) -> None:
        """R19: replace the session key patterns served here when unclaimed (``open``'s ``serve``)."""
        with self.store.lock:
            self._protocol.serving.serve(patterns)

    def attached_sessions(self) -> list[str]:
        """R20: the session keys this process holds a claim on, sorted."""
        with self.store.lock:
            return self._protocol.serving.attached()

    @property
    def change_feed(self) -> ChangeFeed | None:
        """The store's feed of other connections' commits, open while this is a server."""
        return self._protocol.serving.feed

    # -- the notice protocol ----------------------------------------------------------------

    def create_session(
        self,
        key: str,
        *,
        agent_id: str | None = None,
        kind: str = "main",
        parent: str | None = None,
        label: str | None = None,
        run_id: str | None = None,
    ) -> None:
        """Register a session; with ``parent``, a spawn edge (child_spawned + seeded cursor)."""
        self._protocol.create_session(key, agent_id=agent_id, kind=kind, parent=parent, label=label, run_id=run_id)

    def session_exists(self, key: str, agent_id: str | None = None) -> bool:
        return self._protocol.session_exists(key, agent_id)

    def resolve(self, key: str, agent_id: str | None = None) -> SessionRef:
        """(key, agent id) of an existing session, or ``UnknownSession``."""
        with self.store.lock:
            return self._protocol.resolve(key, agent_id)

    def record_event(
        self,
        session_key: str,
        kind: str,
        *,
        actor_type: str,
        summary: str,
        actor_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        payload: dict[str, Any] | None = None,
        dedupe_key: str | None = None,
        occurred_at: float | None = None,
    ) -> int | None:
        """Append one event; returns its sequence, or ``None`` if storage failed (R15)."""
        return self._protocol.record_event(
            session_key, kind, actor_type=actor_type, summary=summary, actor_id=actor_id,
            agent_id=agent_id, run_id=run_id, payload=payload, dedupe_key=dedupe_key,
            occurred_at=occurred_at,
        )

    def record_events(self, events: Sequence[Mapping[str, Any]]) -> list[int | None]:
        """Append a burst in one transaction (see ``NoticeProtocol.record_events``)."""
        return self._protocol.record_events(events)

    def prepare_event(self, *args: Any, **kwargs: Any) -> PreparedEvent:
        """``record_event``'s arguments validated alone (pure: no lock, no store; bad input
        raises). For callers that validate on one thread and commit on another
        (``sessionstate.facade.aio``): hand the result to ``record_prepared``."""
        return self._protocol.prepare_event(*args, **kwargs)

    def prepare_events(self, events: Sequence[Mapping[str, Any]]) -> list[PreparedEvent]:
        """``record_events``' validation alone, as ``prepare_event``."""
        return self._protocol.prepare_events(events)

    def record_prepared(self, calls: Sequence[Sequence[PreparedEvent]]) -> list[Waiter[PreparedEvent]]:
        """Commit several callers' prepared events as one group (with whatever other threads
        queued), waiting for the write turn; each waiter holds its caller's outcome."""
        if isinstance(calls, (str, bytes)) or not isinstance(calls, Sequence) or not all(
            isinstance(events, Sequence) and all(isinstance(e, PreparedEvent) for e in events) for events in calls
        ):
            raise InvalidArgument("calls must be a sequence of sequences of prepared events (prepare_event)")
        return self._protocol.record_prepared(calls)

    def watch(
        self, watcher_key: str, target_key: str, *, target_agent_id: str | None = None, ambient: bool = False
    ) -> bool:
        """Watch ``target_key`` from its current state version (R4); ``True`` when new.
        ``ambient``: registered by the gateway itself, queue-only (never wakes, R26); an
        explicit watch promotes it, an ambient one never demotes (R25)."""
        return self._protocol.watch(watcher_key, target_key, target_agent_id=target_agent_id, ambient=ambient)

    def unwatch(self, watcher_key: str, target_key: str, *, target_agent_id: str | None = None) -> bool:
        """Stop watching; ``True`` when a cursor was removed."""
        return self._protocol.unwatch(watcher_key, target_key, target_agent_id=target_agent_id)

    def drain_system_events(self, session_key: str) -> list[str]:
        """The system lines for the session's next turn; acknowledges the notices among them."""
        return self._protocol.drain_system_events(session_key)

    def pending_system_events(self, session_key: str) -> list[str]:
        """What the next drain would return, without acknowledging anything."""
        return self._protocol.pending_system_events(session_key)

    def queue_owed_notices(self, session_key: str) -> int:
        """R18: queue the notices of the session's pending pairs not queued here yet."""
        return self._protocol.queue_owed_notices(session_key)

    def enqueue_system_event(self, session_key: str, text: str) -> bool:
        """Queue a plain system line (announcements) for the session's next turn."""
        return self._protocol.enqueue_system_event(session_key, text)

    def session_status(
        self, session_key: str, *, changes_since: int | None = None, agent_id: str | None = None
    ) -> dict[str, Any]:
        return self._protocol.session_status(session_key, changes_since=changes_since, agent_id=agent_id)

    def reset_session(self, key: str, *, agent_id: str | None = None) -> None:
        """R14: the session's own cursors go; the history of its targets stays."""
        self._protocol.reset_session(key, agent_id=agent_id)

    def delete_session(self, key: str, *, agent_id: str | None = None) -> None:
        """R14: remove the session's events, head, registry row and every cursor naming it."""
        self._protocol.delete_session(key, agent_id=agent_id)

    def prune(self) -> dict[str, int]:
        """R13: retention window and row cap for events; expiry for idle cursors."""
        return self._protocol.prune()

    def startup_sweep(self) -> int:
        """R11: re-materialise every owed notice from the durable cursors; returns how many."""
        return self._protocol.startup_sweep()

    def cursor_positions(
        self, watcher_key: str, target_key: str, *, target_agent_id: str | None = None
    ) -> CursorPositions | None:
        """The pair's effective positions, with ``.provenance`` (``None`` when unwatched)."""
        return self._protocol.cursor_positions(watcher_key, target_key, target_agent_id=target_agent_id)

    def watchers_of(self, target_key: str, *, target_agent_id: str | None = None) -> list[tuple[str, CursorPositions]]:
        """Who watches the session: (watcher key, positions with ``.provenance``), by watcher."""
        return self._protocol.watchers_of(target_key, target_agent_id=target_agent_id)

    def state_version(self, key: str, agent_id: str | None = None) -> int:
        return self._protocol.state_version(key, agent_id)

    # -- the registry -----------------------------------------------------------------------

    def register_session(
        self,
        key: str,
        *,
        agent_id: str | None = None,
        kind: str = "main",
        parent: str | None = None,
        label: str | None = None,
        run_id: str | None = None,
        channel: str | None = None,
        model: str | None = None,
        thinking: str | None = None,
        runtime: str | None = None,
        sandboxed: bool | None = None,
    ) -> str:
        """``create_session`` plus runtime metadata; returns the new session id."""
        return self._registry.register_session(
            key, agent_id=agent_id, kind=kind, parent=parent, label=label, run_id=run_id,
            channel=channel, model=model, thinking=thinking, runtime=runtime, sandboxed=sandboxed,
        )

    def session_meta(self, key: str, agent_id: str | None = None) -> MetaRecord:
        """The session's metadata (defaults when it has no row)."""
        return self._registry.session_meta(key, agent_id)

    def resolve_session_id(self, session_id: str) -> SessionRef:
        """(key, agent id) of the session with this session id, or ``UnknownSession``."""
        return self._registry.resolve_session_id(session_id)

    def set_model_override(self, key: str, model: str | None, *, agent_id: str | None = None) -> None:
        """Set the session's model override; ``None`` (or ``"default"``) clears it."""
        self._registry.set_model_override(key, model, agent_id=agent_id)

    def set_route(self, key: str, channel: str, to: str | None = None, *, agent_id: str | None = None) -> None:
        """Store where replies to the session go (``lastChannel``/``lastTo``)."""
        self._registry.set_route(key, channel, to, agent_id=agent_id)

    # -- transcripts ------------------------------------------------------------------------

    def append_message(
        self,
        session_key: str,
        role: str,
        text: str,
        *,
        agent_id: str | None = None,
        actor_type: str | None = None,
        actor_id: str | None = None,
        provenance: dict[str, Any] | None = None,
        tool_calls: list[Any] | None = None,
        tool_result: Any = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> int:
        """Append one transcript message; returns its id."""
        return self._transcripts.append_message(
            session_key, role, text, agent_id=agent_id, actor_type=actor_type, actor_id=actor_id,
            provenance=provenance, tool_calls=tool_calls, tool_result=tool_result,
            input_tokens=input_tokens, output_tokens=output_tokens,
        )

    def human_message(
        self,
        session_key: str,
        text: str,
        *,
        channel: str | None = None,
        sender: str | None = None,
        agent_id: str | None = None,
    ) -> int | None:
        """A human's turn typed straight into the session; returns its event's sequence, or ``None``
        when nobody watches the session (R24: the message is stored, no event) or storage failed."""
        return self._transcripts.human_message(session_key, text, channel=channel, sender=sender, agent_id=agent_id)

    def recent_user_messages(self, session_key: str, limit: int = 10, *, agent_id: str | None = None) -> list[str]:
        """The newest ``limit`` user-role messages the gateway put into the session."""
        return self._transcripts.recent_user_messages(session_key, limit, agent_id=agent_id)

    def transcript(self, session_key: str, *, limit: int = 1000, agent_id: str | None = None) -> list[MessageRecord]:
        """The newest ``limit`` messages, oldest first."""
        return self._transcripts.transcript(session_key, limit=limit, agent_id=agent_id)

    # -- producers --------------------------------------------------------------------------

    def goal_changed(
        self,
        session_key: str,
        change: str,
        *,
        actor_type: str,
        actor_id: str | None = None,
        agent_id: str | None = None,
        occurred_at: float | None = None,
    ) -> int | None:
        """Record ``goal_changed`` (notifies watchers, except the actor itself)."""
        return self._producers.goal_changed(
            session_key, change, actor_type=actor_type, actor_id=actor_id, agent_id=agent_id,
            occurred_at=occurred_at,
        )

    def compacted(
        self,
        session_key: str,
        op_id: str,
        *,
        actor_type: str = "system",
        actor_id: str | None = None,
        agent_id: str | None = None,
        messages_before: int | None = None,
        messages_after: int | None = None,
        occurred_at: float | None = None,
    ) -> int | None:
        """Record ``compacted`` once per compaction operation (dedupe ``compacted:<opId>``)."""
        return self._producers.compacted(
            session_key, op_id, actor_type=actor_type, actor_id=actor_id, agent_id=agent_id,
            messages_before=messages_before, messages_after=messages_after, occurred_at=occurred_at,
        )

    # -- runs -------------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        return self._runs.get_run(run_id)

    def runs_of(self, requester: SessionRef, limit: int = 50) -> list[RunRecord]:
        return self._runs.runs_of(requester, limit)

    def runs_of_child(self, child: SessionRef) -> list[RunRecord]:
        return self._runs.runs_of_child(child)

    def active_runs(self) -> list[RunRecord]:
        return self._runs.active_runs()

    def start_run(self, run: RunRecord, prompt: str) -> None:
        """Run the child's task in the background (the row is already committed)."""
        self._runs.start_run(run, prompt)

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
        """Record the run's end once; ``False`` when it had already ended (or is gone)."""
        return self._runs.finish_run(
            run_id, outcome, text=text, actor_type=actor_type, actor_id=actor_id, announce=announce, usage=usage,
        )

    def kill_run(self, run_id: str, *, actor_id: str | None = None, announce: bool = False) -> bool:
        """Cancel a running run: ``run_failed`` with outcome ``cancelled``."""
        return self._runs.kill_run(run_id, actor_id=actor_id, announce=announce)

    def steer_run(self, run_id: str, guidance: str, *, sender: str) -> bool:
        """Deliver follow-up guidance into a running child (transcript + the live run)."""
        return self._runs.steer_run(run_id, guidance, sender=sender)

    def wait_for_runs(self, timeout: float = 10.0) -> bool:
        """Wait (without the lock) until no background job runs; ``False`` on timeout."""
        return self._runs.wait_for_runs(timeout)

    def stop_runs(self, timeout: float = 5.0) -> list[str]:
        """Shutdown: cancel every run still running, then wait for the jobs."""
        return self._runs.stop_runs(timeout)


class GatewayToolHost:
    """The gateway as its tools see it (``tools.host.ToolHost``): its public methods, and the
    reads and writes of resolved sessions that only the tools make, straight from its services."""

    def __init__(self, gateway: Gateway, registry: Registry, transcripts: Transcripts, runs: Runs) -> None:
        self._gateway = gateway
        self.clock = gateway.clock
        self.new_id = gateway.new_id
        self.locked = gateway.locked
        self.transaction = gateway.transaction
        self.resolve = gateway.resolve
        self.session_exists = gateway.session_exists
        self.resolve_session_id = gateway.resolve_session_id
        self.create_session = gateway.create_session
        self.watch = gateway.watch
        self.cursor_positions = gateway.cursor_positions
        self.state_version = gateway.state_version
        self.session_status = gateway.session_status
        self.pending_system_events = gateway.pending_system_events
        self.set_model_override = gateway.set_model_override
        self.append_message = gateway.append_message
        self.get_run = gateway.get_run
        self.runs_of = gateway.runs_of
        self.runs_of_child = gateway.runs_of_child
        self.start_run = gateway.start_run
        self.kill_run = gateway.kill_run
        self.steer_run = gateway.steer_run
        self.list_sessions = registry.list_sessions
        self.session_record = registry.session_record
        self.meta_of = registry.meta_of
        self.all_meta = registry.all_meta
        self.parent_of = registry.parent_of
        self.insert_meta = registry.insert_meta
        self.update_meta = registry.update_meta
        self.recent_messages = transcripts.recent
        self.first_message_text = transcripts.first_text
        self.message_stats = transcripts.stats
        self.active_runs_of = runs.active_by_requester
        self.insert_run = runs.insert

    @property
    def tool_policy(self) -> ToolPolicy:
        return self._gateway.tool_policy

    @property
    def runner(self) -> AgentRunner:
        return self._gateway.runner

    @property
    def run_executor(self) -> RunExecutor:
        return self._gateway.run_executor


class _Pumped:
    """What the change pump sees of the gateway (``change_pump.Pumped``)."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self.store = gateway.store
        self.serving: Serving = gateway._protocol.serving

    @property
    def closed(self) -> bool:
        return self._gateway.closed
