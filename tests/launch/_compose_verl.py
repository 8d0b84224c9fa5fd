"""Composes verl's own hydra config (verl/trainer/config/ppo_trainer.yaml) with override sets.

Run as a subprocess by the launch tests: reads a JSON list of override lists on stdin,
prints a JSON list of resolved configs (or the error of each). Hydra rejects unknown keys
and malformed values, exactly as `python -m verl.trainer.main_ppo` would.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf


def main() -> int:
    spec = importlib.util.find_spec("verl")
    assert spec and spec.submodule_search_locations
    config_dir = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"
    results = []
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        for overrides in json.load(sys.stdin):
            try:
                cfg = compose(config_name="ppo_trainer", overrides=overrides)
                results.append({"ok": True, "config": OmegaConf.to_container(cfg, resolve=True)})
            except Exception as exc:  # noqa: BLE001 -- reported back to the test
                results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
