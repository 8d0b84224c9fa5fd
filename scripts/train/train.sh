#!/usr/bin/env bash
# Thin shim over `rlkit train CFG`. The config is read by rlkit, never sourced here.
#   PREFLIGHT_ONLY=1 bash scripts/train/train.sh CFG   # resolve + Run Validation, launch nothing
#   DRY_RUN=1        bash scripts/train/train.sh CFG   # print the launch commands
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: [PREFLIGHT_ONLY=1|DRY_RUN=1] bash scripts/train/train.sh CONFIG.env" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -x "$ROOT/.venv/bin/rlkit" ]; then
  exec "$ROOT/.venv/bin/rlkit" train "$@"
fi
command -v rlkit >/dev/null || { echo "rlkit is not installed: run bash scripts/setup.sh" >&2; exit 2; }
exec rlkit train "$@"
