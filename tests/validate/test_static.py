"""Each static check: a passing config and a failing one."""

from __future__ import annotations

import pytest

from rlkit.validate.findings import Status


def statuses(report, check: str) -> set[Status]:
    return {f.status for f in report.by_check(check)}


def test_valid_config_passes_every_static_check(ws) -> None:
    report = ws.preflight(ws.config(), only=["config_syntax", "changeme", "unknown_key", "key_layer", "types",
                                             "names", "topology", "parallelism", "batch"])
    assert [f for f in report.findings if f.status is not Status.OK] == []
    assert len(report.findings) == 9


def test_changeme_is_fatal_per_key(ws) -> None:
    report = ws.preflight(ws.config(MODEL_PATH="CHANGEME", TRAIN_BSZ="CHANGEME"), only=["changeme", "types"])
    fatal = report.by_check("changeme")
    assert {f.key for f in fatal} == {"MODEL_PATH", "TRAIN_BSZ"} and all(f.status is Status.FATAL for f in fatal)
    assert all(f.where and f.fix for f in fatal)
    assert statuses(report, "types") == {Status.OK}  # CHANGEME is reported once, not as a type error too


def test_template_is_caught_until_filled(ws) -> None:
    from pathlib import Path

    template = Path(__file__).resolve().parents[2] / "scripts" / "train" / "_template.env"
    report = ws.preflight(template, only=["changeme", "unknown_key", "types"])
    assert {f.key for f in report.by_check("changeme")} == {"PROJECT_NAME", "EXP_NAME", "MODEL_PATH",
                                                            "TRAIN_FILES", "VAL_FILES"}
    assert statuses(report, "unknown_key") == {Status.OK} and statuses(report, "types") == {Status.OK}


def test_unknown_key_suggests_the_right_one(ws) -> None:
    report = ws.preflight(ws.config(TRAIN_BZS=4, tool_call_parser="hermes"), only=["unknown_key"])
    fixes = {f.key: f.fix for f in report.by_check("unknown_key")}
    assert fixes == {"TRAIN_BZS": "did you mean TRAIN_BSZ?", "tool_call_parser": "did you mean TOOL_CALL_PARSER?"}


def test_key_in_the_wrong_layer_warns(ws) -> None:
    ws.write_site(PROJECT_NAME="site-project")
    report = ws.preflight(ws.config(RAY_PORT=7000), only=["key_layer"])
    found = {f.key: f for f in report.by_check("key_layer")}
    assert set(found) == {"PROJECT_NAME", "RAY_PORT"}
    assert all(f.status is Status.WARN for f in found.values())
    assert found["RAY_PORT"].fix == "move it to site.env" and found["PROJECT_NAME"].fix == "move it to the run config"


def test_process_switch_in_a_file_warns(ws) -> None:
    report = ws.preflight(ws.config(DRY_RUN=1), only=["key_layer"])
    assert [f.key for f in report.by_check("key_layer")] == ["DRY_RUN"]


def test_config_syntax_reports_parse_errors(ws) -> None:
    report = ws.preflight(ws.config(text=ws.config().read_text() + "BAD LINE\nA=$(x)\n"), only=["config_syntax"])
    assert [f.status for f in report.by_check("config_syntax")] == [Status.FATAL, Status.FATAL]


def test_types(ws) -> None:
    report = ws.preflight(ws.config(N_RESP="eight", ALGORITHM="dpo"), only=["types"])
    assert {f.key for f in report.by_check("types")} == {"N_RESP", "ALGORITHM"}


@pytest.mark.parametrize("name", ["../etc", "a b", "x/y", "", ".hidden"])
def test_unsafe_names_are_fatal(ws, name: str) -> None:
    value = f'"{name}"' if " " in name else name
    report = ws.preflight(ws.config(EXP_NAME=value), only=["names"])
    assert statuses(report, "names") == {Status.FATAL}


@pytest.mark.parametrize(("over", "key"), [
    ({"NNODES": 3, "N_NODES_TRAIN": 2, "N_NODES_ROLLOUT": 0}, "NNODES"),
    ({"NNODES": 2, "N_NODES_TRAIN": 1, "N_NODES_ROLLOUT": 1}, "N_NODES_ROLLOUT"),  # sync has no rollout nodes
    ({"TRAINING_MODE": "async", "NNODES": 2, "N_NODES_TRAIN": 2, "N_NODES_ROLLOUT": 0}, "N_NODES_ROLLOUT"),
    ({"TRAINING_MODE": "async", "NNODES": 4, "N_NODES_TRAIN": 2, "N_NODES_ROLLOUT": 1}, "NNODES"),
    ({"VERL_TRAINER_MODE": "separate_async"}, "VERL_TRAINER_MODE"),
])
def test_topology_fatal(ws, over: dict, key: str) -> None:
    report = ws.preflight(ws.config(**over), only=["topology"])
    assert [(f.status, f.key) for f in report.by_check("topology")] == [(Status.FATAL, key)]


