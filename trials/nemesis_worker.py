"""A gateway process of the nemesis (``nemesis.py``): ``python -m trials.nemesis_worker URL DIR NAME LIFE SEED``.

One pumped gateway on URL, serving every watcher nobody claims (R19) and attaching its own
(``OWN``), with a clock the nemesis can jump (``clock S``: the gateway's clock is the real one
plus S seconds). Its clients, until told ``quiesce``:

- a thread recording lone events and batches, with and without dedupe keys (a failed call with
  dedupe keys is tried again with the same keys, R10);
- an event loop recording through ``AsyncGateway`` (the async API, the same gateway);
- a thread draining, watching and unwatching, resetting, deleting and re-creating, pruning, and
  rolling back units of work that recorded an event;
- and, always, the agent's turn: each wake (``on_wake``) is followed by a drain of the woken
  watcher, tried again until the store answers (a woken turn runs).

Everything each call was told goes to ``DIR/history-NAME-LIFE.jsonl``, one JSON object a
line, written and flushed before the next call of that client: what was acknowledged
(sequences), delivered (lines, with the targets' state versions read after), attached
(claim generation, server id), rolled back, and every wake. On PostgreSQL it also logs every
event the change feed reported (R22: only committed events may be reported).

Commands on stdin, each after a tag (``TAG VERB ARGS``), one answer line each on stdout after the
same tag (a late answer is told from the next one's): ``attach KEY`` (``ok GENERATION`` or
``error ...``), ``clock SECONDS``, ``hold SECONDS`` (``held`` once this process's store write turn is
taken, so no transaction of its own is open when the nemesis stops it; ``busy`` when it could not
be taken in SECONDS), ``release`` (gives the turn back), ``quiesce``, ``state`` (JSON: server id, claims held here),
``stop`` (close and exit 0). ``ready SERVER_ID`` is printed once the gateway is open and its
own watchers attached. Seeded bugs (``nemesis_bugs``) are applied first from the environment.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from . import nemesis_bugs
from .nemesis_world import (
    CHURN_PAIRS, CHURN_SESSIONS, LOG_ONLY, NOTIFYING, SESSIONS, WATCHERS, own_watchers,
)

_SINCE = re.compile(r'session_status sessionKey "(?P<target>[^"]+)" changesSince (?P<since>\d+)\.$')
OPEN_SECONDS = 150.0  # a stalled process may hold SQLite's write lock for a lease and more
TURN_RETRY_SECONDS = 120.0  # a bound for a store that never answers again, not a measurement


class _Abort(Exception):
    """Raised inside a unit of work to roll it back."""


class History:
    """The clients' record: one JSON line per call, flushed before the caller goes on."""

    def __init__(self, path: Path, name: str, life: int) -> None:
        self._file = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self.name, self.life = name, life

    def write(self, op: str, **fields: Any) -> None:
        line = json.dumps({"t": time.time(), "w": self.name, "life": self.life, "op": op, **fields})
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


