"""A cache directory of npm packages, as the installers of the upstream tools
(``upstream/tools_install.py``) and of the published reference (``conformance/openclaw_install.py``)
keep one: named by an environment variable, else ``$XDG_CACHE_HOME/sessionstate/NAME``
(``~/.cache/sessionstate/NAME``). npm runs with its own cache, logs, user config, home and
temporary files inside it, so an install writes nothing elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def cache_dir(variable: str, name: str) -> Path:
    """``$variable`` if set, else ``sessionstate/name`` under the user's cache directory."""
    explicit = os.environ.get(variable)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sessionstate" / name


def npm_env(cache: Path) -> dict[str, str]:
    """This process's environment with npm's cache, logs, config, home and temporary files in
    ``cache/npm`` (created)."""
    npm_home = cache / "npm"
    env = dict(os.environ, npm_config_cache=str(npm_home / "cache"), npm_config_logs_dir=str(npm_home / "logs"),
               npm_config_update_notifier="false", npm_config_fund="false", npm_config_audit="false",
               npm_config_userconfig=str(npm_home / "npmrc"), HOME=str(npm_home / "home"),
               TMPDIR=str(npm_home / "tmp"))
    for key in ("HOME", "TMPDIR"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    return env


def run_npm(args: list[str], cache: Path, cwd: Path, *, error: type[Exception], installs: str) -> str:
    """``npm ARGS`` in ``cwd`` with ``npm_env(cache)``; its stdout. ``error`` is raised when
    npm is not on PATH (it ``installs`` what) or fails (with its stderr's tail)."""
    npm = shutil.which("npm")
    if npm is None:
        raise error(f"npm is not on PATH (it installs {installs} from the npm registry)")
    done = subprocess.run([npm, *args], cwd=cwd, env=npm_env(cache), capture_output=True, text=True)
    if done.returncode != 0:
        raise error(f"npm {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout
