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
from typing import Self

SERVER_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=50")


def server_binaries() -> Path | None:
    """The directory of the newest installed PostgreSQL's ``initdb`` and ``pg_ctl``, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: [int(x) for x in
                   Path(p).parent.parent.name.split(".") if x.isdigit()])
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def run_binary(binaries: Path, *args: str, log: Path | None = None) -> str:
    """Run one of the server's binaries (as the ``postgres`` user when root: PostgreSQL refuses
    root); its stdout. A failure raises with its stderr and the tail of ``log``."""
    command = [str(binaries / args[0]), *args[1:]]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
        raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr[-2000:]}\n{tail}")
    return done.stdout


# A server of a trial's own lives in a directory: its cluster in ``data``, its log in ``log``,
# its Unix socket beside them (no TCP).


def initdb(binaries: Path, server_dir: Path) -> None:
    run_binary(binaries, "initdb", "-D", str(server_dir / "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8",
               "--no-sync")


def start_server(binaries: Path, server_dir: Path, settings: tuple[str, ...]) -> None:
    """``pg_ctl start``, returning once it accepts connections."""
    options = f"-c listen_addresses='' -k {server_dir} " + " ".join(f"-c {s}" for s in settings)
    run_binary(binaries, "pg_ctl", "-D", str(server_dir / "data"), "-l", str(server_dir / "log"), "-w", "-o", options,
               "start", log=server_dir / "log")


def postmaster(server_dir: Path) -> int | None:
    """The process id of the server's postmaster, None if it is not running."""
    try:
        pid = int((server_dir / "data" / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    try:  # a killed process its parent has not reaped yet is gone too
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return None
    except (OSError, IndexError):
        pass
    return pid


class Throwaway:
    """What a throwaway server and a streaming pair share: servers in directories under one
    temporary ``directory``; ``stop`` ends every one still running (``pg_ctl -m immediate``)
    and removes the directory. A context manager: entered, ``start``; a failed start is
    stopped too."""

    directory: Path
    _bin: Path

    def _server_dirs(self) -> tuple[Path, ...]:
        raise NotImplementedError

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        try:
            for server_dir in self._server_dirs():
                if postmaster(server_dir) is not None:
                    run_binary(self._bin, "pg_ctl", "-D", str(server_dir / "data"), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ThrowawayServer(Throwaway):
    """``start`` a server in a temporary directory (Unix socket only), ``restart_immediately``
    it, ``stop`` it and remove the directory. A context manager."""

    def __init__(self, settings: tuple[str, ...] = SERVER_SETTINGS) -> None:
        binaries = server_binaries()
        if binaries is None:
            raise RuntimeError("no PostgreSQL server binaries (apt-get install postgresql)")
        self._bin = binaries
        self._settings = settings
        # its socket's directory too (a proxy in front of it connects there)
        self.directory = Path(tempfile.mkdtemp(prefix="sessionstate-restart-"))
        self.url = f"postgresql+psycopg://postgres@/postgres?host={self.directory}"

    def _server_dirs(self) -> tuple[Path, ...]:
        return (self.directory,)

    def start(self) -> Self:
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        initdb(self._bin, self.directory)
        start_server(self._bin, self.directory, self._settings)
        return self

    def restart_immediately(self) -> float:
        """``pg_ctl -m immediate restart``: every connection dies, committed work is recovered
        from the WAL. Returns when the server accepts connections again (the time it did)."""
        run_binary(self._bin, "pg_ctl", "-D", str(self.directory / "data"), "-l", str(self.directory / "log"),
                   "-m", "immediate", "-w", "restart", log=self.directory / "log")
        return time.monotonic()
