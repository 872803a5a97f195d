"""The change feed on PostgreSQL (R22): ``LISTEN`` on a dedicated connection.

Sequences on a server are taken by concurrent transactions, so a range of the log's primary
key does not hold every newer commit (a smaller sequence may commit later) and SQLite's
watermarks would miss events. Instead every transaction that makes a change other servers
must see sends, inside that transaction, one ``NOTIFY`` naming it: the notifying events
(session, agent, actor, sequence) and the watchers whose cursors or claim changed. PostgreSQL
delivers a notification at commit, never for a rollback, and in commit order. ``take`` turns
what arrived into a change set, reading per notified event the cursors it froze.

A notification sent while the listening connection is down is lost: after reconnecting the
feed reports a resynchronisation (the fallback poll), and so does a change too large for one
notification.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import select
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from json.encoder import encode_basestring as _quote  # json.dumps's quoting (ensure_ascii=False)
from typing import Any

import psycopg

from ..errors import StorageError, StorageUnavailable
from .contract import ServingTable
from .records import ChangeSet

log = logging.getLogger("sessionstate")

CHANNEL_PREFIX = "sessionstate:"
MAX_IDENTIFIER_BYTES = 63
# PostgreSQL refuses a payload of 8,000 bytes or more.
MAX_PAYLOAD_BYTES = 7_900
RESYNC_PAYLOAD = '{"r":1}'
SYNC_TIMEOUT_SECONDS = 10.0
RECONNECT_PAUSE_SECONDS = 0.25

NotifiedEvent = tuple[str, str, "str | None", int]  # (key, agent id, actor id, sequence)


def channel_for(schema: str) -> str:
    """One channel per schema: two deployments in one database do not hear each other."""
    name = CHANNEL_PREFIX + schema
    if len(name.encode()) > MAX_IDENTIFIER_BYTES:
        name = CHANNEL_PREFIX + hashlib.sha256(schema.encode()).hexdigest()[:32]
    return name


def encode_changes(watchers: Iterable[str], events: Iterable[NotifiedEvent]) -> list[str]:
    """The payloads for one transaction's changes, each under the size limit; an item that
    cannot fit in one alone turns the whole change into one resynchronisation payload."""
    named = list(dict.fromkeys(watchers))
    listed = [list(e) for e in events]
    whole = _whole_payload(named, listed)
    if len(whole) <= MAX_PAYLOAD_BYTES // 4 or len(whole.encode()) <= MAX_PAYLOAD_BYTES:
        return [whole]  # the common case: one notification
    payloads: list[str] = []
    items: list[tuple[str, Any]] = [("w", w) for w in named]
    items += [("e", e) for e in listed]
    batch: dict[str, list[Any]] = {}
    size = 2  # "{}"
    for field, value in items:
        item_size = len(json.dumps(value, ensure_ascii=False).encode()) + 1
        opening = 0 if field in batch else len(field) + 6  # ,"w":[]
        if item_size + 12 > MAX_PAYLOAD_BYTES:
            return [RESYNC_PAYLOAD]
        if size + opening + item_size > MAX_PAYLOAD_BYTES:
            payloads.append(_dump(batch))
            batch, size, opening = {}, 2, len(field) + 6
        batch.setdefault(field, []).append(value)
        size += opening + item_size
    if batch:
        payloads.append(_dump(batch))
    return payloads


def _dump(batch: dict[str, list[Any]]) -> str:
    return json.dumps(batch, ensure_ascii=False, separators=(",", ":"))


def _whole_payload(named: list[str], listed: list[list[Any]]) -> str:
    """``_dump`` of the one-notification payload, written out by hand: this runs in every
    notifying commit, and ``json.dumps`` with these options builds an encoder per call: the
    notification's Python time on the commit path fell from ~20 to ~11 microseconds. Strings
    go through the encoder's own quoting function, so the text is the same."""
    events = '"e":[' + ",".join(map(_event_text, listed)) + "]"
    if not named:
        return "{" + events + "}"
    watchers = '"w":[' + ",".join(map(_quote, named)) + "]"
    return "{" + watchers + "," + events + "}" if listed else "{" + watchers + "}"


def _event_text(event: list[Any]) -> str:
    key, agent_id, actor_id, sequence = event
    actor = "null" if actor_id is None else _quote(actor_id)
    return "[" + _quote(key) + "," + _quote(agent_id) + "," + actor + "," + str(sequence) + "]"


def quoted_channel(channel: str) -> str:
    return '"' + channel.replace('"', '""') + '"'


def notify_prefix(channel: str) -> str:
    return "NOTIFY " + quoted_channel(channel) + ", "


def notify_statement(prefix: str, payload: str) -> str:
    """The statement for one payload. Built by hand: psycopg's composition costs more than the
    notification itself on the commit path. The literal is a standard string (the connection
    sets ``standard_conforming_strings``), and JSON text holds no NUL."""
    return prefix + "'" + payload.replace("'", "''") + "'"


