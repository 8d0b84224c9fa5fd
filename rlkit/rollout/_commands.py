"""The shell the verifier runs after the agent: pure bash builtins to stop the agent's processes,
and the image's own tools, by absolute path, to reset the verifier's folders and undo caches."""

from __future__ import annotations

import re
import shlex
from typing import Any

from harbor.models.trial.paths import EnvironmentPaths

RM_CHUNK = 60_000  # bytes of paths per `rm` (one argument string stays far below 128 KiB)

# Kill every process except PID 1, the keep-alive and this shell. Freeze first (SIGSTOP,
# repeated until no new process shows up), then SIGKILL: a loop whose child is killed
# first could otherwise start one more step (`sleep 1; echo 1 > reward.txt`). Then count
# what still lives (zombies aside) until none does, and print it. Pure bash builtins (its one
# child is a fork of itself, for the empty pipe it waits on), so it runs no file the agent
# could have replaced.
# Under an init (docker --init, tini) the keep-alive is PID 1's oldest child, i.e. the
# lowest PID whose parent is 1.
KILL_LEFTOVERS = r"""
read -r init_comm < /proc/1/comm
keep=""
case "$init_comm" in
  sleep|pause) ;;
  *) for dir in /proc/[0-9]*; do
       pid=${dir#/proc/}
       [ "$pid" = 1 ] && continue
       while read -r key value; do
         if [ "$key" = "PPid:" ]; then
           if [ "$value" = 1 ] && { [ -z "$keep" ] || [ "$pid" -lt "$keep" ]; }; then keep=$pid; fi
           break
         fi
       done 2>/dev/null < "$dir/status"
     done ;;
esac
frozen=" "
for round in 1 2 3 4 5 6 7 8; do
  found=0
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    case " 1 $$ $keep$frozen" in *" $pid "*) continue ;; esac
    if kill -STOP "$pid" 2>/dev/null; then frozen="$frozen$pid "; found=1; fi
  done
  [ "$found" = 0 ] && break
done
for pid in $frozen; do kill -9 "$pid" 2>/dev/null; done
# SIGKILLed processes still read R until the scheduler runs them; on a loaded machine that takes
# longer than a burst of rescans, so wait (bash's own read -t on an empty pipe: no external sleep)
# up to 20 s for them to go.
exec 9<> <(:)
SECONDS=0
while :; do
  left=0 still=""
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    case " 1 $$ $keep " in *" $pid "*) continue ;; esac
    state=""
    while read -r key value; do
      if [ "$key" = "State:" ]; then state=${value%% *}; break; fi
    done 2>/dev/null < "$dir/status"
    case "$state" in ""|Z|X) continue ;; esac
    left=$((left + 1)); kill -9 "$pid" 2>/dev/null
    comm=""; read -r comm 2>/dev/null < "$dir/comm"
    still="$still
still $pid $state ${comm:-?}"
  done
  { [ "$left" = 0 ] || [ "$SECONDS" -ge 20 ]; } && break
  read -r -t 0.05 -u 9 _ 2>/dev/null
done
[ -n "$still" ] && echo "$still"
echo "left $left"
"""
LEFT = re.compile(r"^left (\d+)$", re.MULTILINE)
STILL = re.compile(r"^still (\d+) (\S+) (.*)$", re.MULTILINE)


def fresh_dirs_command(paths: EnvironmentPaths, tool: Any = str) -> str:
    verifier_dir, tests_dir = shlex.quote(str(paths.verifier_dir)), shlex.quote(str(paths.tests_dir))
    return (f"{tool('rm')} -rf -- {tests_dir} && {tool('mkdir')} -p {verifier_dir} && "
            f"{tool('find')} {verifier_dir} -mindepth 1 -delete && {tool('chmod')} 777 {verifier_dir}")


def undo_commands(remove: list[str], rebuild_loader_cache: bool, tool: Any) -> list[str]:
    """Commands that delete `remove` (bytecode caches) in argument-sized chunks, then rebuild ld.so.cache."""
    commands, chunk, size = [], [], 0
    for path in remove:
        if size + len(path) > RM_CHUNK and chunk:
            commands.append(f"{tool('rm')} -f -- {' '.join(chunk)}")
            chunk, size = [], 0
        chunk.append(shlex.quote(path))
        size += len(path) + 3
    if chunk:
        commands.append(f"{tool('rm')} -f -- {' '.join(chunk)}")
    if rebuild_loader_cache:
        commands.append(tool("ldconfig"))
    return commands
