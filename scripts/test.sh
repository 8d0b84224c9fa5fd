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
set +e
.venv/bin/python -m pytest --durations=25 "${markers[@]}" "$@"
rc=$?
set -e
[ $rc -eq 5 ] && { echo "no tests collected" >&2; exit 1; }
exit $rc
