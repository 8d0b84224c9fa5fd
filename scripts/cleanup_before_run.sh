#!/usr/bin/env bash
# Clears what a previous run left behind: labelled sandboxes (docker containers, k8s pods),
# Ray, and our processes still holding the proxy port (8002). Safe to re-run, and safe when
# nothing is up.  Usage: bash scripts/cleanup_before_run.sh [--dry-run]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/rlkit ]; then rlkit=(.venv/bin/rlkit); else rlkit=(python3 -m rlkit); fi
"${rlkit[@]}" cleanup --all "$@"
# Scratch dirs of aborted base-image builds.
rm -rf /tmp/rlkit-base-* 2>/dev/null || true
