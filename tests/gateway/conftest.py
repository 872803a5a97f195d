"""The fixtures the wake tests share: the fake clock a gateway is opened with, and the list its
``on_wake`` hook appends (watcher, reason, the clock's time) to."""

from __future__ import annotations

import pytest

from tests.helpers import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def wakes() -> list[tuple[str, str, float]]:
    return []
