"""A JSON-RPC client of one ``codex app-server`` child process (newline-delimited JSON on stdio).

The process is started on the first call and kept; if it dies, the next call starts a new one.
Each call waits at most ``timeout`` seconds for its answer; notifications the server sends in
between are read and dropped (the provider asks, it does not subscribe). A timed-out or broken
process is killed so the next call starts clean. Thread-safe: one call at a time.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any


CLIENT_INFO = {"name": "sessionstate", "version": "1"}
DEFAULT_TIMEOUT_SECONDS = 30.0


class AppServerUnavailable(Exception):
    """The app server could not be started, died, or did not answer in time."""


class RpcError(Exception):
    """A JSON-RPC error answer: ``code`` and ``message`` as the server sent them."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class AppServerClient:
    def __init__(self, command: Sequence[str], *, env: Mapping[str, str] | None = None,
                 timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self.command = list(command)
        self.env = dict(os.environ if env is None else env)
        self.timeout = timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._next_id = 0
        self._lock = threading.Lock()

    def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """The ``result`` of one request; ``RpcError`` on an error answer, ``AppServerUnavailable``
        when there is no answer."""
        with self._lock:
            process = self._ensure_started()
            return self._request(process, method, params)

    def close(self) -> None:
        with self._lock:
            self._kill()

    # -- internals ------------------------------------------------------------------------------

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._kill()
        try:
            process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, env=self.env)
        except OSError as exc:
            raise AppServerUnavailable(f"cannot start {self.command[0]}: {exc}") from exc
        self._process = process
        self._buffer = b""
        self._request(process, "initialize", {"clientInfo": CLIENT_INFO})
        self._send(process, {"jsonrpc": "2.0", "method": "initialized"})
        return process

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        if process.poll() is None:
            process.kill()
        process.wait()

    def _send(self, process: subprocess.Popen[bytes], message: Mapping[str, Any]) -> None:
        assert process.stdin is not None
        try:
            process.stdin.write(json.dumps(message).encode() + b"\n")
            process.stdin.flush()
        except OSError as exc:
            self._kill()
            raise AppServerUnavailable(f"app server closed its input: {exc}") from exc

    def _request(self, process: subprocess.Popen[bytes], method: str, params: Mapping[str, Any]) -> Any:
        self._next_id += 1
        request_id = self._next_id
        self._send(process, {"jsonrpc": "2.0", "id": request_id, "method": method, "params": dict(params)})
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._read_message(process, deadline)
            if message.get("id") != request_id or "method" in message:
                continue  # a notification, or a request the server makes of clients
            if "error" in message:
                error = message["error"] or {}
                raise RpcError(int(error.get("code", 0)), str(error.get("message", "")))
            return message.get("result")

    def _read_message(self, process: subprocess.Popen[bytes], deadline: float) -> dict[str, Any]:
        assert process.stdout is not None
        fd = process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            with selectors.DefaultSelector() as selector:
                selector.register(fd, selectors.EVENT_READ)
                ready = selector.select(max(left, 0.0)) if left > 0 else []
            if not ready:
                self._kill()
                raise AppServerUnavailable(f"no answer from the app server within {self.timeout:g} s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._kill()
                raise AppServerUnavailable("the app server exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except ValueError:
            return {}
        return message if isinstance(message, dict) else {}
