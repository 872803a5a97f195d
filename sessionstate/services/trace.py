"""The protocol trace: what a running gateway did, one JSON line per step (spec section 15).

A ``Tracer`` is attached to one gateway and its store. The gateway reports each step while its
transaction is open; the tracer buffers the lines and writes them with one ``write`` on an
``O_APPEND`` descriptor after the outermost commit, so a rolled-back transaction (or savepoint)
never reaches the file. Each committed batch gets the next transaction number of this gateway
and its commit key: the log's sequence high-water mark read just before the commit, while the
write lock is held. The tracer learns of transactions and of lines leaving the notice queue
through their observation hooks (``store.observe_transactions``, ``queue.observe_removals``):
nothing is patched. ``sessionstate replay`` (``verify/trace_check.py``) merges several
processes' traces on these two numbers.

Lines are built with f-strings rather than ``json.dumps`` of a dict: the event path writes
three of them per event and the budget is a fraction of an append.
"""

from __future__ import annotations

import itertools
from json.encoder import encode_basestring_ascii
import os
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence

from sqlalchemy.engine import make_url

from ..shared.formats import TRACE_VERSION
from ..statemachine.machine import TRANSITION_TABLE
from ..statemachine.positions import derive_state
from ..store.contract import TransactionObserver
from .notice.queue import QueuedEvent

ENV_TRACE = "SESSIONSTATE_TRACE"

PositionsLike = tuple[int, int, int]


class TracedStore(Protocol):
    """What the tracer needs of a store: its unit of work's hooks and the sequence high-water mark."""

    url: str

    def observe_transactions(self, observer: TransactionObserver) -> None: ...

    def sequence_high_water(self) -> int: ...


class TracedQueue(Protocol):
    """What the tracer needs of the notice queue: to be told of every line that leaves it."""

    def observe_removals(self, observer: Callable[[str, list[QueuedEvent]], None]) -> None: ...


def trace_path(explicit: str | os.PathLike[str] | None) -> Path | None:
    """The trace file: the one given, else ``$SESSIONSTATE_TRACE``, else none (tracing off)."""
    if explicit is not None:
        return Path(explicit)
    configured = os.environ.get(ENV_TRACE)
    return Path(configured) if configured else None


# The process's batch counter, shared by all its gateways: orders batches within a process,
# which the commit key alone does not when no event was committed in between.
_process_batches = itertools.count(1)

# JSON string literals (ASCII, as json.dumps writes them), by the C encoder json.dumps uses.
_escape: Callable[[str], str] = encode_basestring_ascii
_quote = lru_cache(maxsize=65_536)(_escape)  # keys repeat on every event: escape each once


def _pos(positions: PositionsLike | None) -> str:
    return "null" if positions is None else f"[{positions[0]},{positions[1]},{positions[2]}]"


@lru_cache(maxsize=65_536)
def _target(target: tuple[str, str]) -> str:
    return f"[{_quote(target[0])},{_quote(target[1])}]"


def _opt(text: str | None) -> str:
    return "null" if text is None else _quote(text)


