"""The slow profile (the issue's sizes) runs only with SESSIONSTATE_SLOW=1."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("SESSIONSTATE_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow profile: set SESSIONSTATE_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
