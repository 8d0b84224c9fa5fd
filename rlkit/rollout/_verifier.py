"""harbor's verifier, run on a clean slate.

harbor's `Verifier` already deletes reward.txt / reward.json before the tests run and
copies tests/ in only after the agent. This subclass closes the remaining ways an agent
could influence its own grade, then hands over to harbor unchanged:

* processes the agent left running (e.g. a background loop that writes reward.txt once
  the verifier has started) are killed;
* /logs/verifier is emptied (not just the two reward files) and /tests removed, so a
  pytest.ini or conftest.py planted there cannot change how the tests run.

Then the sandbox is compared with its image (`rlkit.sandbox.tamper`): changes that can
steer the tests from outside /tests (a /conftest.py, a pytest.py beside the working dir,
a .pth in site-packages, ...) stop the trial before its tests run with
`TamperSuspectError`, which the trial runner turns into the `tamper_suspect` outcome. The
changed paths are written to `<trial>/sandbox_changes.json` either way.

The clean-up replaces harbor's own reward-file removal (same hook, one exec). It also
records why verification failed, keyed by trial directory: harbor keeps only the
first exception of a trial, so a verifier failure after an agent timeout would be lost.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import override

from harbor.models.trial.paths import EnvironmentPaths
from harbor.models.verifier.result import VerifierResult
from harbor.verifier.verifier import Verifier

CHANGES_FILE = "sandbox_changes.json"
_log = logging.getLogger(__name__)

# trial_dir -> exception type name of the verifier failure ("CancelledError" = harbor's timeout fired)
VERIFIER_FAILURES: dict[str, str] = {}

# Kill every process except PID 1, the keep-alive and this shell. Freeze first (SIGSTOP,
# repeated until no new process shows up), then SIGKILL: a loop whose child is killed
# first could otherwise start one more step (`sleep 1; echo 1 > reward.txt`). Pure bash
# builtins, so this shell starts no child of its own. Under an init (docker --init,
# tini) the keep-alive is PID 1's oldest child, i.e. the lowest PID whose parent is 1.
_KILL_LEFTOVERS = r"""
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
       done < "$dir/status" 2>/dev/null
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
true
"""


def _fresh_dirs_command(paths: EnvironmentPaths) -> str:
    verifier_dir, tests_dir = str(paths.verifier_dir), str(paths.tests_dir)
    return (f"rm -rf -- {tests_dir} && mkdir -p {verifier_dir} && "
            f"find {verifier_dir} -mindepth 1 -delete && chmod 777 {verifier_dir}")


# What a test.sh that downloads its tools at grading time prints when there is no network
# (curl, wget, pip, uv, apt, npm, Python's socket errors). A reward of 0 with one of these is
# the task's fault, not a wrong answer.
_NETWORK_ERRORS = re.compile(
    r"Could not resolve host|Temporary failure in name resolution|Name or service not known|"
    r"Network is unreachable|Failed to establish a new connection|Failed to connect to |"
    r"unable to resolve host address|Could not fetch URL|No matching distribution found for|"
    r"Failed to download|failed to lookup address|dns error|getaddrinfo (?:ENOTFOUND|EAI_AGAIN)|"
    r"Temporary failure resolving|Could not connect to [\w.-]+:\d+|ERR_SOCKET_TIMEOUT|"
    r"curl: \((?:5|6|7|28)\)")


def grading_network_failure(test_stdout: Path) -> str | None:
    """The first network-failure line of a test run's output, if any."""
    try:
        text = test_stdout.read_text(errors="replace")[-200_000:]
    except OSError:
        return None
    match = _NETWORK_ERRORS.search(text)
    return match.group(0) if match else None


class VerifierNetworkError(RuntimeError):
    """The tests scored 0 because they could not reach the network (a task fault: verifier_error)."""


class TamperSuspectError(RuntimeError):
    """The agent changed files that can steer the verifier; the tests were not run."""


class GuardedVerifier(Verifier):
    """`harbor.verifier.Verifier` after killing leftover agent processes and clearing its dirs."""

    @override
    async def verify(self) -> VerifierResult:
        key = str(self.trial_paths.trial_dir)
        VERIFIER_FAILURES.pop(key, None)
        try:
            result = await super().verify()
            if not any(float(v) > 0 for v in (result.rewards or {}).values()):
                network_failure = grading_network_failure(self.trial_paths.test_stdout_path)
                if network_failure:
                    raise VerifierNetworkError(
                        f"the tests failed reaching the network at grading time ({network_failure!r} in "
                        "test-stdout.txt): the task's test.sh downloads tools; bake them into its image")
            return result
        except BaseException as exc:
            VERIFIER_FAILURES[key] = type(exc).__name__
            raise

    @override
    async def _remove_reward_files(self) -> None:
        """harbor's first step of verify() (delete stale reward files), widened to a clean slate.

        One exec does all of it: every sandbox round trip is paid by every trial."""
        paths = EnvironmentPaths.for_os(self.environment.os)
        command = f"{_KILL_LEFTOVERS}\n{_fresh_dirs_command(paths)}"
        result = await self.environment.exec(command=command, user="root")
        if result.return_code != 0:
            raise RuntimeError(f"cannot reset {paths.verifier_dir}: {result.stderr or result.stdout}")
        await self._check_tampering(str(paths.tests_dir))
        if not self.environment.is_path_mounted(paths.verifier_dir, self.trial_paths.verifier_dir):
            self.trial_paths.reward_text_path.unlink(missing_ok=True)
            self.trial_paths.reward_json_path.unlink(missing_ok=True)

    async def _check_tampering(self, tests_dir: str) -> None:
        """After the agent's processes are gone, before the tests: compare the sandbox with its image."""
        from rlkit.sandbox import tamper

        snapshot = await tamper.snapshot(self.environment)
        if snapshot is None:
            _log.info("no tamper check: the %s backend cannot list its changes", self.environment.type())
            return
        findings = tamper.classify(snapshot.changes, snapshot.workdir, tests_dir)
        record = tamper.report(snapshot.changes, findings, snapshot.workdir, snapshot.source)
        self.trial_paths.trial_dir.joinpath(CHANGES_FILE).write_text(json.dumps(record, indent=1) + "\n")
        if findings:
            shown = ", ".join(f"{f.kind} {f.path} ({f.rule})" for f in findings[:5])
            more = f" and {len(findings) - 5} more" if len(findings) > 5 else ""
            raise TamperSuspectError(f"the agent changed files that can steer the tests: {shown}{more}")
