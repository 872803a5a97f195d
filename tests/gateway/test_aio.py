"""``sessionstate.facade.aio.AsyncGateway``: the same API as coroutines, the loop never blocked."""

from __future__ import annotations

import inspect
import threading
from pathlib import Path
from typing import Unpack

import anyio
import pytest

from sessionstate import Gateway, InvalidArgument, StorageUnavailable, UnknownSession, notice_text
from sessionstate.facade.aio import AsyncGateway, public_methods

MANAGER = "agent:main:main"
CHILD = "agent:main:subagent:child"
EVENT = {"actor_type": "human", "summary": "hello"}
LOOP_BACKENDS = ["asyncio"] + (["trio"] if __import__("importlib").util.find_spec("trio") else [])


@pytest.fixture(params=LOOP_BACKENDS)
def loop_backend(request) -> str:
    return request.param


def test_every_public_gateway_method_is_a_coroutine_here():
    # The two context managers hold the lock across a block: AsyncGateway.run hands a whole
    # function (transaction included) to the worker instead.
    mirrored = [name for name in public_methods() if name not in ("locked", "transaction")]
    assert "record_event" in mirrored and "call_tool" in mirrored and "drain_system_events" in mirrored
    for name in mirrored:
        member = inspect.getattr_static(AsyncGateway, name)
        function = member.__func__ if isinstance(member, classmethod) else member
        assert inspect.iscoroutinefunction(function), name
        if name != "close":  # close: the sync one's unregister= is a drill's, not the loop's
            assert inspect.signature(getattr(AsyncGateway, name)).parameters.keys() == \
                inspect.signature(getattr(Gateway, name)).parameters.keys(), name


def test_open_refuses_an_unknown_keyword_and_gateway_a_coroutine_hook(loop_backend):
    async def hook(watcher: str, reason: str) -> None: ...

    async def main() -> None:
        with pytest.raises(TypeError, match="no_such_option"):
            await AsyncGateway.open("sqlite://", no_such_option=1)  # type: ignore[call-arg]
        async with await AsyncGateway.open("sqlite://", on_wake=hook):  # relayed to the loop
            pass

    anyio.run(main, backend=loop_backend)
    with pytest.raises(InvalidArgument, match="coroutine function"):
        Gateway.open("sqlite://", on_wake=hook)  # the sync gateway would never run it


def test_the_notice_flow_and_the_typed_errors(db_url, loop_backend):
    woken: list[tuple[str, str]] = []

    async def on_wake(watcher: str, reason: str) -> None:
        await anyio.sleep(0)
        woken.append((watcher, reason))

    async def main() -> None:
        async with await AsyncGateway.open(db_url, clock=lambda: 1_800_000_000.0, on_wake=on_wake) as gw:
            await gw.create_session(MANAGER)
            await gw.create_session(CHILD, kind="subagent", parent=MANAGER)
            before = await gw.ops.state_version(CHILD)
            seq = await gw.record_event(CHILD, "human_direct_message", **EVENT)
            assert seq == before + 1
            assert await gw.record_events([dict(session_key=CHILD, kind="goal_changed", **EVENT)] * 2) == [
                seq + 1, seq + 2]
            assert await gw.pending_system_events(MANAGER) == [notice_text(CHILD, before)]
            assert await gw.drain_system_events(MANAGER) == [notice_text(CHILD, before)]
            result = await gw.call_tool(MANAGER, "session_status", {"sessionKey": CHILD})
            assert result.get("sessionKey") == CHILD or "error" not in result
            with pytest.raises(InvalidArgument):
                await gw.record_event(CHILD, "no_such_kind", **EVENT)
            with pytest.raises(InvalidArgument):
                await gw.record_events("not a list")  # type: ignore[arg-type]
            with pytest.raises(UnknownSession):
                await gw.record_event("agent:main:subagent:nobody", "goal_changed", **EVENT)
            with pytest.raises(UnknownSession):
                await gw.drain_system_events("agent:main:subagent:nobody")
            assert await gw.run(lambda g: g.ops.state_version(CHILD), gw.gateway) == seq + 2
        for _ in range(200):  # the relay delivers after the commit, on the loop
            if woken:
                break
            await anyio.sleep(0.005)
        assert (MANAGER, f"session-state: {CHILD}") in woken
        # Closed: the same outcome as the sync API's closed gateway (on SQLite StorageUnavailable).
        outcomes: list[object] = []
        try:
            outcomes.append(gw.gateway.ops.state_version(CHILD))
        except Exception as exc:
            outcomes.append(type(exc))
        try:
            outcomes.append(await gw.ops.state_version(CHILD))
        except Exception as exc:
            outcomes.append(type(exc))
        assert outcomes[0] == outcomes[1]
        if db_url.startswith("sqlite"):
            assert outcomes[0] is StorageUnavailable

    anyio.run(main, backend=loop_backend)


def test_opening_fails_as_the_sync_api_does(tmp_path: Path, loop_backend):
    async def main() -> None:
        with pytest.raises(StorageUnavailable):
            await AsyncGateway.open(f"sqlite:///{tmp_path / 'missing.db'}", create=False)

    anyio.run(main, backend=loop_backend)
    assert not (tmp_path / "missing.db").exists()


