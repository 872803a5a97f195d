"""The backend factory's promise to CI: a PostgreSQL test without a server skips on a
developer's quick run and fails where SESSIONSTATE_REQUIRE_PG=1 (``.ci/run``) or CI=true."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import backends


@pytest.fixture
def no_server(monkeypatch):
    monkeypatch.delenv(backends.PG_URL_ENV, raising=False)
    monkeypatch.delenv(backends.REQUIRE_PG_ENV, raising=False)
    monkeypatch.delenv("CI", raising=False)
    return monkeypatch


def test_without_a_server_a_postgres_test_skips(no_server):
    with pytest.raises(pytest.skip.Exception, match=backends.PG_URL_ENV):
        with backends.postgres_database():
            pass


@pytest.mark.parametrize("variable", [backends.REQUIRE_PG_ENV, "CI"])
def test_where_postgres_is_required_a_missing_server_fails(no_server, variable):
    no_server.setenv(variable, "1" if variable == backends.REQUIRE_PG_ENV else "true")
    with pytest.raises(pytest.fail.Exception, match="required here"):
        with backends.postgres_database():
            pass


def test_ci_requires_postgres_and_starts_the_server():
    script = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "export SESSIONSTATE_REQUIRE_PG=1" in script
    assert "scripts/pg-test-server run" in script and "./dev test" in script


ROOT = Path(__file__).resolve().parents[1]
ONE_PG_TEST = "tests/store/test_postgres_store.py"


def _dev_test(env_changes: dict[str, str | None], *pytest_args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in env_changes}
    env.update({k: v for k, v in env_changes.items() if v is not None})
    return subprocess.run([str(ROOT / "dev"), "test", "-q", "-p", "no:cacheprovider", *pytest_args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _pg_obtainable() -> bool:
    return os.geteuid() == 0 or bool(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or bool(shutil.which("initdb"))


def test_dev_test_starts_a_throwaway_server_itself_and_stops_it():
    if not _pg_obtainable():
        backends.skip_or_fail_without_postgres("no PostgreSQL binaries and not root to install them")
    # The server's directory goes where the postgres user can reach it (pytest's tmp_path cannot be).
    scratch = Path(tempfile.mkdtemp(prefix="sessionstate-devtest-"))
    scratch.chmod(0o755)
    try:
        # REQUIRE_PG: a PostgreSQL test that found no server would fail, not skip.
        run = _dev_test({backends.PG_URL_ENV: None, "SESSIONSTATE_TEST_PG": None, "TMPDIR": str(scratch),
                         backends.REQUIRE_PG_ENV: "1"}, ONE_PG_TEST, "-k", "refused or driver_name")
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        assert "throwaway PostgreSQL server up" in run.stderr
        assert "skipped" not in run.stdout.strip().splitlines()[-1]
        assert not list(scratch.glob("sessionstate-pg.*")), "the server's directory outlived the run"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_dev_test_uses_a_given_server_instead_of_starting_one():
    # An unreachable URL: the run must try it (and fail), not start a server of its own.
    run = _dev_test({backends.PG_URL_ENV: "postgresql+psycopg://nobody@/none?host=/nonexistent",
                     "SESSIONSTATE_TEST_PG": None}, ONE_PG_TEST, "-x", "-k", "refused or driver_name")
    assert "throwaway PostgreSQL server up" not in run.stderr
    assert run.returncode != 0


def test_without_a_server_the_run_ends_with_one_line_saying_so():
    run = _dev_test({backends.PG_URL_ENV: None, "SESSIONSTATE_TEST_PG": "off", backends.REQUIRE_PG_ENV: None,
                     "CI": None}, ONE_PG_TEST)
    assert run.returncode == 0, run.stdout[-2000:]
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith("PostgreSQL half skipped (") and "SESSIONSTATE_TEST_PG=off" in last, last


def test_the_closing_line_for_a_machine_without_postgres_names_what_runs_it(monkeypatch):
    monkeypatch.delenv("SESSIONSTATE_TEST_PG", raising=False)

    class Report:
        longrepr = ("file.py", 1, f"Skipped: {backends.SKIP_REASON}")

    line = backends.postgres_skip_summary([Report()])
    assert line == f"PostgreSQL half skipped (1 tests, no server): {backends.PG_RUN_COMMAND}"
    assert "apt-get install postgresql" in line and backends.PG_URL_ENV in line


def test_the_closing_line_counts_only_tests_skipped_for_want_of_a_server():
    class Report:
        def __init__(self, reason: str) -> None:
            self.longrepr = ("file.py", 1, f"Skipped: {reason}")

    assert backends.postgres_skip_summary([Report("needs spin")]) is None
    line = backends.postgres_skip_summary([Report(backends.SKIP_REASON), Report("other"), Report(backends.SKIP_REASON)])
    assert line is not None and line.startswith("PostgreSQL half skipped (2 tests")


@pytest.mark.parametrize("variable", [backends.REQUIRE_PG_ENV, "CI"])
def test_the_shared_skip_fails_where_postgres_is_required(monkeypatch, variable):
    monkeypatch.delenv(backends.REQUIRE_PG_ENV, raising=False)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        backends.skip_or_fail_without_postgres("no server")
    monkeypatch.setenv(variable, "1" if variable == backends.REQUIRE_PG_ENV else "true")
    with pytest.raises(pytest.fail.Exception, match="required here"):
        backends.skip_or_fail_without_postgres("no server")
