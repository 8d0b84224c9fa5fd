from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.config.paths import RunPaths
from rlkit.monitor import metrics
from rlkit.monitor.tail import LineTail, lines_from_end
from rlkit.monitor.vllm_log import VllmLogReader, last_throughput, parse_line

from .conftest import FIXTURES


@pytest.mark.parametrize(("text", "value"), [("0.12", 0.12), ("np.float64(0.12)", 0.12), ("np.int64(3)", 3.0),
                                             ("np.float32(-1.5e-3)", -0.0015), ("tensor(0.5, device='cuda:0')", 0.5),
                                             ("3", 3.0), ("nan", None), ("np.float64(nan)", None), ("True", 1.0),
                                             ("'text'", None)])
def test_values_as_verl_prints_them(text: str, value: float | None) -> None:
    assert metrics.parse_value(text) == value


def test_console_line_with_a_ray_prefix() -> None:
    step, data = metrics.parse_console_line(
        "(TaskRunner pid=7) step:12 - actor/kl_loss:np.float64(0.01) - training/epoch:np.int64(2) - x:nan - y:-0.5")
    assert step == 12 and data == {"actor/kl_loss": 0.01, "training/epoch": 2.0, "y": -0.5}
    assert metrics.parse_console_line("(TaskRunner pid=7) WARNING: not a step - a: b") is None


def test_verl_console_log_in_verls_own_format() -> None:
    paths = RunPaths(FIXTURES / "verl", "default", "verl-run")
    got = metrics.read_all(paths)
    assert sorted(got.steps) == [1, 2, 3]
    assert got.steps[3]["critic/rewards/mean"] == pytest.approx(0.375)
    assert got.steps[2]["training/global_step"] == 2.0
    assert got.steps[1]["perf/mfu/actor"] == pytest.approx(0.31)
    assert "val-core/swe/reward/mean@1" not in got.steps[1]  # nan is no point
    assert metrics.first_record(paths)[0] == 1 and metrics.last_records(paths, 1)[0][0] == 3


def test_embedded_run_reads_the_same_from_jsonl_and_console(run_copy) -> None:
    root = run_copy("healthy")
    paths = RunPaths(root, "embedded", "fx-healthy")
    from_jsonl = metrics.read_all(paths)
    paths.jsonl.unlink()
    from_console = metrics.read_all(paths)
    assert from_jsonl.steps.keys() == from_console.steps.keys() and from_jsonl.steps
    for step, data in from_jsonl.steps.items():
        assert from_console.steps[step] == pytest.approx(data)


def test_incremental_reads_only_what_was_appended(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, "p", "e")
    paths.logs.mkdir()
    paths.jsonl.write_text(json.dumps({"step": 1, "data": {"a": 1}}) + "\n")
    reader = metrics.MetricsReader(paths)
    assert [s for s, _ in reader.poll()] == [1]
    assert reader.poll() == []
    with paths.jsonl.open("a") as f:
        f.write(json.dumps({"step": 2, "data": {"a": 2}}) + "\n" + '{"step": 3, "da')  # a torn last line
    assert [s for s, _ in reader.poll()] == [2]
    offset = reader.offset
    with paths.jsonl.open("a") as f:
        f.write('ta": {"a": 3}}\n')
    assert [s for s, _ in reader.poll()] == [3] and reader.offset > offset
    paths.jsonl.write_text(json.dumps({"step": 1, "data": {"a": 9}}) + "\n")  # replaced by a shorter file
    assert reader.poll() == [(1, {"a": 9.0})]


def test_tail_never_rereads(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_text("a\nb\n")
    tail = LineTail(path)
    assert tail.poll() == ["a", "b"] and tail.offset == 4
    assert tail.poll() == []
    path.write_text("a\nb\nc\n")
    assert tail.poll() == ["c"]
    assert list(lines_from_end(path, chunk=2)) == ["c", "b", "a"]


def test_vllm_throughput_lines(run_copy) -> None:
    root = run_copy("healthy")
    log = root / "logs" / "fx-healthy_vllm.log"
    rows = VllmLogReader(log).poll()
    assert rows and all(r.gen_tps >= 0 for r in rows)
    assert last_throughput(log) == rows[-1]
    gpu = parse_line("(APIServer pid=1) INFO 11-30 14:06:25 [loggers.py:335] Engine 000: Avg prompt throughput: 1.5 "
                     "tokens/s, Avg generation throughput: 2.5 tokens/s, Running: 2 reqs, Waiting: 1 reqs, "
                     "GPU KV cache usage: 2.2%, Prefix cache hit rate: 47.0%")
    assert gpu is not None and gpu.gen_tps == 2.5 and gpu.waiting == 1 and gpu.prefix_hit == 47.0


def test_step_lines_found_from_the_end_across_block_boundaries(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    lines = []
    for step in range(1, 41):
        lines.append(f"(TaskRunner pid=1) step:{step} - a:np.float64({step}.5) - b:{step}")
        lines += [f"(TaskRunner pid=1) noise {i} - x:y" for i in range(step % 7)]
    path.write_text("\n".join(lines) + "\n")
    for chunk in (16, 64, 97, 1 << 20):
        found = [metrics.parse_console_line(x)[0] for x in metrics.step_lines_from_end(path, 1 << 30, chunk=chunk)]
        assert found == list(range(40, 0, -1)), chunk
    paths = RunPaths(tmp_path, "p", "big")
    (tmp_path / "logs").mkdir()
    path.rename(paths.console_log)
    assert [s for s, _ in metrics.last_records(paths, 3)] == [38, 39, 40]
    assert metrics.last_records(paths, 1)[0][1] == {"a": 40.5, "b": 40.0}
