#!/usr/bin/env bash
# Sets everything up (idempotent) and runs the main job on the embedded default:
# the bundled example config, the tiny locally-built policy, the bundled tasks and
# docker sandboxes, all on this one machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
rlkit images dockerd
rlkit images base                     # offline: debootstrap + docker import, cached by recipe hash
rlkit images build examples/tasks     # one image per bundled task (cached layers)
rlkit model tiny .rlkit/models/tiny-qwen3 >/dev/null
mkdir -p .rlkit/indexes
for split in train val; do
  rlkit index build examples/tasks -o ".rlkit/indexes/$split.parquet" --split "$split" --val-fraction 0.3 >/dev/null
done
# Until the training loop lands, the embedded default's job is its preflight.
PREFLIGHT_ONLY=1 exec bash scripts/train/train.sh examples/configs/embedded.env
