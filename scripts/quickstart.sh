#!/usr/bin/env bash
# Sets everything up (idempotent) and runs the main job on the embedded default:
# the bundled example config, the tiny locally-built policy warm-started on the bundled
# tasks, docker sandboxes, and the local trainer (TRAINER=local), all on this one machine.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=examples/configs/embedded.env
T0=$(date +%s); LAST=$T0; PHASES=""
phase_done() {  # one line per phase, and the table at the end (bench/quickstart_time.py reads them)
  local now; now=$(date +%s)
  echo "[quickstart] $1 done in $((now - LAST)) s ($((now - T0)) s in all)"
  PHASES="$PHASES$(printf '  %-12s %5s s' "$1" "$((now - LAST))")"$'\n'
  LAST=$now
}
# Installs, dockerd and the offline base image (mmdebstrap + docker import, cached by recipe hash),
# in parallel where they can be: see the top of scripts/setup.sh.
bash scripts/setup.sh --images
phase_done setup
export PATH="$PWD/.venv/bin:$PATH"
rlkit images build examples/tasks     # one image per bundled task (cached layers)
rlkit model tiny .rlkit/models/tiny-qwen3 >/dev/null
mkdir -p .rlkit/indexes
for split in train val; do
  rlkit index build examples/tasks -o ".rlkit/indexes/$split.parquet" --split "$split" --val-fraction 0.3 >/dev/null
done
phase_done images
# Warm start: a random tiny model never solves a task, so RL would have nothing to learn from.
# Cached by the task set, the base model and the settings: a second quickstart, or a fresh clone on this
# machine ($RLKIT_CACHE_DIR/warm-starts), skips it.
rlkit sft "$CONFIG" --model .rlkit/models/tiny-qwen3 --out .rlkit/models/tiny-qwen3-sft
phase_done "warm start"

status=0
bash scripts/train/train.sh "$CONFIG" || status=$?  # MODEL_PATH in the config: the warm-started policy
phase_done training

# Where things are (the names come from the config: OUTPUT_DIR, PROJECT_NAME, EXP_NAME).
eval "$(python - "$CONFIG" <<'PY'
import shlex, sys
from rlkit.config.resolve import resolve
r = resolve(sys.argv[1]); c = r.config
root = r.path("OUTPUT_DIR") or r.root
for k, v in {"OUT": root, "PROJ": c.PROJECT_NAME, "EXP": c.EXP_NAME}.items():
    print(f"{k}={shlex.quote(str(v))}")
PY
)"
echo
echo "Run $PROJ/$EXP (exit $status):"
echo "  metrics      $OUT/logs/$EXP.log  (verl console lines) and $OUT/logs/$EXP.jsonl"
echo "  vLLM         $OUT/logs/${EXP}_vllm.log"
echo "  trials       $OUT/harbor_trials/$PROJ/$EXP/step_<N>/  (summary.json per step)"
echo "  checkpoints  $OUT/checkpoints/$PROJ/$EXP/global_step_<N>/"
echo "Watch a run:   tail -F $OUT/logs/$EXP.log    or    rlkit status $CONFIG"
echo "Continue it:   bash scripts/train/train.sh $CONFIG   (RESUME_MODE=auto picks up the last checkpoint)"
echo
echo "Time, by phase ($(( $(date +%s) - T0 )) s in all):"
printf '%s' "$PHASES"
# The run's validation (VAL_FILES: the train tasks, VAL_N seeded attempts each) before and after RL.
python - "$CONFIG" <<'PY' || true
import sys
from rlkit.config.resolve import resolve
from rlkit.monitor.validation import before_after
line = before_after(resolve(sys.argv[1]).run_paths())
print(f"Train tasks, {line}" if line else "Train tasks: no validation before and after in this run's metrics")
PY
exit "$status"
