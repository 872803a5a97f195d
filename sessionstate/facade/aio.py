"""``AsyncGateway``: the gateway for asyncio and trio applications (anyio), never blocking the loop.

Every public ``Gateway`` method is a coroutine here, ``call_tool`` included, with the same
arguments, results and typed errors, and so is every method of its parts (``await
agw.registry.set_route(...)``, ``await agw.cluster.attach(...)``, ``await
agw.ops.diagnostics()``): generated from the sync ones, no signature written again. No store
work runs on the event loop:

- Recording validates on the loop (pure checks, microseconds; bad input raises at once, as
  in the sync API) and hands the prepared events to the store's worker thread. That thread
  takes every request queued by then and commits all the recordings among them as one group
  (``Gateway.ops.record_prepared``: one transaction, each caller its own result, none
  before the commit), then wakes all their tasks with one call into the loop.
- Every other store call runs on the same worker thread, one at a time, in arrival order.
- Calls that may wait for seconds (``call_tool``: ``sessions_send`` waits for a reply;
  ``wait_for_runs``, ``stop_runs``) run in anyio's thread pool instead, so they never hold
  up the worker; their recordings join the group commit like any other thread's.

``on_wake`` may be a coroutine function: it then runs on the loop (in order, one wake at a
time, from a relay thread of its own), so it may await this gateway's methods.
A call cancelled while its store work is queued or running stops waiting, but the work
still runs (an event may be committed without its caller hearing of it, as when a thread
is abandoned); the sync API's retry by dedupe key (R10) covers that case.
"""

from __future__ import annotations

import inspect
import queue
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar, Unpack

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from ..errors import StorageUnavailable
from .gateway import Gateway, OpenOptions, PartMethod
from ..services.notice.recording import EventArgs

_T = TypeVar("_T")
AsyncWakeHook = Callable[[str, str], Coroutine[Any, Any, None]]

# Calls that may block for long: anyio's thread pool, not the store's worker thread.
_POOLED = frozenset({"call_tool", "wait_for_runs", "stop_runs"})
# Not store calls: opening and closing have coroutines of their own below; the two context
# managers hold the lock across the block, which a coroutine cannot do without blocking the
# loop (``run`` hands a whole function, transaction included, to the worker instead).
_NOT_WRAPPED = frozenset({"open", "close", "locked", "transaction", "record_event", "record_events"})


class _Job:
    """One request to the worker thread, and its outcome once done."""

    __slots__ = ("call", "events", "result", "error", "done")

    def __init__(self, call: Callable[[], Any] | None, events: Sequence[Any] | None) -> None:
        self.call = call
        self.events = events  # prepared events: a recording, committed in the group
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = anyio.Event()


class _StoreWorker:
    """The thread that does a gateway's store work for the loop."""

    def __init__(self, gateway: Gateway, token: Any) -> None:
        self._gateway = gateway
        self._token = token
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="sessionstate-aio-store", daemon=True)
        self._thread.start()

    def put(self, job: _Job) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        """Finish what is queued, then end (called from a thread, never the loop)."""
        self._jobs.put(None)
        self._thread.join()

    def _serve(self) -> None:
        jobs = self._jobs
        stopping = False
        while not stopping:
            batch: list[_Job] = []
            job = jobs.get()
            while job is not None:
                batch.append(job)
                try:
                    job = jobs.get_nowait()
                except queue.Empty:
                    break
            stopping = job is None
            if batch:
                self._run(batch)

    def _run(self, batch: list[_Job]) -> None:
        recordings = [job for job in batch if job.events is not None]
        if recordings:
            try:
                waiters = self._gateway.ops.record_prepared([job.events for job in recordings])  # type: ignore[misc]
            except BaseException as exc:  # an interrupt: every recording hears of it
                for job in recordings:
                    job.error = exc
            else:
                for job, waiter in zip(recordings, waiters):
                    job.result, job.error = waiter.result, waiter.error
        for job in batch:
            if job.call is not None:
                try:
                    job.result = job.call()
                except BaseException as exc:  # handed to the awaiting task, which raises it
                    job.error = exc
        try:
            anyio.from_thread.run_sync(_finish, batch, token=self._token)
        except RuntimeError:  # the loop is gone: nobody is waiting any more
            pass


