"""The agent mounted, not baked: one read-only docker volume per agent image, task images as built.

Real docker: the cc agent's image fills its volume once; a sandbox of a plain task image mounts it
read-only, finds `claude` on a login shell's PATH, and cannot change the mounted copy (the volume is
outside the overlay the tamper check reads, so a writable one would steer grading unseen). The image
profile the verifier trusts is the task image's alone, and an honest sandbox's start-time links are
not flagged."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import uuid
from pathlib import Path

import pytest

from rlkit.scaffolds import get_scaffold
from rlkit.scaffolds.bake import agent_mount
from rlkit.scaffolds.cc import CLAUDE_CODE_VERSION
from tests.sandbox._helpers import make_env, write_task

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def cc_image(base_image: str) -> str:
    from rlkit.scaffolds.bake import build_agent_image

    return build_agent_image("cc", log=lambda _m: None)


@pytest.fixture(scope="module")
def plain_task(tmp_path_factory: pytest.TempPathFactory, base_image: str) -> Path:
    return write_task(tmp_path_factory.mktemp("tasks"), "rlkit-test-mount")


def _volume_digest(volume: str, path: str) -> str:
    out = subprocess.run(["docker", "run", "--rm", "--network", "none", "-v", f"{volume}:/agent:ro",
                          "rlkit/base:bookworm", "sha256sum", f"/agent/{path}"],
                         check=True, capture_output=True, text=True).stdout
    return out.split()[0]


def _image_digest(image: str, path: str) -> str:
    container = subprocess.run(["docker", "create", image, "true"], check=True, capture_output=True,
                               text=True).stdout.strip()
    try:
        data = subprocess.run(["docker", "cp", f"{container}:{path}", "-"], check=True, capture_output=True).stdout
    finally:
        subprocess.run(["docker", "rm", "-f", container], check=False, capture_output=True)
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.extractfile(tar.getmembers()[0])
        assert member is not None
        return hashlib.sha256(member.read()).hexdigest()


def test_a_mounted_agent_runs_from_one_read_only_volume_the_grader_never_trusts(
        cc_image: str, plain_task: Path, tmp_path: Path) -> None:
    from rlkit.sandbox import tamper

    mount = agent_mount(get_scaffold("cc"))
    assert mount.image == cc_image
    project = f"test-{uuid.uuid4().hex[:8]}"

    async def scenario() -> dict:
        env = make_env(plain_task, tmp_path, project=project, agent_mount=mount.model_dump())
        await env.start(force_build=False)
        try:
            facts: dict = {"volume": env._agent_volume, "profile": env.image_profile}
            # A login shell resets PATH: the link in /usr/local/bin is what keeps `claude` on it.
            facts["version"] = await env.exec("bash -lc 'claude --version'", user="root", timeout_sec=120)
            honest = await tamper.snapshot(env)
            facts["honest"] = await tamper.judge(honest.changes, env.image_profile, honest.files, honest.workdir,
                                                 "/tests")
            writes = {
                "overwrite": "printf 'echo steered' > /opt/rlkit-agents/cc/claude",
                "add": "touch /opt/rlkit-agents/cc/conftest.py",
                "chmod": "chmod 777 /opt/rlkit-agents/cc/claude",
                "remount": "mount -o remount,rw /opt/rlkit-agents/cc",
                "unmount": "umount -l /opt/rlkit-agents/cc",
            }
            facts["writes"] = {k: await env.exec(cmd, user="root", timeout_sec=60) for k, cmd in writes.items()}
            facts["after"] = await env.exec("claude --version", user="root", timeout_sec=120)
            return facts
        finally:
            await env.stop(delete=True)

    facts = asyncio.run(scenario())
    assert CLAUDE_CODE_VERSION in (facts["version"].stdout or ""), facts["version"]
    # The verifier's profile is the task image's: nothing of the agent's tree is in it.
    profile = facts["profile"]
    assert "/opt/rlkit-agents" not in profile.model_dump_json() and "claude" not in profile.model_dump_json()
    # The start-time link is a new command that shadows nothing: an honest trial is not suspect.
    assert not facts["honest"].suspect, facts["honest"].findings
    for what, result in facts["writes"].items():
        assert result.return_code != 0, (what, result)
    assert CLAUDE_CODE_VERSION in (facts["after"].stdout or "")
    # The mounted copy is byte for byte the agent image's, after all that.
    assert _volume_digest(facts["volume"], "claude") == _image_digest(cc_image, "/opt/rlkit-agents/cc/claude")


def test_a_new_agent_image_fills_a_new_volume_and_cleanup_takes_the_old_one(cc_image: str, docker_api) -> None:
    """Caches follow the agent's version: an agent image under a new id (rebuilt or re-pinned) is a new volume;
    the one no agent image names any more is what `rlkit cleanup` removes, scoped to its project."""
    from rlkit.ops.cleanup import CleanupReport, clean_agent_volumes
    from rlkit.sandbox import agent_volume

    project = f"test-{uuid.uuid4().hex[:8]}"
    tag = f"rlkit-test/agent-cc:{uuid.uuid4().hex[:8]}"
    docker_api.tag(cc_image, tag.rsplit(":", 1)[0], tag.rsplit(":", 1)[1])
    mount = agent_mount(get_scaffold("cc")).model_copy(update={"image": tag})
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("RLKIT_PROJECT", project)
            first = agent_volume.ensure_agent_volume(docker_api, mount)
            assert agent_volume.ensure_agent_volume(docker_api, mount) == first  # filled once
            assert first in {v["Name"] for v in agent_volume.agent_volumes(docker_api)}
            report = CleanupReport()
            clean_agent_volumes(report, project)
            assert not report.removed  # the current agent image names it
            # A rebuilt agent: same tag, another id.
            subprocess.run(["docker", "build", "-q", "-t", tag, "--label", f"rebuilt={uuid.uuid4().hex}", "-"],
                           input=f"FROM {cc_image}\n", text=True, check=True, capture_output=True)
            patch.setattr(agent_volume, "_known_ids", {})  # the next process (a run, a command) looks again
            second = agent_volume.ensure_agent_volume(docker_api, mount)
            assert second != first
            other = CleanupReport()
            clean_agent_volumes(other, f"{project}-other")
            assert not other.removed  # another project's cleanup leaves them alone
            report = CleanupReport()
            clean_agent_volumes(report, project)
            assert [r.name for r in report.removed] == [first]
    finally:
        for volume in agent_volume.agent_volumes(docker_api):
            if volume["Labels"].get(agent_volume.AGENT_REF) == tag:
                docker_api.remove_volume(volume["Name"], force=True)
        subprocess.run(["docker", "rmi", "-f", tag], check=False, capture_output=True)
