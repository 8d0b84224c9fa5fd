"""The configs rlkit ships: axis modules, the template, the embedded default and the example site.env."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from rlkit.config.envfile import read_env_file
from rlkit.config.resolve import resolve
from rlkit.config.schema import (
    AXIS_KEYS,
    FIELDS,
    Backend,
    Layer,
    ModelEngine,
    Scaffold,
    TrainingMode,
    key_layers,
)

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "scripts" / "templates"
AXES = {"SCAFFOLD": Scaffold, "BACKEND": Backend, "TRAINING_MODE": TrainingMode, "MODEL_ENGINE": ModelEngine}


def test_every_axis_value_has_a_module_of_axis_keys() -> None:
    for key, folder in AXIS_KEYS.items():
        modules = {p.stem for p in (TEMPLATES / folder).glob("*.env")}
        assert modules == {v.value for v in AXES[key]}, folder
        for module in (TEMPLATES / folder).glob("*.env"):
            env = read_env_file(module)
            assert not env.errors and env.entries, module
            for entry in env.entries:
                assert entry.key in FIELDS and Layer.AXIS in key_layers(entry.key), entry.where


@pytest.mark.parametrize("combo", list(itertools.product(*(list(e) for e in AXES.values()))),
                         ids=lambda c: "-".join(v.value for v in c))
def test_every_axis_combination_composes(ws, combo: tuple) -> None:
    values = {k: v.value for k, v in zip(AXES, combo, strict=True)}
    r = resolve(ws.config(**values), ws.environ())
    assert not r.errors and not r.type_errors and not r.misplaced and not r.unknown
    assert len(r.layer_files[Layer.AXIS]) == 4


def test_embedded_default_and_example_site_are_clean(ws) -> None:
    env = ws.environ(RLKIT_SITE_ENV=str(REPO / "examples" / "configs" / "site.env"))
    report = ws.preflight(REPO / "examples" / "configs" / "embedded.env", environ=env,
                          only=["config_syntax", "changeme", "unknown_key", "key_layer", "types", "names",
                                "logger", "topology", "parallelism", "batch"])
    assert [f.render() for f in report.findings if f.status.value != "ok"] == []
    assert report.resolved.values["RAY_HEAD_ADDRESS"].layer is Layer.SITE
