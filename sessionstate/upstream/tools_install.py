"""The upstream coding agents, installed from the npm registry for the providers' tests.

``install()`` puts the pinned ``@openai/codex``, ``opencode-ai`` and
``@mariozechner/pi-coding-agent`` into one cache directory: ``$SESSIONSTATE_UPSTREAM_TOOLS_CACHE``,
else ``$XDG_CACHE_HOME/sessionstate/upstream-tools`` (``~/.cache/sessionstate/upstream-tools``).
npm's own cache, logs, home and temporary files live inside it (``shared/npm_cache.py``);
install scripts are not run (each tool's npm package carries its Linux binary as an optional
dependency, used directly); npm's download cache is removed afterwards (the tools take about
1 GB). A second call finds them installed and does nothing.

``python -m sessionstate.upstream.tools_install`` installs and prints what it installed and how
long it took. ``tool_path(name)`` is the executable (or, for Pi, the package's entry module) a
test drives; ``missing_tools()`` says which are not usable here and why.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

from ..shared import npm_cache

#: npm package and version per tool (the releases the providers were checked against).
PACKAGES = {
    "codex": ("@openai/codex", "0.171.0"),
    "opencode": ("opencode-ai", "1.18.33"),
    "pi": ("@mariozechner/pi-coding-agent", "0.73.1"),
}
_MARKER = "installed.json"


class InstallError(Exception):
    """npm failed, or a tool does not run here."""


def cache_dir() -> Path:
    return npm_cache.cache_dir("SESSIONSTATE_UPSTREAM_TOOLS_CACHE", "upstream-tools")


def _arch() -> str:
    return {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower(), "")


def tool_path(name: str, cache: Path | None = None) -> Path:
    """The executable of ``codex`` / ``opencode``; for ``pi`` the package's ``dist/index.js``."""
    modules = (cache_dir() if cache is None else cache) / "node_modules"
    arch = _arch()
    if name == "codex":
        triple = {"x64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
        return modules / "@openai" / f"codex-linux-{arch}" / "vendor" / f"{triple}-unknown-linux-musl" / "bin" / "codex"
    if name == "opencode":
        return modules / f"opencode-linux-{arch}" / "bin" / "opencode"
    if name == "pi":
        return modules / "@mariozechner" / "pi-coding-agent" / "dist" / "index.js"
    raise KeyError(name)


def missing_tools(cache: Path | None = None) -> dict[str, str]:
    """Tool name -> why it is not usable here; empty when all three are installed."""
    cache = cache_dir() if cache is None else cache
    reasons: dict[str, str] = {}
    try:
        recorded = json.loads((cache / _MARKER).read_text())
    except (OSError, ValueError):
        recorded = {}
    for name, (package, version) in PACKAGES.items():
        if recorded.get(name) != version:
            reasons[name] = f"{package}@{version} is not installed in {cache} (python -m sessionstate.upstream.tools_install)"
        elif name == "pi" and shutil.which("node") is None:
            reasons[name] = "no node on PATH (Pi's own session code runs under Node)"
        elif not tool_path(name, cache).exists():
            reasons[name] = f"no {name} at {tool_path(name, cache)}"
    return reasons


def install(cache: Path | None = None) -> dict[str, object]:
    """Install the pinned tools (or find them installed); returns versions and seconds taken."""
    cache = (cache_dir() if cache is None else cache).resolve()
    began = time.monotonic()
    wanted = {name: version for name, (_, version) in PACKAGES.items()}
    if not missing_tools(cache):
        return {**wanted, "seconds": 0.0, "cached": True}
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "package.json").write_text(json.dumps({"private": True, "name": "sessionstate-upstream-tools"}) + "\n")
    specs = [f"{package}@{version}" for package, version in PACKAGES.values()]
    npm_cache.run_npm(["install", "--no-save", "--no-package-lock", "--ignore-scripts", *specs], cache, cache,
                      error=InstallError, installs="the upstream tools")
    for name in ("codex", "opencode"):
        probe = subprocess.run([str(tool_path(name, cache)), "--version"], capture_output=True, text=True,
                               env=dict(os.environ, HOME=str(cache / "npm" / "home")), timeout=120)
        if probe.returncode != 0:
            raise InstallError(f"{name} --version failed here: {probe.stderr.strip()[-500:]}")
    (cache / _MARKER).write_text(json.dumps(wanted, indent=2) + "\n")
    shutil.rmtree(cache / "npm" / "cache", ignore_errors=True)  # npm's copy of the tarballs (~360 MB)
    return {**wanted, "seconds": round(time.monotonic() - began, 1), "cached": False}


def main() -> int:
    print(json.dumps(install(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