TASKS = 100
EVENTS = 10_000
HEARTBEAT = 0.0005
TARGETS = [f"agent:main:subagent:t{i}" for i in range(10)]


def _record_store_threads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every store method, on every backend's class, notes the thread it runs on: the store is
    the only place that speaks SQL, so a call here on the loop thread is the loop blocked on
    the database, whatever the machine's speed (a count, not a timing)."""
    from sessionstate.store.sql_store import SqlStore

    threads: list[int] = []
    classes = [SqlStore, *SqlStore.__subclasses__()]
    for cls in classes:
        for name, member in list(vars(cls).items()):
            if not inspect.isfunction(member) or name == "__init__":
                continue

            def noted(*args, __member=member, **kwargs):
                threads.append(threading.get_ident())
                return __member(*args, **kwargs)

            monkeypatch.setattr(cls, name, noted)
    return threads


def _record_while_ticking(db_url: str, loop_backend: str, *, block: bool = False) -> dict[str, object]:
    """100 tasks record 10,000 events while a heartbeat task ticks on the same loop."""
    stats: dict[str, object] = {}

    async def main() -> None:
        async with await AsyncGateway.open(db_url, clock=lambda: 1_800_000_000.0) as gw:
            await gw.create_session(MANAGER)
            for key in TARGETS:
                await gw.create_session(key, kind="subagent", parent=MANAGER)
            stop = anyio.Event()
            ticks_while_recording = 0

            async def heartbeat() -> None:
                nonlocal ticks_while_recording
                while not stop.is_set():
                    await anyio.sleep(HEARTBEAT)
                    ticks_while_recording += 1

            async def recorder(index: int) -> None:
                key = TARGETS[index % len(TARGETS)]
                for step in range(EVENTS // TASKS):
                    if block:  # the control: the sync API straight on the loop, 5 calls per step
                        gw.gateway.record_event(key, "human_direct_message", **EVENT)
                        if step % 5 == 4:
                            await anyio.sleep(0)
                    else:
                        assert await gw.record_event(key, "human_direct_message", **EVENT) is not None

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(heartbeat)
                async with anyio.create_task_group() as recorders:
                    for i in range(TASKS):
                        recorders.start_soon(recorder, i)
                stop.set()
            stats["loop_thread"] = threading.get_ident()
            stats["ticks"] = ticks_while_recording
            spawned = len(TARGETS)  # each spawn recorded child_spawned
            created = 1 + len(TARGETS)  # and each new session its `created` (R27)
            assert await gw.run(gw.gateway.store.event_count) == EVENTS + spawned + created

    anyio.run(main, backend=loop_backend)
    return stats


def test_the_loop_is_never_blocked_while_100_tasks_record_10000_events(db_url, loop_backend, monkeypatch):
    # No store call runs on the loop thread, and the loop kept ticking while the 10,000 events
    # were recorded. The loop's CPU time between ticks is a figure, not a test: it is measured
    # in benchmarks/bench_aio_loop.py (docs/performance.md, "An async API").
    threads = _record_store_threads(monkeypatch)
    stats = _record_while_ticking(db_url, loop_backend)
    assert len(threads) > EVENTS // 100  # the store was used (at least a call per batch)
    assert threads.count(stats["loop_thread"]) == 0, "a store call ran on the event loop's thread"
    assert stats["ticks"] > 10, stats


def test_the_thread_record_sees_a_blocked_loop(tmp_path: Path, loop_backend, monkeypatch):
    """The control: the sync API called on the loop shows up (so the check above can fail)."""
    threads = _record_store_threads(monkeypatch)
    stats = _record_while_ticking(f"sqlite:///{tmp_path / 'blocked.db'}", loop_backend, block=True)
    assert threads.count(stats["loop_thread"]) >= EVENTS, stats


def test_async_open_takes_every_option_of_the_sync_open_with_the_same_defaults():
    """Opening behaves exactly as the sync API: no Gateway.open option is out of reach. Both
    take their keywords from the one declaration, ``OpenOptions`` (its defaults are read in
    ``Gateway.open``, which the async one calls)."""
    from sessionstate.facade.gateway import OpenOptions

    sync = inspect.signature(Gateway.open, eval_str=True).parameters
    async_ = inspect.signature(AsyncGateway.open, eval_str=True).parameters
    assert list(async_) == list(sync) == ["url", "options"]
    assert [(p.kind, p.default) for p in async_.values()] == [(p.kind, p.default) for p in sync.values()]
    assert async_["options"].annotation == sync["options"].annotation == Unpack[OpenOptions]
    assert {"clock", "on_wake", "retention_days", "max_rows", "synchronous", "create", "serve", "pump", "trace",
            "record_created", "notify_on_create", "wake_window", "auto_prune"} == OpenOptions.__optional_keys__


def test_async_open_passes_the_created_options_through(tmp_path):
    async def announced(name: str, **options: bool) -> list[str]:
        async with await AsyncGateway.open(str(tmp_path / name), **options) as agw:
            await agw.create_session("agent:main:main")
            await agw.create_session("agent:main:peer")
            return await agw.pending_system_events("agent:main:main")

    assert len(anyio.run(announced, "default.db")) == 1  # R27's announcement of agent:main:peer
    assert anyio.run(lambda: announced("off.db", notify_on_create=False)) == []
