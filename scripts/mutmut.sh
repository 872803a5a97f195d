#!/usr/bin/env bash
# Mutation testing with mutmut (the `verify` extra) over one layer, in a scratch copy of the tree
# so the worktree is never touched:  scripts/mutmut.sh statemachine|store|services
# or one or more files of one layer:    scripts/mutmut.sh store/runs.py store/records.py
# Each module runs only its fastest relevant tests (docs/verification.md, "Mutation testing").
# MUTMUT_NAMES="PATTERN ..." runs only the mutants whose names match (fnmatch, as mutmut's own
# `run NAMES`), e.g. the functions a change touched: MUTMUT_NAMES='*ǁRewakerǁtrack*'.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
module="${1:?usage: scripts/mutmut.sh statemachine|store|services|services/notice|store/sql_store.py [store/runs.py ...]|services/notice/wakes.py ...}"
modules=("$@")  # the first names the test selection; the others must share it
for other in "${modules[@]}"; do
    if [ "${other%%/*}" != "${module%%/*}" ]; then
        echo "one layer a run: $other is not in ${module%%/*}/" >&2; exit 2
    fi
done
case "$module" in
    statemachine) tests='"tests/protocol/test_transition_sweep.py", "tests/protocol/test_spec_sync.py"' ;;
    # Serving claims and the SQLite change feed are used by processes sharing one database.
    store/serving.py|store/sqlite_feed.py) tests='"tests/store", "tests/multiproc/test_serving.py", "tests/multiproc/test_pump.py"' ;;
    store|store/*.py) tests='"tests/store"' ;;
    # The notice service is what tests/gateway is about; the other services are reached through
    # the tools too, the cluster parts (claims, the change pump) through the serving and pump
    # trials, the trace through its replay tests.
    services/notice|services/notice/*.py) tests='"tests/gateway"' ;;
    services/cluster.py|services/change_pump.py) tests='"tests/gateway", "tests/multiproc/test_serving.py", "tests/multiproc/test_pump.py"' ;;
    services/trace.py) tests='"tests/gateway", "tests/verify/test_trace_replay.py", "tests/verify/test_trace_provenance.py"' ;;
    services|services/*.py) tests='"tests/gateway", "tests/tools"' ;;
    *) echo "unknown module: $module" >&2; exit 2 ;;
esac
./dev run true  # the project's .venv, installed when missing
[ -x .venv/bin/mutmut ] || .venv/bin/pip install -q 'mutmut==3.8.1'  # the `verify` extra, the version measured
work="$(mktemp -d)/sessionstate-mutmut-${module//\//-}${2:+-and-$(( $# - 1 ))-more}"
mkdir -p "$work"
git ls-files | tar -cf - -T - | tar -xf - -C "$work"
# mutmut skips decorated functions; in the copy, services' @locked moves after its class
# (the same lock, a plain function for mutmut to mutate): scripts/mutmut_unwrap_locked.py.
if [[ "$module" == services* ]]; then
    root="$(pwd)"
    (cd "$work" && "$root/.venv/bin/python" "$root/scripts/mutmut_unwrap_locked.py" \
        $(for m in "${modules[@]}"; do find "sessionstate/$m" -name '*.py'; done))
fi
# mutmut's wall timeout is (the covering tests' measured time + 1 s) x timeout_multiplier, 15 by
# default: a mutant that deadlocks the group commit then waits five minutes before it counts as a
# timeout. 4 still leaves a survivor of the hot path (20-37 s here) room on a loaded machine.
cat >> "$work/pyproject.toml" <<CFG

[tool.mutmut]
source_paths = [$(printf '"sessionstate/%s", ' "${modules[@]}")]
pytest_add_cli_args = ["-p", "no:cacheprovider", "-x", "-q"]
pytest_add_cli_args_test_selection = [$tests]
also_copy = ["sessionstate", "spec", "tests", "docs", "benchmarks"]
timeout_multiplier = ${MUTMUT_TIMEOUT_MULTIPLIER:-4.0}
CFG
cd "$work"
# SQLite only, unless a server is named (scripts/pg-test-server run scripts/mutmut.sh MODULE):
# then the selected tests run on both backends, and PostgreSQL-only code is reached too.
if [ -z "${SESSIONSTATE_TEST_PG_URL:-}" ]; then export SESSIONSTATE_TEST_PG=off; fi
# shellcheck disable=SC2086  # the patterns are words; none holds a space
"$OLDPWD/.venv/bin/mutmut" run --max-children "${MUTMUT_CHILDREN:-1}" ${MUTMUT_NAMES:-}
"$OLDPWD/.venv/bin/mutmut" results --all true | sed -E 's/^ *sessionstate\.([a-z_.]+)\.x.*: (.*)$/\1 \2/' | sort | uniq -c
echo "results in $work (mutmut show NAME for one mutant)"
