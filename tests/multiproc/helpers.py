"""The check for the PostgreSQL server binaries the failover tests need."""

from __future__ import annotations

import os


def need_servers() -> None:
    from tests.backends import need_psycopg, skip_or_fail_without_postgres
    from trials.pgpair import server_binaries

    if os.environ.get("SESSIONSTATE_TEST_PG") == "off":
        skip_or_fail_without_postgres("SESSIONSTATE_TEST_PG=off: no PostgreSQL servers for the failover trial")
    binaries = server_binaries()
    if binaries is None or not (binaries / "pg_basebackup").exists():
        skip_or_fail_without_postgres("no PostgreSQL server binaries (apt-get install postgresql)")
    need_psycopg()
