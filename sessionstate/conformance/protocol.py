"""The adapter protocol's client side: one request per line on the adapter's stdin, one answer
per line on its stdout (docs/conformance.md, "The adapter protocol").

A request is ``{"id": n, "op": NAME, ...arguments}``; its answer ``{"id": n, "ok": true,
"result": {...}}`` or ``{"id": n, "ok": false, "error": TEXT}``. The adapter's stderr is its own
(left to the terminal or a log file); nothing but answers may reach its stdout.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Sequence
from typing import IO, Any

OPS = ("hello", "create", "spawn", "record", "human", "watch", "drain", "pending", "changesSince", "fresh",
       "version", "reset", "delete", "prune", "restart", "clock", "wakes", "bench", "changesPage",
       "statusTool", "bye")


class AdapterFailure(Exception):
    """The adapter died, answered out of order, or answered something that is not JSON."""


class Adapter:
    """A running adapter process."""

    def __init__(self, command: Sequence[str] | str, *, stderr: IO[str] | None = None, timeout: float = 60.0) -> None:
        self.command = shlex.split(command) if isinstance(command, str) else list(command)
        self.timeout = timeout
        self._next = 0
        self.process = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
            text=True, bufsize=1,
        )

    def call(self, op: str, **arguments: Any) -> dict[str, Any]:
        if op not in OPS:
            raise ValueError(f"unknown adapter op {op!r}")
        self._next += 1
        request = {"id": self._next, "op": op, **{k: v for k, v in arguments.items() if v is not None}}
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise AdapterFailure(f"adapter {self.command[0]} is gone ({exc}) at {op}") from exc
        line = self.process.stdout.readline()
        if not line:
            raise AdapterFailure(f"adapter {self.command[0]} closed its stdout at {op} (exit {self.process.poll()})")
        try:
            answer = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AdapterFailure(f"adapter answered {line[:200]!r} to {op}: not JSON") from exc
        if not isinstance(answer, dict) or answer.get("id") != self._next:
            raise AdapterFailure(f"adapter answered {line[:200]!r} to request {self._next} ({op})")
        if not answer.get("ok"):
            raise AdapterFailure(f"adapter failed {op} {arguments}: {answer.get('error')}")
        result = answer.get("result", {})
        if not isinstance(result, dict):
            raise AdapterFailure(f"adapter's result for {op} is not an object: {result!r}")
        return result

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.call("bye")
            except AdapterFailure:
                pass
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


def timed_steps(handle: Any, steps: list[Any]) -> dict[str, Any]:
    """The adapter side of ``bench`` (benchmarks/reference_side_by_side.py): run each step
    ``[op, arguments, label]`` through the adapter's own handler, timed by a monotonic
    nanosecond clock inside the implementation's process (the pipe is not timed). The answer:
    each label's total nanoseconds and count, and the sequences the records returned."""
    totals: dict[str, int] = {}
    counts: dict[str, int] = {}
    sequences: list[Any] = []
    for op, arguments, label in steps:
        if op in ("bench", "bye", "hello", "fresh"):
            raise ValueError(f"bench cannot time {op!r}")
        began = time.perf_counter_ns()
        result = handle(op, arguments)
        took = time.perf_counter_ns() - began
        totals[label] = totals.get(label, 0) + took
        counts[label] = counts.get(label, 0) + 1
        if op in ("record", "human"):
            sequences.append(result.get("sequence"))
    return {"ns": totals, "count": counts, "sequences": sequences}


def serve(handle: Any, stdin: IO[str], stdout: IO[str]) -> int:
    """The adapter side's loop, for adapters written in Python: ``handle(op, request)`` returns
    the result object or raises; ``bye`` ends the loop."""
    for line in stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        ident = request.get("id")
        op = request.get("op")
        try:
            result = {} if op == "bye" else handle(op, request)
            answer = {"id": ident, "ok": True, "result": result}
        except Exception as exc:  # the adapter reports, the kit decides
            answer = {"id": ident, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()
        if op == "bye":
            break
    return 0
