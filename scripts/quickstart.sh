#!/usr/bin/env bash
# Sets everything up (idempotent) and runs the main job on the embedded default:
# the bundled example config, the tiny locally-built policy and the bundled tasks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
.venv/bin/rlkit model tiny .rlkit/models/tiny-qwen3 >/dev/null
# Until the training loop lands, the embedded default's job is its preflight.
PREFLIGHT_ONLY=1 exec bash scripts/train/train.sh examples/configs/embedded.env
