#!/usr/bin/env bash
# Thin shim over `rlkit dashboard` (same arguments): http://127.0.0.1:8090 over logs/ and harbor_trials/.
#   bash webui/start_dashboard.sh [CFG.env|DIR] [--port P] [--public]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -x "$ROOT/.venv/bin/rlkit" ]; then
  exec "$ROOT/.venv/bin/rlkit" dashboard "$@"
fi
command -v rlkit >/dev/null || { echo "rlkit is not installed: run bash scripts/setup.sh" >&2; exit 2; }
exec rlkit dashboard "$@"