class Worker:
    def __init__(self, url: str, directory: Path, name: str, life: int, seed: int, settings: dict[str, Any]) -> None:
        from sessionstate.facade.gateway import Gateway

        self.name, self.life, self.url = name, life, url
        self.rng = random.Random(seed)
        self.settings = settings
        self.offset = 0.0
        self.quiet = threading.Event()
        self.stopping = threading.Event()
        self.history = History(directory / f"history-{name}-{life}.jsonl", name, life)
        self.woken: list[str] = []
        self.woken_cv = threading.Condition()
        from sessionstate.errors import StorageError

        deadline = time.monotonic() + OPEN_SECONDS
        while True:  # a supervisor starting a gateway while its server restarts tries again
            try:
                self.gw = Gateway.open(
                    url, pump=True, clock=self.clock, wake_window=settings["window"], on_wake=self.on_wake,
                    notify_on_create=False,
                )
                break
            except StorageError as exc:
                self.history.write("open", error=f"{type(exc).__name__}: {exc}")
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.server_id = self.gw.cluster.server_id
        self.resolved: dict[str, int] = {}
        self.resolved_lock = threading.Lock()
        self.count = 0
        self.count_lock = threading.Lock()
        self.release = threading.Event()

    def hold(self, seconds: float) -> bool:
        """Take the store's write turn in a thread of its own until ``release``: a stall that
        lands between this process's transactions (another process can then take over)."""
        held = threading.Event()
        self.release.clear()

        def holder() -> None:
            if self.gw.store.lock.acquire(timeout=seconds):
                try:
                    held.set()
                    self.release.wait()
                finally:
                    self.gw.store.lock.release()

        threading.Thread(target=holder, daemon=True, name="hold").start()
        return held.wait(seconds + 1.0)

    def clock(self) -> float:
        return time.time() + self.offset

    def summary(self) -> str:
        with self.count_lock:
            self.count += 1
            return f"{self.name}.{self.life}.{self.count}"

    # -- set-up and commands ------------------------------------------------------------------

    def attach(self, key: str) -> int:
        # Written first: a worker killed between the attach's commit and its answer leaves an
        # attempt the judge must count as perhaps committed.
        self.history.write("attaching", watcher=key, server=self.server_id)
        generation = self.gw.cluster.attach(key)
        self.history.write("attach", watcher=key, server=self.server_id, generation=generation)
        return generation

    def command(self, line: str) -> str:
        verb, _, arg = line.strip().partition(" ")
        if verb == "attach":
            try:
                return f"ok {self.attach(arg)}"
            except Exception as exc:
                self.history.write("attach", watcher=arg, server=self.server_id, error=type(exc).__name__)
                return f"error {type(exc).__name__}: {exc}"
        if verb == "clock":
            self.offset = float(arg)
            self.history.write("clock", offset=self.offset)
            return "ok"
        if verb == "hold":
            return "held" if self.hold(float(arg)) else "busy"
        if verb == "release":
            self.release.set()
            return "ok"
        if verb == "quiesce":
            self.quiet.set()
            return "ok"
        if verb == "state":
            return json.dumps({"server": self.gw.cluster.server_id, "attached": self.gw.cluster.attached(),
                               "resolutions": self._resolutions()})
        if verb == "stop":
            self.stopping.set()
            return "ok"
        return f"error unknown command {verb!r}"

    # -- the turn: a wake is followed by a drain ----------------------------------------------

    def on_wake(self, watcher: str, reason: str) -> None:
        self.history.write("wake", watcher=watcher, reason=reason, at=self.clock())
        with self.woken_cv:
            self.woken.append(watcher)
            self.woken_cv.notify()

    def turns(self) -> None:
        from sessionstate.errors import UnknownSession

        while not self.stopping.is_set():
            with self.woken_cv:
                while not self.woken and not self.stopping.is_set():
                    self.woken_cv.wait(0.2)
                if self.stopping.is_set():
                    return
                watcher = self.woken.pop(0)
            deadline = time.monotonic() + TURN_RETRY_SECONDS
            while not self.stopping.is_set():
                try:
                    drained = self.drain(watcher, turn=True)
                except UnknownSession:
                    break  # deleted after its wake: no turn to take (the drain wrote why)
                if drained or time.monotonic() > deadline:
                    break
                time.sleep(0.1)

    def drain(self, watcher: str, *, turn: bool = False) -> bool:
        """One drain, its lines and their targets' state versions recorded; False when the
        store failed (R29 ``U``: the drain's commit answer was lost and stayed unknown)."""
        from sessionstate.errors import StorageError

        unknown = self._resolutions().get("unknown", 0)
        # Written first: a worker killed between the drain's commit and its answer leaves a
        # drain the judge must count as perhaps delivered (to a caller that is gone).
        self.history.write("draining", watcher=watcher, turn=turn)
        try:
            lines = self.gw.drain_system_events(watcher)
        except Exception as exc:  # answered: it failed (a deleted watcher raises UnknownSession)
            self.history.write("drain", watcher=watcher, turn=turn, error=type(exc).__name__)
            if isinstance(exc, StorageError):
                return False
            raise
        versions: dict[str, int | None] = {}
        for line in lines:
            found = _SINCE.search(line)
            if found is not None:
                versions[found["target"]] = self._state_version(found["target"])
        tag = "U" if self._resolutions().get("unknown", 0) > unknown else "D"
        self.note_resolutions()
        self.history.write("drain", watcher=watcher, turn=turn, lines=lines, tag=tag, versions=versions)
        return True

    def _state_version(self, key: str) -> int | None:
        from sessionstate.errors import StorageError, UnknownSession

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                return self.gw.ops.state_version(key)
            except UnknownSession:
                return None
            except StorageError:
                time.sleep(0.1)
        return None

    def _resolutions(self) -> dict[str, int]:
        return dict(getattr(self.gw.store, "commit_resolutions", {}))

    def note_resolutions(self) -> None:
        """R29: each commit whose answer was lost and how the store resolved it, once."""
        with self.resolved_lock:
            now = self._resolutions()
            new = {k: n - self.resolved.get(k, 0) for k, n in now.items() if n != self.resolved.get(k, 0)}
            if new:
                self.resolved = now
                self.history.write("resolved", outcomes=new)

    # -- the clients ----------------------------------------------------------------------------

    def event(self, rng: random.Random, *, dedupe: bool) -> dict[str, Any]:
        target = rng.choice(SESSIONS)
        actor = rng.choice((None, None) + WATCHERS)
        kind = rng.choice(NOTIFYING) if rng.random() < 0.75 else rng.choice(LOG_ONLY)
        summary = self.summary()
        event = {"session_key": target, "kind": kind, "actor_type": "human" if actor is None else "agent",
                 "actor_id": actor, "summary": summary}
        if dedupe:
            event["dedupe_key"] = "k-" + summary
        return event

    def recorder(self) -> None:
        rng = random.Random(self.rng.randrange(2**32))
        retry: list[dict[str, Any]] | None = None
        while not self.quiet.is_set() and not self.stopping.is_set():
            if retry is not None:
                events, retry = retry, None
            else:
                events = [self.event(rng, dedupe=rng.random() < 0.4) for _ in range(rng.choice((1, 1, 1, 2, 4)))]
            lone = len(events) == 1
            try:
                if lone:
                    args = dict(events[0])
                    seqs = [self.gw.record_event(args.pop("session_key"), args.pop("kind"), **args)]
                else:
                    seqs = self.gw.record_events(events)
            except Exception as exc:  # R15: recording never fails the caller; this is a finding
                self.history.write("record", events=events, error=f"{type(exc).__name__}: {exc}", api="sync")
                continue
            self.history.write("record", events=events, seqs=seqs, api="sync")
            self.note_resolutions()
            if any(s is None for s in seqs) and all(e.get("dedupe_key") for e in events):
                retry = events  # R10: the same keys again
            time.sleep(rng.uniform(0, 0.01))

    def async_recorder(self) -> None:
        from sessionstate.facade.aio import AsyncGateway

        rng = random.Random(self.rng.randrange(2**32))

        async def run() -> None:
            agw = AsyncGateway(self.gw, owns_gateway=False)
            try:
                while not self.quiet.is_set() and not self.stopping.is_set():
                    event = self.event(rng, dedupe=rng.random() < 0.5)
                    args = dict(event)
                    try:
                        seq = await agw.record_event(args.pop("session_key"), args.pop("kind"), **args)  # type: ignore[attr-defined]
                    except Exception as exc:
                        self.history.write("record", events=[event], error=f"{type(exc).__name__}: {exc}", api="async")
                        continue
                    self.history.write("record", events=[event], seqs=[seq], api="async")
                    self.note_resolutions()
                    await asyncio.sleep(rng.uniform(0.005, 0.03))
            finally:
                await agw.close()

        asyncio.run(run())

    def operator(self) -> None:
        from sessionstate.errors import SessionStateError

        rng = random.Random(self.rng.randrange(2**32))
        while not self.quiet.is_set() and not self.stopping.is_set():
            roll = rng.random()
            try:
                if roll < 0.45:
                    self.drain(rng.choice(WATCHERS))
                elif roll < 0.65:
                    watcher, target = rng.choice(CHURN_PAIRS)
                    if rng.random() < 0.6:
                        self.gw.watch(watcher, target)
                        self.history.write("watch", watcher=watcher, target=target)
                    else:
                        self.gw.unwatch(watcher, target)
                        self.history.write("unwatch", watcher=watcher, target=target)
                elif roll < 0.72:
                    key = rng.choice(CHURN_SESSIONS)
                    self.gw.ops.reset_session(key)
                    self.history.write("reset", session=key)
                elif roll < 0.77:
                    key = rng.choice(CHURN_SESSIONS)
                    self.history.write("deleting", session=key)
                    self.gw.ops.delete_session(key)
                    self.history.write("delete", session=key)
                    self.gw.create_session(key)
                    self.history.write("create", session=key)
                elif roll < 0.79:
                    self.gw.prune()
                    self.history.write("prune")
                else:
                    self.rolled_back(rng)
            except SessionStateError as exc:
                self.history.write("error", roll=round(roll, 3), error=f"{type(exc).__name__}: {exc}")
                self.note_resolutions()
                if "UnknownSession" in type(exc).__name__:
                    self._recreate()
            time.sleep(rng.uniform(0.01, 0.05))

    def _recreate(self) -> None:
        from sessionstate.errors import SessionStateError

        for key in CHURN_SESSIONS:
            try:
                if not self.gw.ops.session_exists(key):
                    self.gw.create_session(key)
                    self.history.write("create", session=key)
            except SessionStateError:
                pass  # another process did, or the store is down: the next error tries again

    def rolled_back(self, rng: random.Random) -> None:
        """A unit of work that records an event and then fails: nothing of it may remain."""
        event = self.event(rng, dedupe=False)
        args = dict(event)
        seq = None
        try:
            with self.gw.transaction():
                seq = self.gw.record_event(args.pop("session_key"), args.pop("kind"), **args)
                raise _Abort
        except _Abort:
            self.history.write("rolled_back", events=[event], seqs=[seq])


