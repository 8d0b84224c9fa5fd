"""harbor's verifier, run so that nothing the agent left can steer it.

harbor's `Verifier` deletes the reward files and copies tests/ in after the agent, then runs
`test.sh` through whatever `bash`, `chmod` and `python3` come first on PATH. rlkit's runs
nothing the agent could have replaced:

1. The agent's processes are stopped (pure bash builtins, in the image's bash, which a first
   look at the changes found unchanged where that look needs no exec: docker's overlay, read
   on the host). A loop that writes reward.txt once the tests finished dies here; processes
   that cannot be stopped stop the trial.
2. The sandbox is compared with its image (`rlkit.sandbox.tamper`): changes that can steer
   the tests (a shadowing module or command, start-up code, a changed interpreter, test
   runner, library or verifier tool, ...) stop the trial before its tests run with
   `TamperSuspectError` (the `tamper_suspect` outcome). The changes and the verdict are
   written to `<trial>/sandbox_changes.json` either way.
3. Then everything runs by the absolute path of the image's own binaries, which step 2 found
   unchanged: /tests and /logs/verifier are made fresh, bytecode caches the agent's processes
   wrote under the interpreters are removed (a changed loader cache is rebuilt), the tests
   are uploaded, made executable and run in a fixed environment (the image's PATH, the image
   user's HOME, no user site, no auto-loaded pytest plugins unless the image installed some)
   that shares nothing with the agent's session. The reward is read on the host.

A backend rlkit cannot check (a user's `pkg.mod:Environment`) gets harbor's flow after steps
1 and the fresh dirs. Verifier failures are recorded by trial directory: harbor keeps only
the first exception of a trial, so a verifier failure after an agent timeout would be lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, override

from harbor.models.trial.paths import EnvironmentPaths
from harbor.models.verifier.result import VerifierResult
from harbor.utils.env import resolve_env_vars
from harbor.utils.file_staging import selected_directory
from harbor.utils.scripts import build_execution_command, needs_chmod, quote_shell_arg
from harbor.verifier.verifier import (
    AddTestsDirError,
    DownloadVerifierDirError,
    RewardFileNotFoundError,
    Verifier,
)

from rlkit.config.files import FileReadError, read_bytes, read_text
from rlkit.rollout._commands import KILL_LEFTOVERS, LEFT, STILL, fresh_dirs_command, undo_commands
from rlkit.rollout._test_record import RecordPlan, TestsMissingError, collected_count, read_junit
from rlkit.rollout._test_record import plan as record_plan
from rlkit.rollout._test_record import verdict as record_verdict
from rlkit.sandbox import tamper
from rlkit.tasks.grading import read_grading_spec

CHANGES_FILE = "sandbox_changes.json"
RECORD_FILE = "test-record.xml"  # the verifier's own junit record, kept in the trial's verifier/ folder
_log = logging.getLogger(__name__)

# trial_dir -> exception type name of the verifier failure ("CancelledError" = harbor's timeout fired)
VERIFIER_FAILURES: dict[str, str] = {}

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


# pytest's answer to an option of a plugin that did not load (PYTEST_DISABLE_PLUGIN_AUTOLOAD).
_PLUGIN_OPTION = re.compile(r"error: unrecognized arguments: (-\S+)")


class VerifierPluginError(RuntimeError):
    """The tests scored 0 because they need a pytest plugin the image does not install (a task fault)."""


@dataclass
class _Tests:
    """The task's tests, and how their run is recorded."""

    source_dirs: list[Path]
    source_dir: Path
    host_test_path: Path
    recording: RecordPlan

    def script(self, verifier: Verifier) -> str:
        paths = EnvironmentPaths.for_os(verifier.environment.os)
        return str(paths.tests_dir / self.host_test_path.relative_to(self.source_dir).as_posix())


# (image id, digest of the tests) -> tests test.sh's pytest collects from the pristine files: one
# collection per task image and tests, not one per trial
_PRISTINE: dict[tuple[str, str], int | None] = {}


