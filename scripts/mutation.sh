#!/usr/bin/env bash
# Mutation testing of the protocol and the store (too slow for every CI run).
# Usage: scripts/mutation.sh [--jobs N] [--timeout S] [--only PATH] [--json OUT]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec .venv/bin/python scripts/mutation.py "$@"