@pytest.mark.parametrize("over", [
    {"TRAINING_MODE": "async", "NNODES": 3, "N_NODES_TRAIN": 2, "N_NODES_ROLLOUT": 1},
    {"TRAINING_MODE": "async", "NNODES": 1, "N_NODES_ROLLOUT": 0, "VERL_TRAINER_MODE": "colocate_async"},
    {"NNODES": 4, "N_NODES_TRAIN": 4},
])
def test_topology_ok(ws, over: dict) -> None:
    assert statuses(ws.preflight(ws.config(**over), only=["topology"]), "topology") == {Status.OK}


def test_parallelism(ws) -> None:
    ws.write_site(GPUS_PER_NODE=8)
    good = ws.preflight(ws.config(NNODES=2, N_NODES_TRAIN=2, SP_SIZE=16, ROLLOUT_TP=4), only=["parallelism"])
    assert statuses(good, "parallelism") == {Status.OK}
    bad = ws.preflight(ws.config(SP_SIZE=3, ROLLOUT_TP=3), only=["parallelism"])
    assert {f.key for f in bad.by_check("parallelism")} == {"SP_SIZE", "ROLLOUT_TP"}
    assert "1, 2, 4, 8" in bad.by_check("parallelism")[0].fix


@pytest.mark.parametrize(("over", "key"), [
    ({"TRAIN_BSZ": 6, "MINI_BSZ": 4}, "MINI_BSZ"),
    ({"TRAIN_BSZ": 3, "MINI_BSZ": 3, "N_RESP": 3}, "MINI_BSZ"),  # 9 trajectories over 2 ranks
    ({"N_RESP": 1, "MINI_BSZ": 2}, "N_RESP"),
    ({"TRAINING_MODE": "async", "NNODES": 2, "N_NODES_ROLLOUT": 1, "TRAIN_BSZ": 8, "MINI_BSZ": 2}, "PARAM_SYNC_STEPS"),
])
def test_batch_fatal(ws, over: dict, key: str) -> None:
    report = ws.preflight(ws.config(**over), only=["batch"])
    assert (Status.FATAL, key) in [(f.status, f.key) for f in report.by_check("batch")]


def test_batch_ok_for_async_with_param_sync(ws) -> None:
    cfg = ws.config(TRAINING_MODE="async", NNODES=2, N_NODES_ROLLOUT=1, N_NODES_TRAIN=1, TRAIN_BSZ=8, MINI_BSZ=2,
                    PARAM_SYNC_STEPS=4)
    assert statuses(ws.preflight(cfg, only=["batch"]), "batch") == {Status.OK}


def test_logger(ws, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(ws.root))  # no ~/.netrc
    assert statuses(ws.preflight(ws.config(), only=["logger"]), "logger") == {Status.OK}
    (f,) = ws.preflight(ws.config(LOGGER="console,file,wandb"), only=["logger"]).by_check("logger")
    assert f.status is Status.WARN and f.key == "WANDB_API_KEY"
    env = ws.environ(WANDB_API_KEY="k" * 40)
    assert statuses(ws.preflight(ws.config(LOGGER="console,file,wandb"), only=["logger"], environ=env),
                    "logger") == {Status.OK}
    (f,) = ws.preflight(ws.config(LOGGER="console"), only=["logger"]).by_check("logger")
    assert f.status is Status.WARN and "file" in f.fix
    (f,) = ws.preflight(ws.config(LOGGER="console,wandbb"), only=["types"]).by_check("types")
    assert f.status is Status.FATAL and "wandbb" in f.message


def test_misspelt_process_switch_in_the_environment_warns(ws) -> None:
    report = ws.preflight(ws.config(), only=["unknown_key"], environ=ws.environ(DRYRUN="1", PREFLIGHTONLY="1"))
    found = {f.key: f for f in report.by_check("unknown_key")}
    assert found["DRYRUN"].status is Status.WARN and found["DRYRUN"].fix == "did you mean DRY_RUN?"
    assert found["PREFLIGHTONLY"].fix == "did you mean PREFLIGHT_ONLY?"
