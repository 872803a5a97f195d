"""A throwaway PostgreSQL server of the verification's own, to restart under load.

The restart trials (``restart.py``) need a server they may crash: ``pg_ctl -m immediate``
ends every backend without a shutdown checkpoint, as a crash of the server would. The server
is tuned as the project's test servers are (``scripts/pg-test-server``): ``fsync = off`` and
``synchronous_commit = off``, the tuning under which acknowledged events were once lost. An
immediate restart keeps the operating system's page cache, so whatever the server wrote
before acknowledging survives it even without fsync: the trial checks what the gateway asks
of the server, not the disk.

As root the server runs as the ``postgres`` user (PostgreSQL refuses root), as the script does.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

SERVER_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=50")


def server_binaries() -> Path | None:
    """The directory of the newest installed PostgreSQL's ``initdb`` and ``pg_ctl``, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: [int(x) for x in
                   Path(p).parent.parent.name.split(".") if x.isdigit()])
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class ThrowawayServer:
    """``start`` a server in a temporary directory (Unix socket only), ``restart_immediately``
    it, ``stop`` it and remove the directory. A context manager."""

    def __init__(self, settings: tuple[str, ...] = SERVER_SETTINGS) -> None:
        binaries = server_binaries()
        if binaries is None:
            raise RuntimeError("no PostgreSQL server binaries (apt-get install postgresql)")
        self._bin = binaries
        self._settings = settings
        self._dir = Path(tempfile.mkdtemp(prefix="sessionstate-restart-"))
        self._data = self._dir / "data"
        self.directory = self._dir  # its socket's directory (a proxy in front of it connects there)
        self.url = f"postgresql+psycopg://postgres@/postgres?host={self._dir}"

    def _run(self, *args: str) -> None:
        command = [str(self._bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr[-2000:]}{self._log_tail()}")

    def _log_tail(self) -> str:
        log = self._dir / "log"
        return "\n" + log.read_text(errors="replace")[-2000:] if log.exists() else ""

    def start(self) -> "ThrowawayServer":
        if os.geteuid() == 0:
            shutil.chown(self._dir, "postgres", "postgres")
        self._run("initdb", "-D", str(self._data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        options = f"-c listen_addresses='' -k {self._dir} " + " ".join(f"-c {s}" for s in self._settings)
        self._run("pg_ctl", "-D", str(self._data), "-l", str(self._dir / "log"), "-w", "-o", options, "start")
        return self

    def restart_immediately(self) -> float:
        """``pg_ctl -m immediate restart``: every connection dies, committed work is recovered
        from the WAL. Returns when the server accepts connections again (the time it did)."""
        self._run("pg_ctl", "-D", str(self._data), "-l", str(self._dir / "log"), "-m", "immediate", "-w", "restart")
        return time.monotonic()

    def stop(self) -> None:
        try:
            if (self._data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self._data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "ThrowawayServer":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