def _work_alone(gateway: Gateway, job: _Job) -> None:
    try:
        if job.events is not None:
            (waiter,) = gateway.ops.record_prepared([job.events])
            job.result, job.error = waiter.result, waiter.error
        elif job.call is not None:
            job.result = job.call()
    except Exception as exc:
        job.error = exc


def _finish(batch: list[_Job]) -> None:
    for job in batch:
        job.done.set()


class _WakeRelay:
    """Runs a coroutine ``on_wake`` on the loop, one wake at a time, in order. Wakes come
    from store threads (after a commit, holding the store's lock): they are only queued
    there, and this relay's own thread waits for each coroutine."""

    def __init__(self, hook: AsyncWakeHook, token: Any) -> None:
        self._hook = hook
        self._token = token
        self._wakes: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._relay, name="sessionstate-aio-wakes", daemon=True)
        self._thread.start()

    def __call__(self, watcher: str, reason: str) -> None:
        self._wakes.put((watcher, reason))

    def stop(self) -> None:
        self._wakes.put(None)
        self._thread.join()

    def _relay(self) -> None:
        while (wake := self._wakes.get()) is not None:
            try:
                anyio.from_thread.run(self._hook, *wake, token=self._token)
            except RuntimeError:  # the loop is gone
                return
            except Exception:  # one failing hook must not stop the wakes after it
                import logging

                logging.getLogger("sessionstate").exception("an on_wake coroutine failed")


