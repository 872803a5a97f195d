"""A unix-socket proxy in front of a PostgreSQL server that loses a COMMIT's answer on demand.

For the fault trials of spec R29: ``arm(AFTER_COMMIT)`` makes the next client message holding
``COMMIT`` reach the server, then closes both sides before the server's answer comes back (the
transaction commits, the client cannot know); ``arm(BEFORE_COMMIT)`` closes them without
forwarding it (the server rolls the transaction back). ``refuse(seconds)`` turns new
connections away for a while (no server answers a resolution); ``cut_all()`` closes every
connection through it at once (a network cut). libpq reaches the proxy with
``host=<proxy.directory>`` and the server's port: the proxy listens on ``.s.PGSQL.<port>``.

``on_drop``, when given, runs in the proxy's thread after an ``AFTER_COMMIT`` COMMIT reached
the server and before the client's socket closes: the failover trial kills the primary there,
so the client's resolution can only reach the promoted standby.
"""

from __future__ import annotations

import os
import select
import socket
import tempfile
import threading
import time
from collections.abc import Callable

AFTER_COMMIT, BEFORE_COMMIT = "after_commit", "before_commit"


class CommitDroppingProxy:
    """Forwards every connection to the server's socket; see the module docstring."""

    def __init__(self, server_directory: str, port: int = 5432, on_drop: Callable[[], object] | None = None) -> None:
        self.target = os.path.join(server_directory, f".s.PGSQL.{port}")
        self.directory = tempfile.mkdtemp(prefix="sessionstate-pgproxy.")
        os.chmod(self.directory, 0o755)
        self.port = port
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(os.path.join(self.directory, f".s.PGSQL.{port}"))
        self._listener.listen(64)
        self._lock = threading.Lock()
        self._armed: str | None = None
        self._refuse_until = 0.0
        self.dropped = 0  # how many COMMITs were cut off
        self._closed = False
        self._on_drop = on_drop
        self._containing: bytes | None = None
        self._live: set[socket.socket] = set()
        threading.Thread(target=self._accept, name="pgproxy", daemon=True).start()

    def arm(self, mode: str, containing: bytes | None = None) -> None:
        """Cut off the next COMMIT (``AFTER_COMMIT`` or ``BEFORE_COMMIT``); with ``containing``,
        the next one whose message holds those bytes too (a drain's witness, say)."""
        with self._lock:
            self._armed, self._containing = mode, containing

    def disarm(self) -> None:
        with self._lock:
            self._armed = self._containing = None

    def cut_all(self) -> int:
        """Close every connection through the proxy at once (a network cut); how many."""
        with self._lock:
            live, self._live = list(self._live), set()
        for sock in live:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(live) // 2

    def refuse(self, seconds: float) -> None:
        """Turn new connections away for ``seconds``."""
        with self._lock:
            self._refuse_until = time.monotonic() + seconds

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        try:
            os.unlink(os.path.join(self.directory, f".s.PGSQL.{self.port}"))
            os.rmdir(self.directory)
        except OSError:
            pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refused = time.monotonic() < self._refuse_until
            if refused:
                client.close()
                continue
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.connect(self.target)
            except OSError:
                client.close()
                server.close()
                continue
            with self._lock:
                self._live.update((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _take_armed(self, chunk: bytes) -> str | None:
        # A simple-protocol query message ('Q') whose text holds COMMIT: the store's commit.
        if not chunk.startswith(b"Q") or b"COMMIT" not in chunk:
            return None
        with self._lock:
            if self._containing is not None and self._containing not in chunk:
                return None
            mode, self._armed, self._containing = self._armed, None, None
        return mode

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        sockets = [client, server]
        try:
            while True:
                readable, _, _ = select.select(sockets, [], [], 1.0)
                if self._closed:
                    return
                for sock in readable:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    if sock is client:
                        mode = self._take_armed(chunk)
                        if mode == BEFORE_COMMIT:
                            self.dropped += 1
                            return
                        server.sendall(chunk)
                        if mode == AFTER_COMMIT:
                            # The server has the COMMIT; its answer never comes back. Give it
                            # a moment to read the message before the socket closes.
                            time.sleep(0.2)
                            self.dropped += 1
                            if self._on_drop is not None:
                                self._on_drop()
                            return
                    else:
                        client.sendall(chunk)
        except OSError:
            return
        finally:
            with self._lock:
                self._live.difference_update(sockets)
            for sock in sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
