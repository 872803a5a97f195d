"""The SDK is an optional extra: the core import and the CLI's start-up never load it."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import sessionstate, sessionstate.clients.cli, sessionstate.tools.dispatch
sessionstate.clients.cli.build_parser()
loaded = sorted(m for m in sys.modules if m.split('.')[0] in {'mcp', 'mcp_types', 'sessionstate.clients.mcp'} or m.startswith('sessionstate.clients.mcp'))
print(loaded)
"""


def run_probe(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout


def test_import_sessionstate_does_not_import_mcp():
    assert run_probe(PROBE).strip() == "[]"


def test_the_probe_sees_mcp_once_the_server_package_is_imported():
    # The same probe must be able to fail: importing the server package loads the SDK.
    assert "'mcp'" in run_probe("import sessionstate.clients.mcp\n" + PROBE)


def test_the_cli_names_the_extra_when_the_sdk_is_missing(tmp_path):
    # A meta-path finder that refuses `mcp` stands in for an environment without the extra.
    code = f"""
import sys
class NoMcp:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('mcp', 'mcp_types'):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, NoMcp())
from sessionstate.clients.cli import main
sys.exit(main(['mcp', '--db', {str(tmp_path / 's.db')!r}, '--session', 'agent:main:main']))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "missing_dependency" in done.stderr and "sessionstate[mcp]" in done.stderr
