"""``./dev trials`` runs the trials end to end on the backend asked for, and reports."""

from __future__ import annotations

import io

from trials import runner


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = runner.run_trials(runner.parser().parse_args(argv), out)
    return code, out.getvalue()


def test_the_trials_run_on_the_backend_of_db(db_url):
    # On PostgreSQL every trial gets a fresh schema in that database; on SQLite, files beside it.
    code, text = run(["--fast", "--only", "crash", "--only", "concurrency", "--only", "threads", "--only", "ordering",
                      "--crash-trials", "1", "--events", "60", "--db", db_url])
    assert code == 0, text
    where = "fresh schemas in postgresql+psycopg://" if db_url.startswith("postgresql") else "temporary SQLite files beside"
    for needle in (where, "crash: 1 SIGKILL trials", "concurrency: 2 processes x 60 events",
                   "threads: 8 threads and 4 coroutines x 30 calls on one gateway",
                   "ordering: 4 writer processes x 6 events", "all trials passed"):
        assert needle in text, text


def test_the_restart_trials_run_on_a_throwaway_postgresql_server():
    import pytest

    from trials.pgserver import server_binaries

    from tests.backends import need_psycopg, skip_or_fail_without_postgres

    if server_binaries() is None:
        skip_or_fail_without_postgres("no PostgreSQL server binaries")
    need_psycopg()
    code, text = run(["--fast", "--only", "restart"])
    assert code == 0, text
    assert "restart: 1 immediate restarts of PostgreSQL" in text and "all trials passed" in text
