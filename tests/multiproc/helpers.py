"""What the serving and pump tests share: three main sessions of three agents, W and W2 watching
T, made on a database by ``populate``, and the human line on T that owes both a notice; and the
check for the PostgreSQL server binaries the failover tests need."""

from __future__ import annotations

import os

from sessionstate import Gateway

W, T, W2 = "agent:a:main", "agent:b:main", "agent:c:main"


# Each session logs its own `created` first (R27): W is 1, T is 2, so a watch of T made after
# both starts at 2, and its first notice says changesSince 2.
SEED = 2


def populate(url: str) -> str:
    with Gateway.open(url) as gw:
        for key in (W, T, W2):
            gw.create_session(key)
        gw.watch(W, T)
        gw.watch(W2, T)
        assert gw.ops.cursor_positions(W, T).last_seen == SEED
    return url


def human(gw: Gateway) -> int:
    sequence = gw.record_event(T, "human_direct_message", actor_type="human", summary="hi")
    assert sequence is not None
    return sequence


def need_servers() -> None:
    from tests.backends import need_psycopg, skip_or_fail_without_postgres
    from trials.pgpair import server_binaries

    if os.environ.get("SESSIONSTATE_TEST_PG") == "off":
        skip_or_fail_without_postgres("SESSIONSTATE_TEST_PG=off: no PostgreSQL servers for the failover trial")
    binaries = server_binaries()
    if binaries is None or not (binaries / "pg_basebackup").exists():
        skip_or_fail_without_postgres("no PostgreSQL server binaries (apt-get install postgresql)")
    need_psycopg()
