"""Which sessions this gateway process serves, and keeping its queue in step with other
processes' commits (spec section 6a, R18-R22).

A ``Serving`` belongs to one ``Gateway``. It answers ``serves(W)`` from memory (the hot path
asks it for every notice), holds this server's claims, and runs the incremental sweep that
the change pump (``pump.py``) triggers. Every method is called with the gateway lock held.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from .errors import InvalidArgument
from .keys import check_key
from .notices import notice_text
from .store import serving as sql

if TYPE_CHECKING:
    from .gateway import Gateway

log = logging.getLogger("sessionstate")

HEARTBEAT_SECONDS = 5.0
LEASE_SECONDS = 15.0
SERVE_ALL = ("*",)

Target = tuple[str, str]


def check_patterns(patterns: object) -> tuple[str, ...]:
    if isinstance(patterns, str) or not isinstance(patterns, (list, tuple)):
        raise InvalidArgument("serve must be a list of session key patterns")
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern or not pattern.isprintable():
            raise InvalidArgument(f"serve pattern {pattern!r} must be a non-empty printable string")
    return tuple(patterns)


class Serving:
    """R19-R20 for one gateway; the sweep of R22."""

    def __init__(self, gateway: "Gateway", patterns: Sequence[str] = SERVE_ALL) -> None:
        self._gateway = gateway
        self.patterns = check_patterns(patterns)
        self.server_id: str | None = None  # set when the pump registers this server
        self._mine: set[str] = set()
        self._elsewhere: dict[str, str] = {}  # key -> the live server holding its claim
        self._matches: dict[str, bool] = {}
        self._after_sequence = 0
        self._after_stamp = 0
        self.sweeps = 0
        from .statemachine import NOTIFYING_KINDS

        self._kinds = tuple(sorted(NOTIFYING_KINDS))

    def serve(self, patterns: object) -> None:
        self.patterns = check_patterns(patterns)
        self._matches.clear()

    def take_wake_slot(self, watcher: str, now: float, window: float) -> tuple[bool, float]:
        """R23: the durable wake slot: one statement, its own implicit transaction (or part of
        the caller's). Not a store transaction: it is no protocol step, and the protocol
        trace sees store transactions only."""
        return sql.take_wake_slot(self._gateway.store.db, watcher, now, window)

    # -- R19: who serves W --------------------------------------------------------------------

    def serves(self, key: str) -> bool:
        if key in self._mine:
            return True
        if key in self._elsewhere:
            return False
        matched = self._matches.get(key)
        if matched is None:
            matched = self._matches[key] = any(fnmatch.fnmatchcase(key, p) for p in self.patterns)
        return matched

    # -- registration (the pump's) ----------------------------------------------------------

    def register(self) -> None:
        """Become a server: a heartbeat row, the claims as they stand, the sweep watermarks."""
        store = self._gateway.store
        self.server_id = uuid.uuid4().hex
        with store.atomic():
            sql.register_server(store.db, self.server_id, os.getpid(), socket.gethostname(), time.time())
            self._elsewhere = sql.all_claims(store.db)
            self._after_sequence, self._after_stamp = sql.watermarks(store.db)
        self._mine.clear()
        self.reconcile(list(self._elsewhere))  # notices queued before it knew the claims

    def unregister(self) -> None:
        if self.server_id is None:
            return
        store = self._gateway.store
        with store.atomic():
            sql.remove_server(store.db, self.server_id, self._gateway.clock())
        self.server_id = None
        self._mine.clear()

    def heartbeat(self) -> None:
        """Refresh this server's heartbeat and remove servers whose lease ran out (R20)."""
        if self.server_id is None:
            return
        store = self._gateway.store
        now = time.time()
        with store.atomic():
            alive = sql.heartbeat(store.db, self.server_id, now)
            if not alive:  # another process found us dead (a long stall): start afresh
                sql.register_server(store.db, self.server_id, os.getpid(), socket.gethostname(), now)
                for key in self._mine:
                    sql.claim(store.db, key, self.server_id, self._gateway.clock())
            for dead in sql.dead_servers(store.db, now - LEASE_SECONDS):
                if dead != self.server_id:
                    log.warning("gateway server %s missed its lease; its sessions are released", dead)
                    sql.remove_server(store.db, dead, self._gateway.clock())

    # -- R20: claims --------------------------------------------------------------------------

    def attach(self, key: str) -> int:
        """Claim ``key`` for this server (the last attach wins); returns the claim generation."""
        check_key(key)
        gateway = self._gateway
        gateway._resolve_any_agent(key)
        if self.server_id is None:
            raise InvalidArgument("attach needs the change pump: open the gateway with pump=True")
        with gateway.store.atomic():
            generation = sql.claim(gateway.store.db, key, self.server_id, gateway.clock())
        self._mine.add(key)
        self._elsewhere.pop(key, None)
        self.reconcile([key])
        return generation

    def detach(self, key: str) -> bool:
        check_key(key)
        gateway = self._gateway
        if self.server_id is None or key not in self._mine:
            return False
        with gateway.store.atomic():
            sql.unclaim(gateway.store.db, key, self.server_id, gateway.clock())
        self._mine.discard(key)
        self.reconcile([key])
        return True

    def attached(self) -> list[str]:
        return sorted(self._mine)

    # -- R22: the sweep -----------------------------------------------------------------------

    def sweep(self) -> int:
        """Bring this process's queue in step with commits since the previous sweep.

        Returns how many notices it queued. Reads one snapshot through the partial index and
        the change log (never the whole cursor table, except after a change-log gap).
        """
        gateway = self._gateway
        db = gateway.store.db
        snap = sql.read_sweep(db, self._after_sequence, self._after_stamp, self._kinds)
        for key in snap.changed_watchers:
            self._refresh_claim(key)
        if snap.gap:
            log.warning("change log trimmed past this server's stamp: resynchronising every watcher")
            watchers = {p.watcher for p in sql.all_pending(db)} | set(gateway.queue.sessions())
            queued = self.reconcile(watchers)
        else:
            queued = self._queue_pending(p for p in snap.frozen if self.serves(p.watcher))
            queued += self.reconcile(snap.changed_watchers)
        if gateway.rewaker.active():  # R23: other processes' material events re-wake too
            now = gateway.clock()
            for key, agent_id, actor_id in sql.notifying_events_after(
                db, self._after_sequence, snap.log_sequence, self._kinds
            ):
                gateway.rewaker.on_material((key, agent_id), actor_id, now)
        # Advanced only once the sweep succeeded: a failed one is redone by the next.
        self._after_sequence, self._after_stamp = snap.log_sequence, snap.change_stamp
        self.sweeps += 1
        return queued

    def reconcile(self, watchers: Iterable[str]) -> int:
        """Make each watcher's queued notices here equal the ones its durable cursors owe
        (none when this process does not serve it); plain lines stay."""
        gateway = self._gateway
        queued = 0
        for watcher in watchers:
            owed = sql.pending_held_by(gateway.store.db, watcher) if self.serves(watcher) else []
            wanted = {(p.target_key, p.target_agent_id): notice_text(p.target_key, p.last_seen) for p in owed}
            for entry in gateway.queue.peek(watcher):
                if entry.target is not None and wanted.get(entry.target) != entry.text:
                    gateway.queue.remove(watcher, [entry.text])
            queued += self._queue_pending(owed)
        return queued

    def _queue_pending(self, pending: Iterable[sql.PendingCursor]) -> int:
        """R18 for the given pending cursors: queue the notice for L, replacing a stale text."""
        gateway = self._gateway
        notices = []
        for p in pending:
            target = (p.target_key, p.target_agent_id)
            text = notice_text(p.target_key, p.last_seen)
            stale = [e.text for e in gateway.queue.peek(p.watcher) if e.target == target and e.text != text]
            if stale:
                gateway.queue.remove(p.watcher, stale)
            notices.append((p.watcher, target, p.last_seen))
        before = gateway.stats["notices_enqueued"]
        gateway._queue_notices(notices)
        return gateway.stats["notices_enqueued"] - before

    def _refresh_claim(self, key: str) -> None:
        holder = sql.claimant(self._gateway.store.db, key)
        if holder is None:
            self._elsewhere.pop(key, None)
            self._mine.discard(key)
        elif holder[0] == self.server_id:
            self._mine.add(key)
            self._elsewhere.pop(key, None)
        else:
            if key in self._mine:
                log.info("session %s was attached by server %s (generation %d)", key, holder[0], holder[1])
            self._mine.discard(key)
            self._elsewhere[key] = holder[0]


