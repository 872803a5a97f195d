"""Two gateways creating one session at once: the one that loses the race is told
``SessionExists``, as it would be a moment later, never an untyped storage error (spec 13:
typed failures; bad input raises, R15).

Found by the nemesis's long run on PostgreSQL (``./dev trials --only nemesis --seed 90210
--nemesis-backend pgpair --nemesis-seconds 600``; docs/nemesis.md), 24 times in 600 s: its
workers delete and re-create the churn sessions. The loser looks for the session before its
write transaction holds the lock, finds none, and its insert then fails on the sessions'
primary key: PostgreSQL's ``duplicate key value violates unique constraint "sessions_pkey"``,
SQLite's ``UNIQUE constraint failed``, both a plain ``StorageError``. Fixed (spec 13, a race to
create one session): the insert skips a row already there and the loser raises
``SessionExists``.
"""

from __future__ import annotations

import threading
import time

from sessionstate import Gateway
from sessionstate.errors import SessionExists

K = "agent:k:main"


def test_the_loser_of_a_create_race_is_told_the_session_exists(db_url):
    with Gateway.open(db_url) as winner, Gateway.open(db_url) as loser:
        raised: list[BaseException] = []

        def create() -> None:
            try:
                loser.create_session(K)
            except BaseException as exc:  # what it was told, whatever it is
                raised.append(exc)

        other = threading.Thread(target=create)
        with winner.transaction():
            winner.create_session(K)
            other.start()
            time.sleep(0.5)  # the loser is waiting for the winner's commit (or its write lock)
        other.join(timeout=30)
        assert not other.is_alive()
        assert len(raised) == 1 and isinstance(raised[0], SessionExists), raised
