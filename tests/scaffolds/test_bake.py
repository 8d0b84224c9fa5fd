"""Agent baking: image names, the per-task layer, and (with docker) the baked agents'
versions as harbor's install checks see them."""

from __future__ import annotations

import subprocess

import pytest

from rlkit.scaffolds import get_scaffold
from rlkit.scaffolds.bake import build_scaffold_image, scaffold_image_ref, scaffold_layer_dockerfile
from rlkit.scaffolds.cc import CLAUDE_CODE_VERSION
from rlkit.scaffolds.oc import OPENCODE_VERSION
from rlkit.scaffolds.ohsdk import OPENHANDS_SDK_VERSION


def test_scaffold_image_names_agree_with_task_image_naming() -> None:
    from rlkit.sandbox.images import task_image_ref

    for registry in (None, "registry.local:5000/team"):
        plain = task_image_ref("calc", registry)
        assert scaffold_image_ref(plain, "cc") == task_image_ref("calc", registry, variant="cc")
    assert scaffold_image_ref("ghcr.io/org/env:1.2", "oc") == "ghcr.io/org/env:1.2-oc"
    assert scaffold_image_ref("env", "ohsdk") == "env:ohsdk"


def test_layer_copies_the_agent_and_puts_it_on_path() -> None:
    dockerfile = scaffold_layer_dockerfile("rlkit-task/calc:latest", get_scaffold("cc"))
    assert dockerfile.startswith("FROM rlkit-task/calc:latest\n")
    assert f"COPY --from=rlkit/agent-cc:{CLAUDE_CODE_VERSION} /opt/rlkit-agents/cc /opt/rlkit-agents/cc" in dockerfile
    assert "ln -sf /opt/rlkit-agents/cc/claude /usr/local/bin/claude" in dockerfile
    ohsdk = scaffold_layer_dockerfile("rlkit-task/calc:latest", get_scaffold("ohsdk"))
    assert "/opt/openhands-sdk-venv /opt/openhands-sdk-venv" in ohsdk and "RUN ldconfig" in ohsdk


def test_terminus_needs_no_layer() -> None:
    from rlkit.scaffolds.bake import scaffold_layer

    assert build_scaffold_image("rlkit-task/calc:latest", "terminus", log=lambda _m: None) == "rlkit-task/calc:latest"
    outcome = scaffold_layer("terminus")("rlkit-task/calc:latest", None)
    assert (outcome.image, outcome.status) == ("rlkit-task/calc:latest", "skipped")


@pytest.mark.docker
@pytest.mark.slow  # the first run bakes every agent image (npm, a pip wheelhouse, CPython 3.12)
def test_baked_agents_answer_harbors_version_checks(baked_images: dict[str, str]) -> None:
    checks = {
        "cc": ('export PATH="$HOME/.local/bin:$PATH"; claude --version', CLAUDE_CODE_VERSION),
        "oc": ("[ -f ~/.nvm/nvm.sh ] && . ~/.nvm/nvm.sh; opencode --version", OPENCODE_VERSION),
        "ohsdk": ("/opt/openhands-sdk-venv/bin/python -c 'import openhands.sdk; print(openhands.sdk.__version__)'",
                  OPENHANDS_SDK_VERSION),
    }
    for name, (command, version) in checks.items():
        out = subprocess.run(["docker", "run", "--rm", "--network", "none", "-e", "OPENHANDS_SUPPRESS_BANNER=1",
                              baked_images[name], "bash", "-c", command],
                             capture_output=True, text=True, check=False, timeout=120)
        assert out.returncode == 0, out.stderr
        assert version in out.stdout, (name, out.stdout)
