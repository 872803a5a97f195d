"""A real full disk: a size-limited tmpfs and a ballast file that takes its free space.

Mounting needs root (or CAP_SYS_ADMIN); ``mount_tmpfs`` says whether it worked, so a caller
without the right skips what needs it. Used by the nemesis's ``full`` fault (SQLite) and by
the storage tests (tests/store/test_storage_failures.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

BALLAST = "ballast"


def mount_tmpfs(mount: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` (``mount -o size=``: ``2m``, ``1g``) on the existing directory."""
    if shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    return done.returncode == 0


def unmount(mount: Path) -> None:
    if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)  # still open somewhere: detach it


def fill(directory: Path) -> Path:
    """Write a ballast file until the file system says ENOSPC (large writes first, then pages,
    so no page is left free)."""
    ballast = directory / BALLAST
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for chunk in (1 << 20, 4096):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError as exc:
                if exc.errno != 28:  # ENOSPC
                    raise
    finally:
        os.close(fd)
    return ballast
