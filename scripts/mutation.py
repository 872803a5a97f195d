#!/usr/bin/env python3
"""A small mutation runner for sessionstate/statemachine/ and sessionstate/store/.

Why not mutmut: mutmut 3 rewrites the package into ``mutants/`` with trampolines and needs
its own ``[tool.mutmut]`` configuration; this runner is small enough to read. It applies one
AST mutation at a time (comparison operator swaps, integer constants +/-1, boolean flips,
and/or swaps, max/min swaps, ``+``/``-`` swaps, removed call statements), writes the mutant
into a private copy of the tree, and runs the relevant tests there with a timeout. A mutant is
*killed* when the tests fail (or time out), *survived* otherwise. SQL text inside string
constants is not mutated (the store's SQL is exercised by the same tests, but its operators
are not enumerated here).

    .venv/bin/python scripts/mutation.py [--jobs 2] [--timeout 120] [--only PATH] [--json OUT]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {
    "sessionstate/statemachine/effects.py": ["tests/protocol", "tests/gateway/test_rules.py", "tests/verify/test_modelcheck.py"],
    "sessionstate/statemachine/machine.py": ["tests/protocol", "tests/gateway/test_rules.py", "tests/verify/test_modelcheck.py"],
    "sessionstate/statemachine/positions.py": ["tests/protocol", "tests/gateway/test_rules.py", "tests/verify/test_modelcheck.py"],
    "sessionstate/statemachine/table.py": ["tests/protocol", "tests/gateway/test_rules.py", "tests/verify/test_modelcheck.py"],
    "sessionstate/store/sqlite.py": ["tests/store", "tests/gateway/test_rules.py", "tests/gateway/test_bad_input.py",
                                     "tests/verify/test_modelcheck.py::test_sampled_traces_replay_equal_on_the_real_store",
                                     "tests/trials/test_crash_and_concurrency_trials.py::test_two_processes_append_500_events_each"],
    "sessionstate/store/schema.py": ["tests/store", "tests/gateway/test_rules.py"],
}
SWAPS: dict[type, type] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.And: ast.Or, ast.Or: ast.And,
}


class Mutator(ast.NodeTransformer):
    """Visits every mutation site; mutates only site number ``target`` (or none: counting)."""

    def __init__(self, target: int = -1) -> None:
        self.target, self.count, self.description = target, 0, ""

    def _site(self, node: ast.AST, what: str) -> bool:
        hit = self.count == self.target
        if hit:
            self.description = f"line {getattr(node, 'lineno', '?')}: {what}"
        self.count += 1
        return hit

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            if type(op) in SWAPS and self._site(node, f"{type(op).__name__} -> {SWAPS[type(op)].__name__}"):
                node.ops[i] = SWAPS[type(op)]()
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if type(node.op) in (ast.Add, ast.Sub) and not _is_str(node) and self._site(node, f"{type(node.op).__name__} swapped"):
            node.op = SWAPS[type(node.op)]()
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        if self._site(node, f"{type(node.op).__name__} swapped"):
            node.op = SWAPS[type(node.op)]()
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, bool):
            if self._site(node, f"{node.value} -> {not node.value}"):
                return ast.copy_location(ast.Constant(not node.value), node)
        elif isinstance(node.value, int):
            for delta in (1, -1):
                if self._site(node, f"{node.value} -> {node.value + delta}"):
                    return ast.copy_location(ast.Constant(node.value + delta), node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in ("max", "min"):
            other = "min" if node.func.id == "max" else "max"
            if self._site(node, f"{node.func.id} -> {other}"):
                node.func = ast.copy_location(ast.Name(other, ast.Load()), node.func)
        return node

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.value, ast.Call) and self._site(node, f"removed call {ast.unparse(node.value)[:60]}"):
            return ast.copy_location(ast.Pass(), node)
        return node


def _is_str(node: ast.BinOp) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in (node.left, node.right)) or \
        any(isinstance(n, ast.JoinedStr) for n in (node.left, node.right))


def mutant(source: str, index: int) -> tuple[str, str]:
    tree = ast.parse(source)
    # Docstrings and annotations are not behaviour: skip module/def docstrings by dropping them.
    mutator = Mutator(index)
    tree = mutator.visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree)), mutator.description


def count_sites(source: str) -> int:
    mutator = Mutator()
    mutator.visit(ast.parse(source))
    return mutator.count


def make_copy() -> Path:
    tmp = Path(tempfile.mkdtemp(prefix="sessionstate-mutant-"))
    for name in ("sessionstate", "tests", "spec", "docs", "pyproject.toml", "README.md"):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, tmp / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, tmp / name)
    return tmp


def run_tests(copy: Path, tests: list[str], timeout: float) -> str:
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow", *tests],
            cwd=copy, env=env, capture_output=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return "killed (timeout)"
    return "survived" if result.returncode == 0 else "killed"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument("--only", action="append", default=None, help="a target path (repeatable)")
    parser.add_argument("--json", type=Path, default=None, help="write every mutant's result here")
    parser.add_argument("--rerun", type=Path, default=None, help="rerun only the survivors listed in a previous --json")
    args = parser.parse_args()
    targets = {p: t for p, t in TARGETS.items() if not args.only or p in args.only}
    work = [(path, i) for path in targets for i in range(count_sites((ROOT / path).read_text()))]
    if args.rerun is not None:
        previous = json.loads(args.rerun.read_text())
        work = [(r["file"], r["index"]) for r in previous if r["outcome"] == "survived" and r["file"] in targets]
    copies = [make_copy() for _ in range(args.jobs)]
    free = list(copies)
    results: list[dict] = []
    started = time.monotonic()

    def one(item: tuple[str, int]) -> dict:
        path, index = item
        copy = free.pop()
        try:
            original = (ROOT / path).read_text()
            text, description = mutant(original, index)
            (copy / path).write_text(text)
            outcome = run_tests(copy, targets[path], args.timeout)
            (copy / path).write_text(original)
        finally:
            free.append(copy)
        line = {"file": path, "index": index, "mutation": description, "outcome": outcome}
        print(f"{outcome:>17}  {path} {description}", flush=True)
        return line

    try:
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(one, work))
    finally:
        for copy in copies:
            shutil.rmtree(copy, ignore_errors=True)
    killed = sum(r["outcome"].startswith("killed") for r in results)
    print(f"\n{killed}/{len(results)} mutants killed ({100 * killed / max(len(results), 1):.1f} %)"
          f" in {time.monotonic() - started:.0f}s")
    for r in results:
        if r["outcome"] == "survived":
            print(f"SURVIVED {r['file']} {r['mutation']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
