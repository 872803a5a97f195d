#!/usr/bin/env python3
"""Make the services' ``@locked`` methods reachable by mutmut, in mutmut's scratch copy only.

mutmut 3 leaves every decorated function unmutated (but ``staticmethod``/``classmethod``): it
cannot put its trampoline under a decorator. In ``services/`` 58 methods are ``@locked`` (the
store's lock around a public method), so most of the registry, the turns, the cursor
lifecycle and the protocol's entry points would never be mutated. This rewrite moves the lock
from the decorator to an assignment after the class — ``Registry.meta_of =
locked(Registry.meta_of)`` — which is the same method under the same lock, and leaves mutmut a
plain function to mutate. Only a lone ``@locked`` on a method of a module-level class is moved.

    scripts/mutmut_unwrap_locked.py FILE...   (rewrites each FILE in place; prints how many moved)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def unwrap(source: str) -> tuple[str, int]:
    """The source with each lone ``@locked`` decorator line removed and re-applied after its
    class, and how many methods moved."""
    tree = ast.parse(source)
    drop: set[int] = set()
    after_class: dict[int, list[str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if (isinstance(item, ast.FunctionDef) and len(item.decorator_list) == 1
                    and isinstance(item.decorator_list[0], ast.Name) and item.decorator_list[0].id == "locked"):
                drop.add(item.decorator_list[0].lineno)
                after_class.setdefault(node.end_lineno or node.lineno, []).append(
                    f"{node.name}.{item.name} = locked({node.name}.{item.name})  # type: ignore[method-assign]")
    lines = source.splitlines()
    out: list[str] = []
    for number, line in enumerate(lines, start=1):
        if number in drop:
            assert line.strip() == "@locked", (number, line)
            continue
        out.append(line)
        if number in after_class:
            out.extend(["", "", *after_class[number]])
    return "\n".join(out) + "\n", len(drop)


def main(paths: list[str]) -> int:
    total = 0
    for name in paths:
        path = Path(name)
        text, moved = unwrap(path.read_text())
        if moved:
            path.write_text(text)
        total += moved
    print(f"mutmut_unwrap_locked: {total} @locked method(s) moved after their class in {len(paths)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
