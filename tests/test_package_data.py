"""What the wheel carries is all the package reads: no module finds a file beside the package
(the spec, the committed model, the reference's adapter come as package data), so every command
works from an installed wheel outside a checkout (scripts/wheel-check runs them there in CI)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import sessionstate
from sessionstate.verify import specfiles

PACKAGE = Path(sessionstate.__file__).resolve().parent
ROOT = PACKAGE.parent


def _file_relative_paths(tree: ast.AST):
    """Each expression built on ``__file__``: how many directories it climbs."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "parents" and "__file__" in ast.unparse(node.value):
            index = node.slice
            yield (index.value + 1) if isinstance(index, ast.Constant) else None
        elif isinstance(node, ast.Attribute) and node.attr == "parent" and "__file__" in ast.unparse(node):
            yield ast.unparse(node).count(".parent")


def test_no_module_reads_a_file_outside_the_package():
    escapes = []
    for path in PACKAGE.rglob("*.py"):
        depth = len(path.relative_to(PACKAGE).parts) - 1  # directories between the module and the package root
        for climbed in _file_relative_paths(ast.parse(path.read_text(encoding="utf-8"))):
            if climbed is None or climbed > depth + 1:  # depth + 1 climbs reach the package root itself
                escapes.append(f"{path.relative_to(ROOT)} climbs {climbed} directories")
    assert not escapes, escapes


def test_the_check_catches_a_module_that_climbs_out():
    # what verify/promela_kinds.py did: from sessionstate/verify/, three directories up is the checkout
    climbing = ast.parse('SPEC = Path(__file__).resolve().parents[2] / "spec"')
    assert list(_file_relative_paths(climbing)) == [3] and 3 > 1 + 1
    assert list(_file_relative_paths(ast.parse('HERE = Path(__file__).resolve().parent / "x"'))) == [1]


def test_the_spec_and_the_committed_model_are_package_data():
    assert specfiles.PROTOCOL.is_file() and specfiles.MODEL.is_file()
    assert specfiles.SPEC_DIR == PACKAGE / "spec"
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert {"spec/notice-protocol.md", "spec/notice-protocol.pml"} <= set(declared["sessionstate"])
    # In a checkout the package's spec is the top-level spec/ the maintainers edit, not a copy.
    assert specfiles.PROTOCOL.resolve() == (ROOT / "spec" / "notice-protocol.md").resolve()
