"""The backend factory's promise to CI: a PostgreSQL test without a server skips on a
developer's quick run and fails where SESSIONSTATE_REQUIRE_PG=1 (``.ci/run``) or CI=true."""

from __future__ import annotations

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