class PostgresChangeFeed:
    # A notification or an interrupt ends a wait at once, so an idle wait lasts until the
    # pump's next heartbeat (5 s; the pump caps each wait there): an idle server wakes once
    # per heartbeat. Each wake-up of a thread costs the scheduler's accounting here about as
    # much as the pump's work in it.
    longest_wait = 5.0

    def __init__(
        self,
        connect: Callable[[], "psycopg.Connection[Any]"],
        channel: str,
        serving: ServingTable,
        storage_error: Callable[[BaseException], StorageError],
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._serving = serving
        self.storage_error = storage_error
        self._lock = threading.Lock()  # the listening connection: the pump's wait, a sync
        self._payloads: list[str] = []
        self._resync = False
        self._closed = False
        self.reconnects = 0
        self._conn: psycopg.Connection[Any] | None = None
        try:
            self._listen()
        except psycopg.Error as exc:
            raise storage_error(exc) from exc
        self._wake_read, self._wake_write = os.pipe()  # interrupt() ends a wait at once

    def _listen(self) -> None:
        conn = self._connect()
        try:
            conn.execute("LISTEN " + quoted_channel(self._channel))
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _receive(self, timeout: float) -> None:
        """Collect notifications for at most ``timeout`` seconds (returns at the first);
        reconnects a lost listening connection, reporting a resynchronisation."""
        conn = self._conn
        try:
            if conn is None or conn.closed or conn.broken:
                self._drop()
                self._listen()
                self.reconnects += 1
                self._resync = True  # what was sent while it was down is lost
                log.warning("change feed: listening again on %s; resynchronising", self._channel)
                return
            # Block in the kernel until the socket has data: psycopg's own timed wait wakes
            # every 100 ms, which costs an idle process 1 % of a core.
            select.select([conn.fileno(), self._wake_read], [], [], timeout)
            for notify in conn.notifies(timeout=0):  # what arrived, read to the end
                self._payloads.append(notify.payload)
        except psycopg.Error as exc:
            log.warning("change feed: the listening connection failed (%s); reconnecting", exc)
            self._drop()
            time.sleep(RECONNECT_PAUSE_SECONDS)

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass  # already gone
            self._conn = None

    def wait(self, timeout: float) -> bool:
        with self._lock:
            if self._closed:
                return False
            if not (self._payloads or self._resync):
                self._receive(timeout)
            return bool(self._payloads) or self._resync

    def take(self) -> ChangeSet:
        with self._lock:
            payloads, self._payloads = self._payloads, []
            resync, self._resync = self._resync, False
        watchers: dict[str, None] = {}
        first: dict[tuple[str, str], int] = {}  # per target, the smallest notified sequence
        material: list[tuple[str, str, str | None]] = []
        for payload in payloads:
            try:
                message = json.loads(payload)
            except ValueError:
                log.warning("change feed: an unreadable notification; resynchronising")
                resync = True
                continue
            if not isinstance(message, dict) or "r" in message:
                resync = True
                continue
            for watcher in message.get("w", ()):
                watchers[watcher] = None
            for key, agent_id, actor_id, sequence in message.get("e", ()):
                material.append((key, agent_id, actor_id))
                target = (key, agent_id)
                first[target] = min(sequence, first.get(target, sequence))
        if resync:
            return ChangeSet([], list(watchers), material, True)
        # A freeze sets N to its event's sequence: the cursors it froze have N at or above it.
        frozen = [
            p for (key, agent_id), sequence in first.items()
            for p in self._serving.frozen_on_target(key, agent_id, sequence - 1)
        ]
        return ChangeSet(frozen, list(watchers), material, False)

    def sync(self) -> None:
        """Send a marker through the server and read until it comes back: notifications are
        delivered in commit order, so everything committed before it has arrived. A lost
        listening connection is replaced once (the next ``take`` resynchronises)."""
        marker = _dump({"s": [uuid.uuid4().hex]})
        with self._lock:
            for attempt in (1, 2):
                try:
                    self._await_marker(marker)
                    return
                except psycopg.Error as exc:
                    self._drop()
                    self._resync = True
                    if attempt == 2:
                        raise self.storage_error(exc) from exc

    def _await_marker(self, marker: str) -> None:
        deadline = time.monotonic() + SYNC_TIMEOUT_SECONDS
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._receive(0)  # reconnects (and reports a resynchronisation)
        conn = self._conn
        if conn is None:
            raise StorageUnavailable(f"change feed: cannot listen on {self._channel}")
        conn.execute(notify_statement(notify_prefix(self._channel), marker))
        while time.monotonic() < deadline:
            # Each call reads whole batches (leaving a batch early would drop its rest).
            found = False
            for notify in conn.notifies(timeout=max(0.0, deadline - time.monotonic()), stop_after=1):
                if notify.payload == marker:
                    found = True
                else:
                    self._payloads.append(notify.payload)
            if found:
                return
        raise StorageUnavailable(f"change feed: the sync marker did not come back on {self._channel}")

    def backend_pid(self) -> int | None:
        """The server process of the listening connection (``None`` while it is down)."""
        conn = self._conn
        return None if conn is None or conn.closed else int(conn.info.backend_pid)

    def lost(self) -> None:
        with self._lock:
            self._resync = True

    def interrupt(self) -> None:
        self._closed = True
        if self._wake_write >= 0:
            os.write(self._wake_write, b"x")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop()
            if self._wake_read >= 0:
                os.close(self._wake_read)
                os.close(self._wake_write)
                self._wake_read = self._wake_write = -1
