"""The package's public API: what ``sessionstate.__all__`` names is importable, and every
exception a caller may have to catch is among it."""

from __future__ import annotations

from types import ModuleType

import sessionstate
from sessionstate import errors


def error_classes(module: ModuleType) -> set[str]:
    """The public classes of ``module`` that are ``SessionStateError`` or below it."""
    return {
        name for name, value in vars(module).items()
        if not name.startswith("_") and isinstance(value, type) and issubclass(value, errors.SessionStateError)
    }


def test_the_error_class_finder_sees_a_new_class():
    probe = ModuleType("probe")
    probe.Refused = type("Refused", (errors.StorageError,), {})  # type: ignore[attr-defined]
    probe._Hidden = type("_Hidden", (errors.SessionStateError,), {})  # type: ignore[attr-defined]
    probe.Unrelated = type("Unrelated", (ValueError,), {})  # type: ignore[attr-defined]
    probe.SessionStateError = errors.SessionStateError  # type: ignore[attr-defined]
    assert error_classes(probe) == {"Refused", "SessionStateError"}


def test_every_error_class_is_exported():
    found = error_classes(errors)
    assert {"SessionStateError", "StorageError", "StorageConflict"} <= found
    assert sorted(found - set(sessionstate.__all__)) == []
    assert all(getattr(sessionstate, name) is getattr(errors, name) for name in found)


def test_every_name_in_all_is_defined():
    assert [name for name in sessionstate.__all__ if not hasattr(sessionstate, name)] == []
