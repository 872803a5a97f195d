"""A throwaway PostgreSQL primary with a streaming standby, for the failover trials.

The Python twin of ``scripts/pg-failover-server`` (the script serves shells; this class
serves the trials and the tests, which start and kill the servers themselves). The standby is a ``pg_basebackup -R`` copy of the primary, streaming
from it. ``mode="sync"``: once the standby streams, the primary's ``synchronous_standby_names``
is ``'*'``, so a commit with ``synchronous_commit = on`` (the store's default) returns only
after the standby flushed it. ``mode="async"``: the primary does not wait.

``kill_primary`` SIGKILLs the primary's postmaster's process group (every backend at once, no
shutdown of any kind: a crash of the server); ``promote`` makes the standby a primary and
returns once it takes writes. Each server listens on a socket in a directory of its own;
``url`` names both (``target_session_attrs=read-write``: libpq picks whichever takes writes),
``primary_url`` and ``standby_url`` one each. fsync is off: these trials kill processes, not
the machine, and the kernel keeps what a killed server wrote. As root the servers run as the
``postgres`` user.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Self

from .pgserver import Throwaway, initdb, postmaster, run_binary, server_binaries, start_server

MODES = ("sync", "async")
SETTINGS = ("fsync=off", "full_page_writes=off", "max_connections=100", "wal_level=replica",
            "max_wal_senders=5", "hot_standby=on", "wal_receiver_status_interval=1s")
WAIT_SECONDS = 30.0  # a bound for a stuck server, not a measurement
STANDBY_NAME = "standby"


class StreamingPair(Throwaway):
    """``start`` a primary and its standby in a temporary directory, ``kill_primary``,
    ``promote``, ``stop`` (both, and remove the directory). A context manager."""

    def __init__(self, mode: str = "sync") -> None:
        if mode not in MODES:
            raise ValueError(f"mode is one of {MODES}, not {mode!r}")
        binaries = server_binaries()
        if binaries is None or not (binaries / "pg_basebackup").exists():
            raise RuntimeError("no PostgreSQL server binaries (apt-get install postgresql)")
        self.mode = mode
        self._bin = binaries
        self.directory = Path(tempfile.mkdtemp(prefix="sessionstate-pgpair-"))
        self.primary_dir, self.standby_dir = self.directory / "primary", self.directory / "standby"
        base = "postgresql+psycopg://postgres@/postgres"
        self.url = f"{base}?host={self.primary_dir},{self.standby_dir}&port=5432,5432&target_session_attrs=read-write"
        self.primary_url = f"{base}?host={self.primary_dir}"
        self.standby_url = f"{base}?host={self.standby_dir}"
        self.killed_at: float | None = None  # time.time() just before the SIGKILL
        self.promoted_at: float | None = None  # time.time() once the standby takes writes

    # -- running the binaries ---------------------------------------------------------------

    def sql(self, server_dir: Path, query: str) -> str:
        """One value of ``query`` on the server whose socket is in ``server_dir`` (psql)."""
        return run_binary(self._bin, "psql", "-h", str(server_dir), "-U", "postgres", "-d", "postgres", "-qAtX",
                          "-c", query).strip()

    def _wait_for(self, what: str, server_dir: Path, query: str, expected: str) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        value = ""
        while time.monotonic() < deadline:
            try:
                value = self.sql(server_dir, query)
            except RuntimeError:
                value = "(no answer)"
            if value == expected:
                return
            time.sleep(0.02)
        raise RuntimeError(f"{what}: {query!r} gave {value!r}, not {expected!r}, in {WAIT_SECONDS:.0f} s")

    # -- the pair ---------------------------------------------------------------------------

    def _server_dirs(self) -> tuple[Path, ...]:
        return (self.primary_dir, self.standby_dir)

    def start(self) -> Self:
        for path in (self.primary_dir, self.standby_dir):
            path.mkdir()
        os.chmod(self.directory, 0o755)
        if os.geteuid() == 0:
            for path in (self.directory, self.primary_dir, self.standby_dir):
                shutil.chown(path, "postgres", "postgres")
        initdb(self._bin, self.primary_dir)
        start_server(self._bin, self.primary_dir, SETTINGS)
        # A fast checkpoint: the default spread one waits minutes on a freshly written cluster.
        run_binary(self._bin, "pg_basebackup", "-h", str(self.primary_dir), "-U", "postgres",
                   "-D", str(self.standby_dir / "data"), "-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
        with open(self.standby_dir / "data" / "postgresql.auto.conf", "a", encoding="utf-8") as conf:
            conf.write(f"primary_conninfo = 'host={self.primary_dir} user=postgres application_name={STANDBY_NAME}'\n")
        start_server(self._bin, self.standby_dir, SETTINGS + ("synchronous_standby_names=''",))
        self._wait_for("the standby did not stream", self.primary_dir,
                       "SELECT count(*) FROM pg_stat_replication"
                       f" WHERE application_name = '{STANDBY_NAME}' AND state = 'streaming'", "1")
        if self.mode == "sync":  # only now: a commit before the standby streams would wait for it
            self.sql(self.primary_dir, "ALTER SYSTEM SET synchronous_standby_names = '*'")
            self.sql(self.primary_dir, "SELECT pg_reload_conf()")
            self._wait_for("the standby did not become synchronous", self.primary_dir,
                           f"SELECT sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}'",
                           "sync")
        return self

    def wait_standby_caught_up(self) -> None:
        """Until the standby has flushed all the WAL the primary has written (a commit the
        primary made is then on the standby, whatever the mode)."""
        self._wait_for("the standby did not catch up", self.primary_dir,
                       "SELECT bool_and(flush_lsn >= pg_current_wal_lsn()) FROM pg_stat_replication", "t")

    def replication_lag(self) -> dict[str, float | None]:
        """The standby's lag as the primary measures it (seconds; None when idle)."""
        row = self.sql(self.primary_dir, "SELECT coalesce(extract(epoch FROM write_lag)::text, ''),"
                       " coalesce(extract(epoch FROM flush_lag)::text, ''),"
                       " coalesce(extract(epoch FROM replay_lag)::text, '') FROM pg_stat_replication")
        values = (row.split("|") + ["", "", ""])[:3]
        return {name: float(v) if v else None for name, v in zip(("write", "flush", "replay"), values)}

    def kill_primary(self) -> float:
        """SIGKILL the primary's postmaster and every backend (its process group); returns
        the ``time.time()`` just before the signal."""
        self.killed_at = self._kill(self.primary_dir, "primary")
        return self.killed_at

    def kill_standby(self) -> float:
        """SIGKILL the standby (the "standby lost" case)."""
        return self._kill(self.standby_dir, "standby")

    def _kill(self, server_dir: Path, name: str) -> float:
        pid = postmaster(server_dir)
        if pid is None:
            raise RuntimeError(f"the {name} is not running")
        at = time.time()
        if os.getpgid(pid) == pid:  # pg_ctl starts the postmaster with setsid
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while postmaster(server_dir) is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        return at

    def promote(self) -> float:
        """Promote the standby; returns the ``time.time()`` it took writes."""
        run_binary(self._bin, "pg_ctl", "-D", str(self.standby_dir / "data"), "-w", "-t", str(int(WAIT_SECONDS)),
                   "promote")
        self._wait_for("the promoted standby takes no writes", self.standby_dir, "SELECT pg_is_in_recovery()", "f")
        self.promoted_at = time.time()
        return self.promoted_at
