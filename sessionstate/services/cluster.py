"""Which sessions this gateway process serves, and keeping its queue in step with other
processes' commits (spec section 6a, R18-R22).

A ``Cluster`` belongs to one notice protocol service (``NoticeProtocol.cluster``) and is the
gateway's public ``cluster`` part: ``serve``, ``serves``, ``register``, ``heartbeat``,
``attach``, ``detach``, ``attached``, ``sweep`` and ``feed`` (R19-R22). Each public method takes
the gateway's one (reentrant) lock itself; ``serves_here`` answers ``serves(W)`` from memory
for the hot path (every notice asks it), with the lock already held.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import os
import socket
import time
import uuid
from typing import Callable, Iterable, Protocol, Sequence

from ..errors import InvalidArgument, StorageError
from ..shared.keys import SessionRef, check_key
from ..shared.provenance import Notice
from ..shared.formats import notice_text
from .locking import locked
from .notice.queue import SystemEventQueue
from .notice.rewake import Rewaker
from ..store import ChangeFeed, Store
from ..store.records import ChangeSet, PendingCursor

log = logging.getLogger("sessionstate")

HEARTBEAT_SECONDS = 5.0
LEASE_SECONDS = 15.0
SERVE_ALL = ("*",)



class NoticeSink(Protocol):
    """What serving needs of the notice protocol service (which satisfies it)."""

    store: Store
    clock: Callable[[], float]
    queue: SystemEventQueue
    stats: dict[str, int]
    rewaker: Rewaker

    def queue_notices(self, notices: list[Notice]) -> None: ...

    def resolve_any_agent(self, key: str) -> None: ...


def check_patterns(patterns: object) -> tuple[str, ...]:
    if isinstance(patterns, str) or not isinstance(patterns, (list, tuple)):
        raise InvalidArgument("serve must be a list of session key patterns")
    for pattern in patterns:
        if not isinstance(pattern, str):  # named by its type: the repr of a hostile object may not end
            raise InvalidArgument(f"serve pattern must be a non-empty printable string, not {type(pattern).__name__}")
        if not pattern or not pattern.isprintable():
            raise InvalidArgument(f"serve pattern {pattern[:80]!r} must be a non-empty printable string")
    return tuple(patterns)


class Cluster:
    """R19-R20 for one gateway; the sweep of R22."""

    def __init__(self, sink: NoticeSink, patterns: Sequence[str] = SERVE_ALL) -> None:
        self._sink = sink
        self.store = sink.store  # the lock the public methods take (``locking.locked``)
        self.patterns = check_patterns(patterns)
        self.server_id: str | None = None  # set when the pump registers this server
        self.feed: ChangeFeed | None = None  # other connections' commits, from registration on
        self._mine: set[str] = set()
        # R20: claims a sweep found gone from this server although it never detached them (its
        # row was removed: a stall past the lease), kept until the next heartbeat: one that
        # registers anew takes back those nobody holds, whichever ran first when it resumed.
        self._lost: set[str] = set()
        self._elsewhere: dict[str, str] = {}  # key -> the live server holding its claim
        self._matches: dict[str, bool] = {}
        self.sweeps = 0
        from ..statemachine import NOTIFYING_KINDS

        self._kinds = tuple(sorted(NOTIFYING_KINDS))

    @locked
    def serve(self, patterns: object) -> None:
        """R19: replace the session key patterns served here when unclaimed (``open``'s ``serve``)."""
        self.patterns = check_patterns(patterns)
        self._matches.clear()

    def take_wake_slot(self, watcher: str, now: float, window: float) -> tuple[bool, float]:
        """R23: the durable wake slot: one statement, its own implicit transaction (or part of
        the caller's). Not a store transaction: it is no protocol step, and the protocol
        trace sees store transactions only. A read-only database holds no slot: this
        process decides alone (its in-memory window still coalesces)."""
        store = self._sink.store
        try:
            return store.serving.take_wake_slot(watcher, now, window)
        except StorageError:
            if not store.read_only:
                raise
            return True, now

    # -- R19: who serves W --------------------------------------------------------------------

    @locked
    def serves(self, key: str) -> bool:
        """R19: whether notices for ``key`` are queued (and wakes sent) here."""
        check_key(key)
        return self.serves_here(key)

    def serves_here(self, key: str) -> bool:
        """``serves`` without the check or the lock: the hot path's question."""
        if key in self._mine:
            return True
        if key in self._elsewhere:
            return False
        matched = self._matches.get(key)
        if matched is None:
            matched = self._matches[key] = any(fnmatch.fnmatchcase(key, p) for p in self.patterns)
        return matched

    # -- registration (the pump's) ----------------------------------------------------------

    @locked
    def register(self) -> None:
        """R19-R20: become a server: a heartbeat row, the claims as they stand, and a change
        feed opened first, so no commit after the claims were read goes unseen. Without the
        pump's thread the caller sweeps (``sweep``) and heartbeats itself, as the replays do;
        ``Gateway.open(pump=True)`` registers and starts the pump."""
        store = self._sink.store
        feed = store.open_change_feed(self._kinds)
        server_id = uuid.uuid4().hex
        try:
            with store.transaction():
                store.serving.register_server(server_id, os.getpid(), socket.gethostname(), time.time())
                self._elsewhere = store.serving.all_claims()
        except BaseException:
            feed.close()
            raise
        self.server_id, self.feed = server_id, feed
        self._mine.clear()
        self._lost.clear()
        self.reconcile(list(self._elsewhere))  # notices queued before it knew the claims

    def unregister(self) -> None:
        """Close the change feed; drop this server's row and claims."""
        store = self._sink.store
        feed, self.feed = self.feed, None
        try:
            if self.server_id is not None:
                with store.transaction():
                    store.serving.remove_server(self.server_id, self._sink.clock())
        finally:
            if feed is not None:
                feed.close()
            self.server_id = None
            self._mine.clear()
            self._lost.clear()

    @locked
    def heartbeat(self) -> None:
        """R20: refresh this server's heartbeat and release the servers whose lease ran out
        (the pump does this every 5 s); nothing before ``register``."""
        if self.server_id is None:
            return
        store = self._sink.store
        now = time.time()
        with store.transaction():
            alive = store.serving.heartbeat(self.server_id, now)
            if not alive:  # another process found us dead (a long stall): start afresh
                store.serving.register_server(self.server_id, os.getpid(), socket.gethostname(), now)
                # R20: take back only what nobody attached since; a key another server took
                # stays with it, and the next sweep's refresh stops serving it here.
                for key in sorted(self._mine | self._lost):
                    if store.serving.claimant(key) is None:
                        store.serving.claim(key, self.server_id, self._sink.clock())
                        if key not in self._mine:  # as an attach: served once durable
                            store.after_commit(functools.partial(self._claimed, key))
            # Taken back or left with their new holders, or the row was in place: done with.
            lost = set(self._lost)
            store.after_commit(lambda: self._lost.difference_update(lost))
            for dead in store.serving.dead_servers(now - LEASE_SECONDS):
                if dead != self.server_id:
                    log.warning("gateway server %s missed its lease; its sessions are released", dead)
                    store.serving.remove_server(dead, self._sink.clock())

    # -- R20: claims --------------------------------------------------------------------------

    @locked
    def attach(self, key: str) -> int:
        """R20: serve ``key`` from this process (the last attach wins); returns the claim's
        generation. Needs the change pump (or ``register``)."""
        check_key(key)
        sink = self._sink
        sink.resolve_any_agent(key)
        if self.server_id is None:
            raise InvalidArgument("attach needs the change pump: open the gateway with pump=True")
        with sink.store.transaction():
            sink.store.witness_commit()  # R29: a lost answer is resolved, not left unknown
            generation = sink.store.serving.claim(key, self.server_id, sink.clock())
            # In memory only once the claim is durable: inside a caller's transaction that
            # rolls back, this process must not go on serving the watcher.
            sink.store.after_commit(lambda: self._claimed(key))
        return generation

    def _claimed(self, key: str) -> None:
        self._mine.add(key)
        self._lost.discard(key)
        self._elsewhere.pop(key, None)
        # R23: a process that starts serving the watcher queues its owed notices as lines that
        # entered now. A line held from an earlier spell (this process had not yet swept the
        # move away) may predate its own last wake, while the wake of the process that served
        # the watcher since may have been lost: kept as it was, nothing would wake for it.
        sink = self._sink
        sink.queue.remove(key, [e.text for e in sink.queue.peek(key) if e.target is not None])
        self.reconcile([key])

    @locked
    def detach(self, key: str) -> bool:
        """R20: drop this process's claim on ``key``; ``True`` when it held one."""
        check_key(key)
        sink = self._sink
        if self.server_id is None or key not in self._mine:
            return False
        with sink.store.transaction():
            sink.store.serving.unclaim(key, self.server_id, sink.clock())
            sink.store.after_commit(lambda: self._unclaimed(key))  # as attach: once durable
        return True

    def _unclaimed(self, key: str) -> None:
        self._mine.discard(key)
        self._lost.discard(key)
        self.reconcile([key])

    @locked
    def attached(self) -> list[str]:
        """R20: the session keys this process holds a claim on, sorted."""
        return sorted(self._mine)

    # -- R22: the sweep -----------------------------------------------------------------------

    @locked
    def sweep(self, *, sync: bool = True) -> int:
        """R22: bring this process's queue in step with the commits its feed reports since the
        previous sweep; with ``sync`` (the default; the pump passes ``False``), first wait until
        the feed holds every commit made before the call. Returns how many notices it queued."""
        feed = self.feed
        if feed is None:  # the first sweep of a gateway without the pump: everything, once
            try:
                self.feed = self._sink.store.open_change_feed(self._kinds)
            except InvalidArgument:  # an in-memory database: every sweep is a full one
                pass
            queued = self._apply(ChangeSet([], [], [], True), first=True)
            self.sweeps += 1
            return queued
        try:
            if sync:
                feed.sync()
            # Inside the try: taking reads through the main connection (PostgreSQL reads the
            # cursors each notified event froze), and what it took is gone from the feed.
            queued = self._apply(feed.take())
        except BaseException:
            feed.lost()  # redone in full by the next sweep (R22)
            raise
        self.sweeps += 1
        return queued

    def _apply(self, changes: ChangeSet, *, first: bool = False) -> int:
        sink = self._sink
        if changes.resync:
            if not first:  # the first sweep is a full one by design: nothing was lost
                log.warning("change feed lost track: resynchronising every watcher")
            self._refresh_all_claims()
            watchers = {p.watcher for p in sink.store.serving.all_pending()} | set(sink.queue.sessions())
            queued = self.reconcile(watchers)
        else:
            for key in changes.watchers:
                self._refresh_claim(key)
            queued = self._queue_pending(p for p in changes.frozen if self.serves_here(p.watcher))
            queued += self.reconcile(changes.watchers)
        if changes.material and sink.rewaker.active():  # R23: other processes' events re-wake too
            now = sink.clock()
            for key, agent_id, actor_id in changes.material:
                sink.rewaker.on_material((key, agent_id), actor_id, now)
        return queued

    def reconcile(self, watchers: Iterable[str]) -> int:
        """Make each watcher's queued notices here equal the ones its durable cursors owe
        (none when this process does not serve it); plain lines stay."""
        sink = self._sink
        queued = 0
        for watcher in watchers:
            owed = sink.store.serving.pending_held_by(watcher) if self.serves_here(watcher) else []
            wanted = {(p.target_key, p.target_agent_id): notice_text(p.target_key, p.last_seen) for p in owed}
            for entry in sink.queue.peek(watcher):
                if entry.target is not None and wanted.get(entry.target) != entry.text:
                    sink.queue.remove(watcher, [entry.text])
            queued += self._queue_pending(owed)
        return queued

    def _queue_pending(self, pending: Iterable[PendingCursor]) -> int:
        """R18 for the given pending cursors: queue the notice for L, replacing a stale text."""
        sink = self._sink
        notices: list[Notice] = []
        for p in pending:
            target = (p.target_key, p.target_agent_id)
            text = notice_text(p.target_key, p.last_seen)
            stale = [e.text for e in sink.queue.peek(p.watcher) if e.target == target and e.text != text]
            if stale:
                sink.queue.remove(p.watcher, stale)
            notices.append((p.watcher, target, p.last_seen, None))
        before = sink.stats["notices_enqueued"]
        sink.queue_notices(notices)
        return sink.stats["notices_enqueued"] - before

    def _refresh_all_claims(self) -> None:
        claims = self._sink.store.serving.all_claims()
        self._lost |= {key for key in self._mine if claims.get(key) != self.server_id}
        self._lost -= {key for key, server in claims.items() if server == self.server_id}
        self._mine = {key for key, server in claims.items() if server == self.server_id}
        self._elsewhere = {key: server for key, server in claims.items() if server != self.server_id}

    def _refresh_claim(self, key: str) -> None:
        holder = self._sink.store.serving.claimant(key)
        if holder is not None and holder[0] == self.server_id:
            self._mine.add(key)
            self._elsewhere.pop(key, None)
            self._lost.discard(key)
            return
        if key in self._mine:
            self._lost.add(key)
        if holder is None:
            self._elsewhere.pop(key, None)
            self._mine.discard(key)
        else:
            if key in self._mine:
                log.info("session %s was attached by server %s (generation %d)", key, holder[0], holder[1])
            self._mine.discard(key)
            self._elsewhere[key] = holder[0]


