from __future__ import annotations

from pathlib import Path

from rlkit.config.resolve import render_block, resolve
from rlkit.config.schema import KEYS, Layer, VerlTrainerMode


def test_layers_override_in_order(ws) -> None:
    ws.write_site(MAX_SANDBOXES=7, LOGGER="console")
    cfg = ws.config(TRAINING_MODE="async", NNODES=2, N_NODES_TRAIN=1, N_NODES_ROLLOUT=1, LOGGER="console,file")
    r = resolve(cfg, ws.environ(DRY_RUN="1", PROJECT_NAME="from-env"))
    v = r.values
    assert v["EP_SIZE"].layer is Layer.DEFAULT and v["EP_SIZE"].where == "built-in"
    assert v["RAY_PORT"].layer is Layer.SITE and v["RAY_PORT"].where.startswith(str(ws.site))
    # backend/docker.env sets MAX_SANDBOXES=4 above site.env's 7
    assert v["MAX_SANDBOXES"].layer is Layer.AXIS and r.config.MAX_SANDBOXES == 4
    assert r.config.VERL_TRAINER_MODE is VerlTrainerMode.SEPARATE_ASYNC  # from mode/async.env
    assert v["LOGGER"].layer is Layer.RUN and v["LOGGER"].where == f"{cfg}:{list(cfg.read_text().splitlines()).index('LOGGER=console,file') + 1}"
    assert v["DRY_RUN"].layer is Layer.PROCESS and r.config.DRY_RUN is True
    # only process-layer keys are read from the environment
    assert r.config.PROJECT_NAME == "proj"
    assert set(r.values) == set(KEYS)


def test_axis_modules_follow_the_axis_values(ws) -> None:
    r = resolve(ws.config(SCAFFOLD="cc", MODEL_ENGINE="veomni"), ws.environ())
    assert r.config.HARBOR_AGENT == "claude-code" and r.config.AGENT_API.value == "anthropic"
    assert r.config.VERL_MODEL_ENGINE.value == "veomni"
    assert any(f.endswith("scaffold/cc.env") for f in r.layer_files[Layer.AXIS])


def test_references_expand_across_layers(ws) -> None:
    ws.write_site(SHARED_DIR="/mnt/shared")
    cfg = ws.config(TRAIN_FILES="${SHARED_DIR}/idx/train.parquet", EXP_NAME="${PROJECT_NAME}-v2",
                    MAX_RESP="${MAX_PROMPT}")
    r = resolve(cfg, ws.environ())
    assert r.config.TRAIN_FILES == "/mnt/shared/idx/train.parquet"
    assert r.config.EXP_NAME == "proj-v2" and r.config.MAX_RESP == 1024
    # default N_NODES_TRAIN is ${NNODES}
    r2 = resolve(ws.config(NNODES=3, N_NODES_TRAIN=None), ws.environ())
    assert r2.config.N_NODES_TRAIN == 3 and not r2.errors


def test_bad_references_and_cycles_are_errors(ws) -> None:
    r = resolve(ws.config(EXP_NAME="${PROJET_NAME}", LOGGER="${OUTPUT_DIR}", OUTPUT_DIR="${LOGGER}"), ws.environ())
    messages = " | ".join(e.message for e in r.errors)
    assert "${PROJET_NAME} is not a config key" in messages
    assert any("PROJECT_NAME" in e.fix for e in r.errors)
    assert "circular reference" in messages
    assert all(e.file and e.line for e in r.errors)


def test_type_errors_name_the_line_and_fall_back(ws) -> None:
    cfg = ws.config(TRAIN_BSZ="lots", SCAFFOLD="claude")
    r = resolve(cfg, ws.environ())
    by_key = {e.key: e for e in r.type_errors}
    assert set(by_key) == {"TRAIN_BSZ", "SCAFFOLD"}
    assert by_key["SCAFFOLD"].fix == "use one of: cc | ohsdk | oc | terminus"
    assert by_key["TRAIN_BSZ"].file == str(cfg) and by_key["TRAIN_BSZ"].line
    assert r.config.TRAIN_BSZ == 64  # the default, so the other checks still run


def test_relative_paths_resolve_against_the_project_root(ws) -> None:
    repo = Path(__file__).resolve().parents[2]
    r = resolve(repo / "examples" / "configs" / "embedded.env", ws.environ())
    assert r.root == repo
    assert r.path("MODEL_PATH") == repo / ".rlkit" / "models" / "tiny-qwen3-sft"


def test_block_lists_every_value_with_its_layer_and_masks_secrets(ws) -> None:
    r = resolve(ws.config(), ws.environ(WANDB_API_KEY="sk-abcdefghijklmnop1234"))
    block = render_block(r)
    assert "abcdefgh" not in block and "1234" not in block and "WANDB_API_KEY" in block and "****" in block
    for name in KEYS:
        assert f"  {name} " in block
    assert "[process environment]" in block and "[default]" in block


def test_a_bad_value_inherited_through_a_default_reference_is_reported_once(ws) -> None:
    r = resolve(ws.config(TRAIN_BSZ="lots", MINI_BSZ=None, NNODES="two", N_NODES_TRAIN=None), ws.environ())
    assert sorted(e.key for e in r.type_errors) == ["NNODES", "TRAIN_BSZ"]
    assert (r.config.TRAIN_BSZ, r.config.MINI_BSZ, r.config.NNODES, r.config.N_NODES_TRAIN) == (64, 64, 1, 1)