class Tracer:
    """Buffers the steps of the open transaction; writes them after the outermost commit."""

    def __init__(
        self, path: str | os.PathLike[str], store: TracedStore, queue: TracedQueue | None = None
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._store = store
        self._buffer: list[str] = []  # line bodies (after the common prefix)
        self._depth = 0
        self._last_sequence = 0  # the last event sequence buffered in this transaction (0: none)
        self._notices_follow = False
        self._held: list[str] = []  # a committed batch waiting for its notices
        self._tx = 0
        self._commit_key = 0
        self._pending_key = 0  # the commit key of the transaction being committed
        # A gateway instance, not only a process: one process may open several gateways.
        self._head = f'{{"v":{TRACE_VERSION},"pid":{os.getpid()},"gw":"{secrets.token_hex(4)}",'
        self._marks: list[int] = []  # the buffer's length where each open level began
        # The store's transactions are where "after the commit" is decided, also for the
        # transactions that extensions open on the store directly: the unit of work tells
        # its observers of every level (an untraced store has none and pays nothing).
        store.observe_transactions(self)
        if queue is not None:
            queue.observe_removals(self._unqueued)
        url = make_url(store.url)  # the database's name goes on record, never a password
        self._write_now(
            f'"op":"open","backend":{_quote(url.get_backend_name())},'
            f'"db":{_quote(url.render_as_string(hide_password=True))}}}',
            store.sequence_high_water(),
        )

    # -- what the gateway reports -------------------------------------------------------------

    def event(
        self,
        sequence: int,
        target: tuple[str, str],
        kind: str,
        actor_type: str,
        actor: str | None,
        *,
        notices_follow: bool = False,
    ) -> None:
        """An inserted event. ``notices_follow``: the caller hands this commit's notices to
        ``notices`` right after it, so the batch waits for them and goes out in one write."""
        self._last_sequence = sequence
        self._notices_follow = self._notices_follow or notices_follow
        self._buffer.append(
            f'"op":"event","seq":{sequence},"session":{_target(target)},"kind":"{kind}",'
            f'"actor_type":"{actor_type}","actor":{_opt(actor)}}}'
        )

    def step(
        self,
        watcher: str,
        target: tuple[str, str],
        trigger: str,
        sequence: int | None,
        before: PositionsLike | None,
        after: PositionsLike | None,
        notice_since: int | None,
        *,
        kind: str | None = None,
        actor: str | None = None,
        delivered: str | None = None,
        provenance: str | None = None,
    ) -> None:
        # The effect is named from the table for the reader's benefit; replay recomputes it.
        effect = TRANSITION_TABLE[(derive_state(before), trigger)][1]
        if notice_since is not None:
            self._notices_follow = True  # the caller queues it right after the commit
        extra = ""
        if kind is not None:
            extra = f',"kind":"{kind}","actor":{_opt(actor)}'
        if delivered is not None:
            extra += f',"delivered":{_escape(delivered)}'
        if provenance is not None:  # seeds (R25)
            extra += f',"provenance":"{provenance}"'
        self._buffer.append(
            f'"op":"step","watcher":{_quote(watcher)},"target":{_target(target)},"trigger":"{trigger}",'
            f'"seq":{"null" if sequence is None else sequence},"before":{_pos(before)},"after":{_pos(after)},'
            f'"effect":"{effect}","notice":{"null" if notice_since is None else notice_since}{extra}}}'
        )

    def event_steps(
        self,
        target: tuple[str, str],
        trigger: str,
        sequence: int,
        kind: str,
        actor: str | None,
        old: Sequence[tuple[Any, ...]],
        new: Sequence[tuple[str, PositionsLike | None, int | None]],
    ) -> None:
        """``step`` for every watcher one event fired ``trigger`` on: the event hot path, so
        the parts the lines share are formatted once."""
        common = f'"target":{_target(target)},"trigger":"{trigger}","seq":{sequence},'
        tail = f',"kind":"{kind}","actor":{_opt(actor)}}}'
        effects: dict[PositionsLike, str] = {}  # rows repeat positions: derive each state once
        append = self._buffer.append
        for row, (_, after, since) in zip(old, new):
            watcher, before = row[0], row[1]  # (watcher, positions, ...): the store's rows as read
            effect = effects.get(before)
            if effect is None:
                effect = effects[before] = TRANSITION_TABLE[(derive_state(before), trigger)][1]
            if since is None:
                notice = "null"
            else:
                notice = str(since)
                self._notices_follow = True
            after_text = "null" if after is None else f"[{after[0]},{after[1]},{after[2]}]"
            append(
                f'"op":"step","watcher":{_quote(watcher)},{common}"before":[{before[0]},{before[1]},{before[2]}],'
                f'"after":{after_text},"effect":"{effect}","notice":{notice}{tail}'
            )

    def notices(self, handed: list[tuple[str, tuple[str, str], str, bool, bool]]) -> None:
        """Notices handed to the queue, as ``(watcher, target, text, queued, served)``;
        ``queued`` is false when the queue already held the text (R5) or when this process
        does not serve the watcher (``served`` false, R19)."""
        self._after_commit([
            f'"op":"notice","watcher":{_quote(watcher)},"target":{_target(target)},"text":{_escape(text)},'
            f'"queued":{"true" if queued else "false"},"served":{"true" if served else "false"}}}'
            for watcher, target, text, queued, served in handed
        ], release=True)

    def wake(self, watcher: str, at: float, window: float, due: float | None) -> None:
        """``on_wake`` was called (R12, R23): after the lines that asked for it, or by the
        timer for an owed wake that fell due at ``due``; ``at`` is the gateway clock's time."""
        self._after_commit([
            f'"op":"wake","watcher":{_quote(watcher)},"at":{at!r},"window":{window!r},'
            f'"owed":{"true" if due is not None else "false"},"due":{"null" if due is None else repr(due)}}}'
        ], release=False)

    def _unqueued(self, session_key: str, removed: list[QueuedEvent]) -> None:
        """Trace every notice leaving the queue (drained, withdrawn, cleared, found stale),
        whichever code removes it."""
        gone = [e for e in removed if e.target is not None]
        if gone:
            self._after_commit([
                f'"op":"unqueue","watcher":{_quote(session_key)},"target":{_target(e.target)},'
                f'"text":{_escape(e.text)}}}'
                for e in gone
                if e.target is not None
            ], release=False)

    def reset(self, watcher: str) -> None:
        self._buffer.append(f'"op":"reset","session":{_quote(watcher)}}}')

    def delete(self, session: tuple[str, str]) -> None:
        self._buffer.append(f'"op":"delete","session":{_target(session)}}}')

    def sweep(self, count: int) -> None:
        self._buffer.append(f'"op":"sweep","count":{count}}}')

    def prune(
        self,
        heads: Iterable[tuple[str, str, int]],
        cursors: Iterable[tuple[str, str, str, PositionsLike]],
        deleted: int,
    ) -> None:
        """One pruning chunk: the pruned watermarks and the pending cursors' rows it wrote (R7, R13)."""
        head_rows = ",".join(f"[{_quote(k)},{_quote(a)},{m}]" for k, a, m in heads)
        cursor_rows = ",".join(f"[{_quote(w)},{_quote(k)},{_quote(a)},{_pos(p)}]" for w, k, a, p in cursors)
        self._buffer.append(f'"op":"prune","heads":[{head_rows}],"cursors":[{cursor_rows}],"deleted":{deleted}}}')

    def close(self) -> None:
        if self._fd is None:
            return
        if self._depth:  # closed inside a transaction: what it buffered never commits
            del self._buffer[:]
        self._release_held()
        self._tx += 1  # a batch of its own, after the notices of the last commit
        self._write(['"op":"close"}'], self._tx, self._commit_key)
        os.close(self._fd)
        self._fd = None

    # -- the unit of work's hooks (store.observe_transactions) --------------------------------

    def begun(self, outermost: bool) -> None:
        self._marks.append(len(self._buffer))
        if outermost:
            self._last_sequence = 0
            self._notices_follow = False
            self._release_held()  # defensive: a held batch whose notices never came
        self._depth += 1

    def committing(self) -> None:
        if not self._marks or not self._buffer:
            return
        try:
            # Read under the write lock, before COMMIT: every batch committed earlier by any
            # process has a key <= this one, every later one >= (spec 15.2). When the
            # transaction assigned sequences, its last one is that mark: no read needed.
            self._pending_key = self._last_sequence or self._store.sequence_high_water()
        except BaseException:
            del self._buffer[:]  # the transaction rolls back instead of committing
            raise

    def ended(self, committed: bool, outermost: bool) -> None:
        if not self._marks:  # a level that began before this tracer was attached
            return
        self._depth -= 1
        mark = self._marks.pop()
        if not committed:
            del self._buffer[mark:]
            self._last_sequence = 0  # a rolled-back level's sequences are handed out again
            if outermost:
                self._notices_follow = False
        elif outermost and self._buffer:
            # Before the commit's after-commit callbacks: the batch goes out before the
            # notices they hand over (``notices``).
            self._flush(self._pending_key)

    # -- batching -----------------------------------------------------------------------------

    def _after_commit(self, bodies: list[str], *, release: bool) -> None:
        """Queue lines: part of the open transaction's batch; else of the batch committed just
        before (held for them); else a batch of their own, keyed by the high-water mark now."""
        if release:
            self._notices_follow = False
        if not bodies and not (release and self._held):
            return
        if self._depth:
            self._buffer.extend(bodies)
            return
        if self._held:
            self._held.extend(bodies)
            if release:
                self._release_held()
            return
        self._tx += 1
        self._commit_key = self._store.sequence_high_water()
        self._write(bodies, self._tx, self._commit_key)

    def _release_held(self) -> None:
        if self._held:
            lines, self._held = self._held, []
            self._write(lines, self._tx, self._commit_key)

    def _write_now(self, body: str, commit_key: int) -> None:
        self._commit_key = commit_key
        self._write([body], self._tx, commit_key)

    def _flush(self, commit_key: int) -> None:
        self._tx += 1
        self._commit_key = commit_key
        lines, self._buffer = self._buffer, []
        if self._notices_follow:
            self._held = lines  # written with the notices, one write (``notices``)
        else:
            self._write(lines, self._tx, commit_key)

    def _write(self, bodies: list[str], tx: int, commit_key: int) -> None:
        if self._fd is None:
            return
        prefix = f'{self._head}"n":{next(_process_batches)},"tx":{tx},"c":{commit_key},'
        data = (prefix + ("\n" + prefix).join(bodies) + "\n").encode("utf-8")
        # One write per batch: with O_APPEND, batches of processes sharing a file do not mix.
        written = os.write(self._fd, data)
        while written < len(data):  # only a full disk or a signal splits a write to a file
            data = data[written:]
            written = os.write(self._fd, data)
