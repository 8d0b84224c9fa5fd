"""DRY_RUN with TRAINER=local prints what the embedded trainer runs, not a verl plan."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_dry_run_of_the_local_trainer_prints_its_vllm_and_proxy_not_main_ppo(tmp_path: Path,
                                                                           tiny_model_dir: Path) -> None:
    secret = "wandb-secret-0123456789abcdef"
    cfg = tmp_path / "run.env"
    # DRY_RUN reads the model as check does (its window sets --max-model-len): a real model directory
    cfg.write_text(f"PROJECT_NAME=p\nEXP_NAME=e\nTRAINER=local\nMODEL_PATH={tiny_model_dir}\nGPUS_PER_NODE=1\n"
                   "MAX_PROMPT=1024\nMAX_RESP=2048\n"
                   f"TRAIN_FILES={tmp_path / 't.parquet'}\nVAL_FILES={tmp_path / 'v.parquet'}\n"
                   f"OUTPUT_DIR={tmp_path / 'out'}\nLOGGER=console,wandb\n")
    env = {**os.environ, "DRY_RUN": "1", "WANDB_API_KEY": secret}
    proc = subprocess.run([str(REPO / ".venv/bin/rlkit"), "train", str(cfg)], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "TRAINER=local" in out and "verl.trainer.main_ppo" not in out
    assert "vllm.entrypoints.openai.api_server" in out and "proxy serve" in out
    assert str(tmp_path / "out" / "logs" / "e.log") in out and "--max-model-len 3072" in out
    assert secret not in out + proc.stderr
