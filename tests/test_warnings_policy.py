"""The suite's warning policy (pyproject.toml, ``[tool.pytest.ini_options] filterwarnings``):
a ``DeprecationWarning`` caused by project code fails the test that caused it; one inside a
library is only reported. Each check here fails when its filter line is removed
(the warning is then only recorded, and ``pytest.raises`` sees nothing)."""

from __future__ import annotations

import warnings

import pytest


def test_a_deprecation_in_a_test_module_is_an_error() -> None:
    assert __name__.startswith("tests.")  # what the filter's module field matches
    with pytest.raises(DeprecationWarning):
        warnings.warn("an old call in a test", DeprecationWarning)


@pytest.mark.parametrize("module", ["sessionstate", "trials.spinworld", "tests.gateway.test_aio"])
def test_a_deprecation_attributed_to_project_code_is_an_error(module: str) -> None:
    with pytest.raises(DeprecationWarning):
        warnings.warn_explicit("an old call", DeprecationWarning, "x.py", 1, module=module)


def test_a_deprecation_inside_a_library_only_warns() -> None:
    # the control: the filters go by attribution; a library's own deprecations are reported
    with warnings.catch_warnings(record=True) as seen:  # the active filters, recording
        warnings.warn_explicit("a library's old call", DeprecationWarning, "lib.py", 1, module="somelibrary.part")
    assert [str(w.message) for w in seen] == ["a library's old call"]
