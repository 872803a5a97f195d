"""Known fault-handling bugs, seeded back by name into a nemesis worker (never into the package).

``SESSIONSTATE_NEMESIS_BUG=NAME`` in a worker's environment makes ``apply`` replace one named
function of the package, in that process only, with the buggy version the project once had or
could have. The nemesis must fail on each (``tests/trials/test_nemesis.py``):

- ``stalled-claim`` (R20): a server that finds its own row removed (it stalled past its lease)
  takes back every claim it held, including the ones another server attached meanwhile.
- ``guessed-drain`` (R29): a drain whose COMMIT answer was lost is taken as committed without
  asking the server (its lines returned, although the server may have rolled it back).
- ``notify-rides`` (R22): a transaction that rolls back keeps its pending ``NOTIFY`` payload,
  which then rides the connection's next commit (other servers hear of events that never were).
"""

from __future__ import annotations

import os
import socket

BUG_ENV = "SESSIONSTATE_NEMESIS_BUG"
BUGS = ("stalled-claim", "guessed-drain", "notify-rides")
BACKENDS = {"stalled-claim": ("sqlite", "postgres"), "guessed-drain": ("postgres",), "notify-rides": ("postgres",)}


def apply(name: str | None = None) -> str | None:
    """Seed the bug named by ``name`` (default: ``$SESSIONSTATE_NEMESIS_BUG``); returns it."""
    name = name if name is not None else os.environ.get(BUG_ENV) or None
    if name is None:
        return None
    if name not in BUGS:
        raise SystemExit(f"unknown seeded bug {name!r}: one of {', '.join(BUGS)}")
    {"stalled-claim": _stalled_claim, "guessed-drain": _guessed_drain, "notify-rides": _notify_rides}[name]()
    return name


def _stalled_claim() -> None:
    import functools
    import time

    from sessionstate.services import cluster

    def heartbeat(self: cluster.Cluster) -> None:  # cluster.Cluster.heartbeat, with R20's check taken out
        if self.server_id is None:
            return
        store = self._sink.store
        with store.lock:
            now = time.time()
            with store.transaction():
                if not store.serving.heartbeat(self.server_id, now):
                    store.serving.register_server(self.server_id, os.getpid(), socket.gethostname(), now)
                    for key in sorted(self._mine | self._lost):  # the bug: whoever attached it since
                        store.serving.claim(key, self.server_id, self._sink.clock())
                        if key not in self._mine:
                            store.after_commit(functools.partial(self._claimed, key))
                lost = set(self._lost)
                store.after_commit(lambda: self._lost.difference_update(lost))
                for dead in store.serving.dead_servers(now - cluster.LEASE_SECONDS):
                    if dead != self.server_id:
                        store.serving.remove_server(dead, self._sink.clock())

    cluster.Cluster.heartbeat = heartbeat  # type: ignore[method-assign]


def _guessed_drain() -> None:
    from sessionstate.store import commit_outcome

    original = commit_outcome.settle

    def settle(connect, txid, began_on, witness, appended):
        if witness is not None:
            return commit_outcome.COMMITTED  # the bug: a guess, the server never asked
        return original(connect, txid, began_on, witness, appended)

    commit_outcome.settle = settle


def _notify_rides() -> None:
    from sessionstate.store.postgres import PostgresStore

    def forget(self: PostgresStore) -> None:  # PostgresStore._forget_transaction, keeping the NOTIFY
        self._txid, self._appended_rows = None, []
        self.witness.wanted = False
        self._after_commit = []
        self._locked.clear()

    PostgresStore._forget_transaction = forget  # type: ignore[method-assign]