def _tests_digest(source_dirs: list[Path]) -> str:
    digest = hashlib.sha256()
    for folder in source_dirs:
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
            digest.update(f"{path.relative_to(folder)}\0{path.stat().st_mode & 0o111}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _read_script(path: Path) -> str:
    try:
        return read_text(path, max_bytes=1 << 20)
    except FileReadError:
        return ""


class TamperSuspectError(RuntimeError):
    """The agent changed files that can steer the verifier; the tests were not run."""


class GuardedVerifier(Verifier):
    """`harbor.verifier.Verifier` that runs only the image's own, unchanged binaries."""

    @override
    async def verify(self) -> VerifierResult:
        key = str(self.trial_paths.trial_dir)
        VERIFIER_FAILURES.pop(key, None)
        try:
            profile = getattr(self.environment, "image_profile", None)
            if profile is None:
                _log.info("no tamper check: the %s backend has no image profile", self.environment.type())
                result = await super().verify()
            else:
                result = await self._verify_checked(profile)
            if not any(float(v) > 0 for v in (result.rewards or {}).values()):
                network_failure = grading_network_failure(self.trial_paths.test_stdout_path)
                if network_failure:
                    raise VerifierNetworkError(
                        f"the tests failed reaching the network at grading time ({network_failure!r} in "
                        "test-stdout.txt): the task's test.sh downloads tools; bake them into its image")
                if profile is not None and "PYTEST_DISABLE_PLUGIN_AUTOLOAD" in profile.grading_env():
                    self._raise_on_missing_plugin()
            return result
        except BaseException as exc:
            VERIFIER_FAILURES[key] = type(exc).__name__
            raise

    def _raise_on_missing_plugin(self) -> None:
        try:
            text = self.trial_paths.test_stdout_path.read_text(errors="replace")[-200_000:]
        except OSError:
            return
        match = _PLUGIN_OPTION.search(text)
        if match:
            raise VerifierPluginError(
                f"pytest did not know {match.group(1)}: the tests need a pytest plugin the image does not install "
                "(grading runs with PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 unless the image itself installed plugins); "
                "install it in the task's image")

    async def _exec(self, command: str, profile: Any, on: Any = None, **kwargs: Any) -> Any:
        return await (on or self.environment).exec(command=command, shell=profile.tool("bash"), **kwargs)

    async def _verify_checked(self, profile: Any) -> VerifierResult:
        paths = EnvironmentPaths.for_os(self.environment.os)
        test_source_dirs, tests_source_dir, host_test_path = self._resolve_tests()
        tests_dir = str(paths.tests_dir)
        test_sh = _read_script(host_test_path)
        workdir = self.environment.task_env_config.workdir or profile.workdir
        spec = read_grading_spec(self.task.paths.task_dir)
        clean = spec.mode_for(workdir) == "clean" and hasattr(self.environment, "clean_copy")
        product = spec.product_paths(workdir) if clean else None
        scope = tamper.config_scope(test_sh, workdir)
        grading = {"mode": "clean" if clean else "in-place", "work_product": product or []}
        # Where the change list costs no exec (the overlay, read on the host), judge before
        # running anything at all: the kill below already runs the image's bash.
        await self._check_tampering(profile, tests_dir, left=0, host_only=True, scope=scope, only=product)
        stopped = await self._exec(KILL_LEFTOVERS, profile, user="root")
        left = LEFT.search(stopped.stdout or "")
        # Again once nothing of the agent runs: the upper layer keeps every change made meanwhile.
        still = ", ".join(f"{comm} (pid {pid}, state {state})"
                          for pid, state, comm in STILL.findall(stopped.stdout or "")[:5])
        verdict = await self._check_tampering(profile, tests_dir, int(left.group(1)) if left else -1, still=still,
                                              scope=scope, only=product, grading=grading)
        recording = record_plan(test_sh)
        tests = _Tests(test_source_dirs, tests_source_dir, host_test_path, recording)
        if not clean:
            undo = undo_commands(verdict.remove, verdict.rebuild_loader_cache, profile.tool)
            return await self._graded(self.environment, profile, tests, undo, None, grading)
        clock = time.perf_counter()
        # the clean container starts while the product is read out (both are dockerd's work)
        starting = asyncio.ensure_future(self.environment.clean_copy())
        try:
            carried = [await self.environment.carry_out(path, spec.work_product_max_mb << 20)
                       for path in product or []]
        except BaseException:
            with contextlib.suppress(Exception):
                await (await starting).stop(delete=True)
            raise
        grading["carried"] = [c.summary() for c in carried]
        grader = await starting
        seconds = grading["seconds"] = {"carry_and_start": round(time.perf_counter() - clock, 3)}
        try:
            expected = None
            if recording.kind == "pytest":
                clock = time.perf_counter()
                key = (profile.key, _tests_digest(test_source_dirs))
                expected = _PRISTINE[key] if key in _PRISTINE else await self._pristine_count(grader, profile, tests)
                _PRISTINE[key] = expected
                seconds["pristine_count"] = round(time.perf_counter() - clock, 3)
            grading["pristine_tests"] = expected
            tool = profile.tool
            # empty a folder rather than remove it: the container's shells keep it as their working dir
            clear = " && ".join(
                f"if [ -d {q} ] && [ ! -L {q} ]; then {tool('find')} {q} -mindepth 1 -delete; "
                f"else {tool('rm')} -rf -- {q}; fi" for q in (shlex.quote(c.path) for c in carried))
            result = await self._exec(clear, profile, user="root", on=grader)
            if result.return_code != 0:
                raise RuntimeError(f"cannot clear the work product's paths: {result.stderr or result.stdout}")
            for item in carried:
                if not item.missing:
                    await grader.put_archive(item.archive)
            return await self._graded(grader, profile, tests, [], expected, grading)
        finally:
            await grader.stop(delete=True)

    async def _pristine_count(self, grader: Any, profile: Any, tests: _Tests) -> int | None:
        """The tests test.sh's pytest collects in the clean container before the work product is in."""
        await self._prepare(grader, profile, tests, [])
        env = {**profile.grading_env(self.environment.default_user), **self._task_env()}
        env |= tests.recording.env(env, collect=True)
        result = await self._exec(build_execution_command(tests.script(self), task_os=self.environment.os),
                                  profile, env=env, on=grader)
        return collected_count(f"{result.stdout or ''}\n{result.stderr or ''}")

    async def _prepare(self, env_: Any, profile: Any, tests: _Tests, undo: list[str]) -> None:
        paths = EnvironmentPaths.for_os(self.environment.os)
        tool = profile.tool
        prepare = [fresh_dirs_command(paths, tool), *undo]
        if tests.recording.kind == "pytest":
            folder = shlex.quote(tests.recording.folder)
            prepare.append(f"{tool('rm')} -rf -- {folder} && {tool('mkdir')} -p {folder} && "
                           f"{tool('chmod')} 777 {folder}")
        result = await self._exec(" && ".join(prepare), profile, user="root", on=env_)
        if result.return_code != 0:
            raise RuntimeError(f"cannot reset {paths.verifier_dir}: {result.stderr or result.stdout}")
        await self._upload_tests(tests.source_dirs, tests.host_test_path, str(paths.tests_dir), on=env_)
        script = tests.script(self)
        if needs_chmod(script):
            await self._exec(f"{tool('chmod')} +x {quote_shell_arg(script, self.environment.os)}",
                             profile, user="root", on=env_)

    async def _graded(self, env_: Any, profile: Any, tests: _Tests, undo: list[str], expected: int | None,
                      grading: dict[str, Any]) -> VerifierResult:
        """Run the tests in `env_` (the agent's sandbox, or the clean one) and read the reward."""
        paths = EnvironmentPaths.for_os(self.environment.os)
        await self._prepare(env_, profile, tests, undo)
        mounted = env_.is_path_mounted(paths.verifier_dir, self.trial_paths.verifier_dir)
        if not mounted:
            self.trial_paths.reward_text_path.unlink(missing_ok=True)
            self.trial_paths.reward_json_path.unlink(missing_ok=True)
        stdout_path = str(paths.verifier_dir / self.trial_paths.test_stdout_path.relative_to(
            self.trial_paths.verifier_dir).as_posix())
        env = {**profile.grading_env(self.environment.default_user), **self._task_env()}
        if tests.recording.kind == "pytest":
            env |= tests.recording.env(env)
        await self._exec(build_execution_command(tests.script(self), stdout_path=stdout_path,
                                                 task_os=self.environment.os), profile, env=env, on=env_)
        if not mounted:
            await self._download_verifier_dir(str(paths.verifier_dir), on=env_)
        if self.trial_paths.reward_json_path.exists():
            result = VerifierResult(rewards=self._parse_reward_json())
        elif self.trial_paths.reward_text_path.exists():
            result = VerifierResult(rewards=self._parse_reward_text())
        else:
            raise RewardFileNotFoundError(f"No reward file found at {self.trial_paths.reward_text_path} or "
                                          f"{self.trial_paths.reward_json_path}")
        grading["record"] = tests.recording.kind
        if tests.recording.kind != "pytest":
            grading["record_note"] = tests.recording.why
            self._write_grading(grading)
            return result
        record = read_junit(await self._fetch_record(env_, tests.recording.file))
        grading["recorded"] = {"present": record.present, "tests": record.tests, "passed": record.passed,
                               "not_passed": record.not_passed}
        rewards = result.rewards or {}
        reward = float(rewards["reward"]) if "reward" in rewards else (
            sum(map(float, rewards.values())) / len(rewards) if rewards else 0.0)
        problem = record_verdict(reward, record, expected)
        grading["record_verdict"] = problem
        self._write_grading(grading)
        if problem:
            raise TestsMissingError(f"the tests gave reward {reward:g}, but {problem}")
        return result

    async def _fetch_record(self, env_: Any, source: str) -> bytes | None:
        """The verifier's junit record, copied to the trial's verifier/ folder (None: absent)."""
        target = self.trial_paths.verifier_dir / RECORD_FILE
        target.unlink(missing_ok=True)
        try:
            await env_.download_file(source, target)
            return read_bytes(target, max_bytes=64 << 20)
        except (OSError, FileReadError):
            return None
        except Exception as exc:  # noqa: BLE001 -- a backend's own error for a missing file: no record
            _log.info("no test record at %s: %s", source, exc)
            return None

    def _write_grading(self, grading: dict[str, Any]) -> None:
        """Add how the trial was graded to its `sandbox_changes.json`."""
        path = self.trial_paths.trial_dir / CHANGES_FILE
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            record = {}
        record["grading"] = grading
        path.write_text(json.dumps(record, indent=1) + "\n")

    def _task_env(self) -> dict[str, str]:
        """The task's own verifier env (harbor's: task config < verifier env < overrides)."""
        merged = {**self.task.config.verifier.env, **(self.verifier_env or {}), **self.override_env}
        return resolve_env_vars(merged) if merged else {}

    async def _upload_tests(self, source_dirs: list[Path], host_test_path: Path, target: str, on: Any = None) -> None:
        if self._skip_tests_upload:
            return
        self.task.file_filter.require_included(host_test_path)
        try:
            for source in source_dirs:
                selection = self.task.file_filter.select(source)
                if not selection.relative_paths:
                    continue
                with selected_directory(selection) as staged:
                    await (on or self.environment).upload_dir(source_dir=staged, target_dir=target)
        except Exception as exc:
            raise AddTestsDirError("Failed to add tests directory to environment.") from exc

    async def _download_verifier_dir(self, source: str, on: Any = None) -> None:
        environment = on or self.environment
        try:
            if self.include_logs or self.exclude_logs:
                await environment.download_dir_filtered(
                    source_dir=source, target_dir=self.trial_paths.verifier_dir,
                    include=self.include_logs or None, exclude=self.exclude_logs or None,
                    protect=[self.trial_paths.reward_text_path.name, self.trial_paths.reward_json_path.name])
            else:
                await environment.download_dir(source_dir=source, target_dir=self.trial_paths.verifier_dir)
        except Exception as exc:
            raise DownloadVerifierDirError("Failed to download verifier directory from environment") from exc

    @override
    async def _remove_reward_files(self) -> None:
        """harbor's first step of verify() (delete stale reward files), widened to a clean slate,
        for a backend without an image profile (harbor's flow otherwise unchanged)."""
        paths = EnvironmentPaths.for_os(self.environment.os)
        command = f"{KILL_LEFTOVERS}\n{fresh_dirs_command(paths)}"
        result = await self.environment.exec(command=command, user="root")
        if result.return_code != 0:
            raise RuntimeError(f"cannot reset {paths.verifier_dir}: {result.stderr or result.stdout}")
        if not self.environment.is_path_mounted(paths.verifier_dir, self.trial_paths.verifier_dir):
            self.trial_paths.reward_text_path.unlink(missing_ok=True)
            self.trial_paths.reward_json_path.unlink(missing_ok=True)

    async def _check_tampering(self, profile: Any, tests_dir: str, left: int, host_only: bool = False,
                               still: str = "", scope: Any = None, only: list[str] | None = None,
                               grading: dict[str, Any] | None = None) -> Any:
        """Judge the sandbox against its image (None: `host_only` and the changes cannot be read on the host);
        `only`: the changes under these paths (the work product a clean container gets), the rest is left behind.

        Raises TamperSuspectError on any finding; the trial folder keeps the last judgement."""
        snapshot = await tamper.snapshot(self.environment, host_only=host_only)
        if snapshot is None:
            if host_only:
                return None
            raise RuntimeError(f"the {self.environment.type()} backend has an image profile but lists no changes")
        changes = snapshot.changes
        if only is not None:
            changes = [c for c in changes if any(c.path == p or c.path.startswith(p.rstrip("/") + "/") for p in only)]
        verdict = await tamper.judge(changes, profile, snapshot.files, snapshot.workdir, tests_dir,
                                     scope or tamper.UNKNOWN)
        if left != 0:
            verdict.findings.append(tamper.Finding("/proc", "?", "processes_left",
                                                   f"{left if left > 0 else 'some'} agent processes could not "
                                                   f"be stopped{': ' + still if still else ''}"))
        record = tamper.report(snapshot.changes, verdict, snapshot.workdir, snapshot.source, profile.key)
        if grading is not None:
            record["grading"] = grading
        self.trial_paths.trial_dir.joinpath(CHANGES_FILE).write_text(json.dumps(record, indent=1) + "\n")
        if verdict.findings:
            shown = ", ".join(f"{f.kind} {f.path} ({f.rule})" for f in verdict.findings[:5])
            more = f" and {len(verdict.findings) - 5} more" if len(verdict.findings) > 5 else ""
            raise TamperSuspectError(f"the agent changed files that can steer the tests: {shown}{more}")
        return verdict
