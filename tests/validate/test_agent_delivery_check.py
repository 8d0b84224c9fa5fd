"""`rlkit check` names how the scaffold's agent reaches each sandbox (AGENT_DELIVERY)."""

from __future__ import annotations

import pytest

from rlkit.sandbox import agent_volume
from tests.sandbox.fake_k8s import FakeCoreV1Api


def test_docker_check_names_the_mounted_or_baked_agent(ws) -> None:
    report = ws.preflight(ws.config(SCAFFOLD="ohsdk", BACKEND="docker"), only=["agent_delivery"])
    [finding] = report.by_check("agent_delivery")
    assert "mounted read-only from one docker volume" in finding.message and "rlkit/agent-ohsdk:" in finding.message
    baked = ws.preflight(ws.config(SCAFFOLD="ohsdk", BACKEND="docker", AGENT_DELIVERY="bake"), only=["agent_delivery"])
    assert "baked" in baked.by_check("agent_delivery")[0].message
    host = ws.preflight(ws.config(SCAFFOLD="terminus", BACKEND="docker"), only=["agent_delivery"])
    assert "runs on the host" in host.by_check("agent_delivery")[0].message


@pytest.mark.fake_k8s
def test_fake_k8s_check_names_image_volume_or_init_container(monkeypatch: pytest.MonkeyPatch, ws) -> None:
    """Asked of the API server by a dry run (here a fake one): an image volume where it keeps the field,
    else an init container filling an emptyDir (a warning: every pod copies the agent)."""
    from rlkit.validate import agents

    for keeps, expected, status in ((True, "image volume", "ok"), (False, "init container", "warn")):
        monkeypatch.setattr(agent_volume, "_k8s_choices", {})
        monkeypatch.setattr(agents, "_core_api", lambda ctx, keeps=keeps: FakeCoreV1Api(image_volumes=keeps))
        report = ws.preflight(ws.config(SCAFFOLD="cc", BACKEND="k8s"), only=["agent_delivery"])
        [finding] = report.by_check("agent_delivery")
        assert expected in finding.message and finding.status.value.lower() == status, finding
    report = ws.preflight(ws.config(SCAFFOLD="cc", BACKEND="k8s", AGENT_DELIVERY="bake"), only=["agent_delivery"])
    assert "baked" in report.by_check("agent_delivery")[0].message
