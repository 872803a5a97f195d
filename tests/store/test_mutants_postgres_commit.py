"""R29 for a batch (group commit) on PostgreSQL: the batch's append returns its transaction's
id, and a commit whose answer is lost is resolved by that id. tests/store/test_commit_outcome.py
covers a lone event, a drain and a claim; a mutmut run showed no test resolved a batch's
(docs/mutants/store-postgres.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.engine import make_url

from sessionstate import Gateway
from sessionstate.store.commit_outcome import ABORTED, COMMITTED
from trials.pgproxy import AFTER_COMMIT, BEFORE_COMMIT, CommitDroppingProxy

KEYS = ("agent:main:one", "agent:main:two")


@pytest.fixture
def through_proxy(pg_url: str) -> Iterator[tuple[str, CommitDroppingProxy]]:
    """The test server's URL through a proxy that can cut a COMMIT or its answer off."""
    url = make_url(pg_url)
    host = url.query["host"]
    proxy = CommitDroppingProxy(host if isinstance(host, str) else host[0])
    try:
        yield url.update_query_dict({"host": proxy.directory}).render_as_string(hide_password=False), proxy
    finally:
        proxy.close()


@pytest.mark.parametrize("mode, outcome", [(AFTER_COMMIT, COMMITTED), (BEFORE_COMMIT, ABORTED)])
def test_a_batch_whose_commit_answer_is_lost_is_resolved_by_its_own_transaction(through_proxy, mode, outcome):
    url, proxy = through_proxy
    gw = Gateway.open(url, record_created=False, notify_on_create=False)
    try:
        for key in KEYS:
            gw.create_session(key)
        events = [{"session_key": key, "kind": "compacted", "actor_type": "system", "summary": f"batch {i}"}
                  for i, key in enumerate(KEYS * 2)]
        proxy.arm(mode)
        sequences = gw.record_events(events)
        assert proxy.dropped == 1
        assert gw.store.commit_resolutions[outcome] == 1  # type: ignore[attr-defined]
        assert None not in sequences, "resolved: acknowledged, not reported as failed"
        stored = [e.sequence for key in KEYS for e in gw.store.events_after(key, "main", 0, 10)]
        assert sorted(stored) == sorted(sequences)  # each stored once
    finally:
        gw.close()
