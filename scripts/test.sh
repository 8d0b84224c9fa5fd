#!/usr/bin/env bash
# Installs everything (idempotent) and runs the whole test suite.
#   bash scripts/test.sh            # everything, as CI runs it
#   bash scripts/test.sh --fast     # skip tests marked slow
#   bash scripts/test.sh -- -k proxy   # extra pytest args after --
set -euo pipefail
cd "$(dirname "$0")/.."
markers=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fast) markers=(-m "not slow"); shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
bash scripts/setup.sh --images  # the docker tests' base image is built while the venvs install
export PATH="$PWD/.venv/bin:$PATH"
.venv/bin/ruff check rlkit tests bench
.venv/bin/lint-imports  # floors: imports run downward (pyproject.toml [tool.importlinter])
# Three test files need the in-container agents' images (~3 min on a fresh machine: npm, pip wheel,
# docker build). Built here, beside the first tests, no two workers sit waiting on the build's lock.
.venv/bin/rlkit images agents >.rlkit/setup/agents.log 2>&1 &
agents=$!
trap 'kill "$agents" 2>/dev/null || true' EXIT
set +e
# Three workers (RLKIT_TEST_WORKERS) on two cores: tests wait on docker, vLLM or a subprocess often
# enough that two workers left the cores 11% idle; a third fills them (14.0 -> 12.3 min in fresh
# clones, at least 9 GiB of 23 left free). Files stay whole on one worker (their fixtures start once);
# tests/conftest.py puts the whole runs first, and hands the files that share the session's vLLM server
# to one worker together (one boot, not three).
.venv/bin/python -m pytest -n "${RLKIT_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder \
  --durations=25 "${markers[@]}" "$@"
rc=$?
set -e
[ $rc -eq 5 ] && { echo "no tests collected" >&2; exit 1; }
exit $rc
