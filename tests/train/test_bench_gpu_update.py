"""bench/gpu_update.py still runs (toy model, CPU); it asserts nothing about speed."""

from __future__ import annotations

import json

from tests.fixtures.scripts import load_script


def test_gpu_update_bench_runs_on_cpu_at_toy_size(tmp_path, capsys):
    bench = load_script("bench/gpu_update.py")
    out = tmp_path / "rows.jsonl"
    assert bench.main(["--toy", "--device", "cpu", "--rows", "plain,packed", "--algos", "grpo,gspo",
                       "--batch-rows", "2", "--warmup", "1", "--steps", "1", "--json", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["row"], r["algo"]) for r in rows] == [("plain", "vanilla"), ("packed", "vanilla"),
                                                     ("plain", "gspo"), ("packed", "gspo")]
    assert all("error" not in r and r["tokens_per_s"] > 0 for r in rows)
    assert "| row | algo | seq | GPUs | tokens/s |" in capsys.readouterr().out
