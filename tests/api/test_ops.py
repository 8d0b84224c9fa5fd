"""`rlkit.cleanup` on real docker containers, `rlkit.ckpt_merge` (verl's merger) and `rlkit.ckpt_prune` on
checkpoints the embedded trainer's own code saved, and each command's --json = the API's result."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import rlkit
from rlkit.errors import UserError
from tests.api.conftest import as_json, cli_json
from tests.validate.helpers import Workspace


@pytest.mark.docker
def test_cleanup(ws: Workspace, base_image: str, docker_api, capsys: pytest.CaptureFixture[str]) -> None:
    from rlkit.sandbox import labels as L

    project = f"api-{uuid.uuid4().hex[:8]}"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # orphans of this uid: their owner is gone
    ids = [docker_api.create_container(base_image, command=["sleep", "60"], labels={
        L.MANAGED: "1", L.PROJECT: project, L.EXPERIMENT: "exp", L.OWNER_UID: str(os.getuid()),
        L.OWNER_PID: str(dead.pid)})["Id"] for _ in range(2)]
    try:
        # by the run config's PROJECT_NAME, given as an override; processes and /tmp left alone
        config = ws.config()
        dry = rlkit.cleanup(config, PROJECT_NAME=project, sandboxes_only=True, dry_run=True, k8s=False)
        assert dry.dry_run and [r.kind for r in dry.removed] == ["container", "container"]
        assert all(f"project={project}" in r.detail for r in dry.removed)
        assert len(docker_api.containers(all=True, filters={"label": f"rlkit.project={project}"})) == 2
        code, data = cli_json(capsys, "cleanup", str(config), "--set", f"PROJECT_NAME={project}", "--sandboxes-only",
                              "--dry-run", "--no-k8s")
        assert code == 0 and data == as_json(dry)

        done = rlkit.cleanup(project=project, sandboxes_only=True, k8s=False)
        assert sorted(r.name for r in done.removed) == sorted(r.name for r in dry.removed) and not done.errors
        assert docker_api.containers(all=True, filters={"label": f"rlkit.project={project}"}) == []
        assert rlkit.cleanup(project=project, sandboxes_only=True, k8s=False).nothing_done
        with pytest.raises(UserError, match="force needs an experiment") as refused:
            rlkit.cleanup(project=project, force=True)
        assert refused.value.key == "--force" and refused.value.fix
    finally:
        import docker.errors

        for cid in ids:
            with contextlib.suppress(docker.errors.NotFound):  # removed by the test
                docker_api.remove_container(cid, force=True)


@pytest.fixture(scope="module")
def ckpts(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """Three saved steps (1, 2, 3) of a tiny PolicyUpdater, as the embedded trainer saves them."""
    from rlkit.train.checkpoint import save_checkpoint
    from tests.train.test_checkpoint import trained

    updater = trained(tiny_model_dir, steps=1)
    root = tmp_path_factory.mktemp("ckpt") / "checkpoints" / "proj" / "exp"
    for step in (1, 2, 3):
        save_checkpoint(root, step, updater, {"step": step})
    return root, updater


def test_ckpt_merge(ckpts, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch
    from safetensors.torch import load_file

    root, updater = ckpts
    merged = rlkit.ckpt_merge(root, tmp_path / "merged")  # the run folder: its latest step
    assert merged.actor == root / "global_step_3" / "actor" and merged.target == tmp_path / "merged"
    assert merged.command[1:4] == ["-m", "verl.model_merger", "merge"]
    weights = {}
    for file in merged.target.glob("*.safetensors"):
        weights.update(load_file(file))
    for key, value in updater.full_state_dict().items():
        torch.testing.assert_close(weights[key], value.to(torch.bfloat16), rtol=0, atol=0, msg=key)
    code, data = cli_json(capsys, "ckpt", "merge", str(root), "-o", str(tmp_path / "merged"))
    assert code == 0 and data == as_json(merged)


def test_ckpt_prune(ckpts, ws: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = ckpts
    optim = {s: root / f"global_step_{s}" / "actor" / "optim_world_size_1_rank_0.pt" for s in (1, 2, 3)}
    size = optim[1].stat().st_size
    # by run config: checkpoints/<PROJECT_NAME>/<EXP_NAME> under OUTPUT_DIR, here given as overrides
    config = ws.config()
    preview = rlkit.ckpt_prune(config, OUTPUT_DIR=str(root.parents[2]))
    assert preview.shards == [optim[1], optim[2]] and preview.kept_latest == 3 and not preview.deleted
    assert preview.sizes == [size, size] and all(p.is_file() for p in optim.values())
    code, data = cli_json(capsys, "ckpt", "prune", str(config), "--set", f"OUTPUT_DIR={root.parents[2]}")
    assert code == 0 and data == as_json(preview)

    done = rlkit.ckpt_prune(root, yes=True)
    assert done.deleted and done.freed == 2 * size and not optim[1].exists() and optim[3].is_file()
    code, data = cli_json(capsys, "ckpt", "prune", str(root), "--yes")
    assert code == 0 and data == {**as_json(done), "shards": [], "bytes": 0, "freed": 0}  # nothing left to prune
