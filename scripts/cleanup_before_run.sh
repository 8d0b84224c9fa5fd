#!/usr/bin/env bash
# Clears what dead runs left behind, and only that (`rlkit cleanup`): your orphaned sandboxes
# (docker containers, k8s pods), rlkit's orphaned vLLM / proxy / Ray processes and stale /tmp
# leftovers. Live runs and other users' sandboxes are left alone. Safe to re-run, and safe when
# nothing is up.  Usage: bash scripts/cleanup_before_run.sh [CFG] [--dry-run] [rlkit cleanup flags]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/rlkit ]; then rlkit=(.venv/bin/rlkit); else rlkit=(python3 -m rlkit); fi
exec "${rlkit[@]}" cleanup "$@"
