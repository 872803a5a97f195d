"""The storage backends the backend-parametrised tests run on: one factory per backend.

A factory is a context manager that yields the URL of a fresh, empty database and removes it
afterwards (the shape Hypothesis uses for its example databases: the test asks for a database,
the factory decides what that means). The ``backend`` and ``db_url`` fixtures (tests/conftest.py),
the stateful tests and the store conformance suite (tests/store/test_conformance.py) all take
their databases from ``BACKENDS``: adding a backend to the whole suite is adding one entry.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Backend:
    name: str
    # A fresh empty database's URL for the duration of the block.
    database: Callable[[], AbstractContextManager[str]]


@contextmanager
def sqlite_database() -> Iterator[str]:
    directory = Path(tempfile.mkdtemp(prefix="sessionstate-test-"))
    try:
        yield f"sqlite:///{directory / 'state.db'}"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


BACKENDS: list[Backend] = [
    Backend("sqlite", sqlite_database),
]


def backend_params() -> list[object]:
    """``pytest.mark.parametrize`` values, one per backend, named after it."""
    return [pytest.param(backend, id=backend.name) for backend in BACKENDS]


def stateful_test_cases(machine: type, name: str) -> dict[str, type]:
    """One ``unittest`` TestCase per backend for a Hypothesis state machine whose class
    attribute ``backend`` says where it opens its database; ``globals().update(...)`` them."""
    cases = {}
    for backend in BACKENDS:
        bound = type(f"{machine.__name__}_{backend.name}", (machine,), {"backend": backend})
        cases[f"Test{name}_{backend.name}"] = bound.TestCase  # type: ignore[attr-defined]
    return cases