def _install_feed_log(worker: Worker) -> None:
    """On PostgreSQL, log each event the change feed reports (its payloads, before parsing)."""
    try:
        from sessionstate.store.postgres_feed import PostgresChangeFeed
    except ImportError:
        return
    original = PostgresChangeFeed.take

    def take(self: PostgresChangeFeed) -> Any:
        with self._lock:
            payloads = list(self._payloads)
        events = []
        for payload in payloads:
            try:
                events += json.loads(payload).get("e", [])
            except (ValueError, AttributeError):
                pass
        if events:
            worker.history.write("feed", events=events)
        return original(self)

    PostgresChangeFeed.take = take  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    url, directory, name, life, seed = argv[0], Path(argv[1]), argv[2], int(argv[3]), int(argv[4])
    settings = json.loads(argv[5])
    nemesis_bugs.apply()
    from sessionstate.services import change_pump, cluster

    cluster.LEASE_SECONDS = settings["lease"]  # the nemesis's lease (15 s unless told)
    change_pump.HEARTBEAT_SECONDS = cluster.HEARTBEAT_SECONDS = settings["heartbeat"]
    try:
        worker = Worker(url, directory, name, life, seed, settings)
    except Exception:
        traceback.print_exc()
        return 3
    _install_feed_log(worker)
    for key in own_watchers(name, settings["workers"]):
        deadline = time.monotonic() + 60
        while True:
            try:
                worker.attach(key)
                break
            except Exception:
                if time.monotonic() > deadline:
                    traceback.print_exc()
                    return 3
                time.sleep(0.2)
    threads = [threading.Thread(target=t, daemon=True, name=t.__name__)
               for t in (worker.turns, worker.recorder, worker.async_recorder, worker.operator)]
    for thread in threads:
        thread.start()
    print(f"ready {worker.server_id}", flush=True)
    for line in sys.stdin:
        tag, _, text = line.partition(" ")  # each answer carries its command's tag
        print(f"{tag} {worker.command(text)}", flush=True)
        if worker.stopping.is_set():
            break
    worker.stopping.set()
    worker.quiet.set()
    for thread in threads:
        thread.join(timeout=30)
    worker.gw.close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