class AsyncGateway:
    """A ``Gateway`` for an event loop: its methods as coroutines, its store work off the loop.

    Open with ``await AsyncGateway.open(url, ...)`` (the same keywords as ``Gateway.open``),
    or wrap a gateway already open with ``AsyncGateway(gateway)`` inside the loop; close with
    ``await gw.close()`` or ``async with``. The sync gateway stays reachable as ``.gateway``
    (settings and properties such as ``stats`` and ``queue`` are read there).
    """

    def __init__(self, gateway: Gateway, *, owns_gateway: bool = True) -> None:
        """Wrap an open ``gateway``; call inside the loop. Without ``owns_gateway``,
        ``close()`` stops only this wrapper's worker and leaves the gateway open."""
        self.gateway = gateway
        self.owns_gateway = owns_gateway
        self._token = anyio.lowlevel.current_token()
        self._worker = _StoreWorker(gateway, self._token)
        self._wakes: _WakeRelay | None = None  # ``open`` sets it for a coroutine ``on_wake``
        self.closed = False
        # The gateway's parts, their methods as coroutines (``_AsyncPart``).
        self.registry = _AsyncPart(self, gateway.registry)
        self.transcripts = _AsyncPart(self, gateway.transcripts)
        self.producers = _AsyncPart(self, gateway.producers)
        self.runs = _AsyncPart(self, gateway.runs)
        self.cluster = _AsyncPart(self, gateway.cluster)
        self.ops = _AsyncPart(self, gateway.ops)

    @classmethod
    async def open(cls, url: str | None = None, **options: Unpack[OpenOptions]) -> "AsyncGateway":
        """``Gateway.open`` in a worker thread: its keywords (``OpenOptions``, the one
        declaration of both), the same errors. ``on_wake`` may be a plain function (called in
        a store thread, as in the sync API) or a coroutine function."""
        relay = None
        on_wake = options.get("on_wake")
        if on_wake is not None and inspect.iscoroutinefunction(on_wake):
            relay = _WakeRelay(on_wake, anyio.lowlevel.current_token())
            options["on_wake"] = relay

        def open_sync() -> Gateway:
            return Gateway.open(url, **options)

        try:
            gateway = await anyio.to_thread.run_sync(open_sync)
        except BaseException:
            if relay is not None:
                await anyio.to_thread.run_sync(relay.stop)
            raise
        wrapper = cls(gateway)
        wrapper._wakes = relay
        return wrapper

    async def close(self) -> None:
        """Finish the queued store work, close the gateway, stop the threads (idempotent)."""
        if self.closed:
            return
        self.closed = True
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._worker.stop)
            if self.owns_gateway:
                await anyio.to_thread.run_sync(self.gateway.close)
            if self._wakes is not None:
                await anyio.to_thread.run_sync(self._wakes.stop)

    async def __aenter__(self) -> "AsyncGateway":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the worker -------------------------------------------------------------------------

    async def _submit(self, job: _Job) -> Any:
        if self.closed:  # the worker is gone
            if not self.gateway.closed:  # a wrapper closed over a gateway left open
                raise StorageUnavailable("this AsyncGateway is closed (its gateway is not)")
            _work_alone(self.gateway, job)  # a closed store fails at once, without I/O
        else:
            self._worker.put(job)
            # Not shielded (a cancel scope per call costs the loop more than the call): a
            # cancelled caller stops waiting, and the work, already queued, still runs.
            await job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result

    async def run(self, function: Callable[..., _T], *args: Any) -> _T:
        """``function(*args)`` on the store's worker thread: for several calls that must see
        one state or share one transaction (``with gateway.transaction(): ...`` inside it)."""
        return await self._submit(_Job(lambda: function(*args), None))

    # -- recording --------------------------------------------------------------------------

    async def record_events(self, events: Sequence[Mapping[str, Any]]) -> list[int | None]:
        """``Gateway.record_events``: validated here, committed together in the next group."""
        prepared = self.gateway.ops.prepare_events(events)
        return await self._submit(_Job(None, prepared))

    async def call_tool(self, caller_key: str, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """``Gateway.call_tool`` in anyio's thread pool (``sessions_send`` may wait for a reply)."""
        return await anyio.to_thread.run_sync(self.gateway.call_tool, caller_key, name, args)


def _mirror(name: str, call: Callable[..., Awaitable[Any]], how: str) -> Callable[..., Awaitable[Any]]:
    """``call`` as ``Gateway.<name>``'s coroutine: its name, its signature (read from the
    method, never written again here) and its doc, with ``how`` it runs."""
    method = vars(Gateway).get(name)
    method = method.method if isinstance(method, PartMethod) else getattr(Gateway, name)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``Gateway.{name}`` {how}.\n\n{method.__doc__ or ''}"
    call.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    return call


async def _record_event(self: AsyncGateway, session_key: str, kind: str, **event: Unpack[EventArgs]) -> int | None:
    # validated on the loop: bad input raises here
    prepared = self.gateway.ops.prepare_event(session_key, kind, **event)
    (sequence,) = await self._submit(_Job(None, (prepared,)))
    return sequence


class _AsyncPart:
    """One of the gateway's parts for the loop: each of its methods, looked up by name, as a
    coroutine on the store's worker thread (or anyio's pool for the calls that may wait, as
    ``Gateway``'s); its plain attributes (``runs.runner``, ``cluster.feed``) as they are."""

    def __init__(self, owner: AsyncGateway, part: object) -> None:
        self._owner = owner
        self._part = part

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        member = getattr(self._part, name)
        if not callable(member):
            return member
        owner = self._owner

        async def call(*args: Any, **kwargs: Any) -> Any:
            if name in _POOLED:
                return await anyio.to_thread.run_sync(lambda: member(*args, **kwargs))
            return await owner._submit(_Job(lambda: member(*args, **kwargs), None))

        call.__name__ = call.__qualname__ = name
        call.__doc__ = member.__doc__
        try:
            call.__signature__ = inspect.signature(member)  # type: ignore[attr-defined]
        except (TypeError, ValueError):
            pass
        return call


def _store_call(name: str) -> Callable[..., Awaitable[Any]]:
    async def call(self: AsyncGateway, *args: Any, **kwargs: Any) -> Any:
        bound = getattr(self.gateway, name)
        return await self._submit(_Job(lambda: bound(*args, **kwargs), None))

    return _mirror(name, call, "on the store's worker thread")


def _pooled_call(name: str) -> Callable[..., Awaitable[Any]]:
    async def call(self: AsyncGateway, *args: Any, **kwargs: Any) -> Any:
        bound = getattr(self.gateway, name)
        return await anyio.to_thread.run_sync(lambda: bound(*args, **kwargs))

    return _mirror(name, call, "in anyio's thread pool (it may wait)")


def public_methods() -> list[str]:
    """The public methods of ``Gateway`` (properties excluded): what ``AsyncGateway`` mirrors."""
    return sorted(
        name for name, member in vars(Gateway).items()
        if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, (classmethod, PartMethod)))
    )


AsyncGateway.record_event = _mirror(  # type: ignore[attr-defined]
    "record_event", _record_event, "validated here, committed in the worker's next group")
for _name in public_methods():
    if _name in _NOT_WRAPPED or _name in vars(AsyncGateway):
        continue
    setattr(AsyncGateway, _name, _pooled_call(_name) if _name in _POOLED else _store_call(_name))
del _name

__all__ = ["AsyncGateway", "AsyncWakeHook"]
