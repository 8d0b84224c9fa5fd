"""TOOL_CALL_PARSER against the chat template: a real probe subprocess (transformers + verl)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlkit.validate.findings import Status
from rlkit.validate.parser_probe import cache_key, prewarm


@pytest.fixture(scope="session")
def probe_cache(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, tiny_hermes_model_dir: Path) -> Path:
    """Both tiny models probed for real against qwen3_coder, in one probe subprocess."""
    cache = tmp_path_factory.mktemp("probe-cache")
    pairs = [(tiny_model_dir, "qwen3_coder"), (tiny_hermes_model_dir, "qwen3_coder")]
    assert prewarm(pairs, cache) == 2
    assert prewarm(pairs, cache) == 0  # cached: nothing left to probe
    return cache


def never_spawn(argv: list[str]) -> str:
    raise AssertionError(f"a warm preflight spawned the probe: {argv}")


def test_matching_parser_passes_without_spawning_when_cached(ws, probe_cache: Path) -> None:
    cfg = ws.config(TOOL_CALL_PARSER="qwen3_coder")
    (warm,) = ws.preflight(cfg, only=["tool_call_parser"], cache_dir=probe_cache, probe_runner=never_spawn).findings
    assert warm.status is Status.OK and "(cached)" in warm.message, warm.render()


def test_cold_check_runs_the_probe_once_and_caches(ws, tmp_path: Path, probe_cache: Path) -> None:
    """Cold path of the check itself; the runner replays the real verdict recorded in probe_cache."""
    recorded = next((probe_cache / "parser_probe").glob("*.json")).read_text()
    calls: list[list[str]] = []

    def runner(argv: list[str]) -> str:
        calls.append(argv)
        return recorded

    cfg = ws.config(TOOL_CALL_PARSER="qwen3_coder")
    for _ in range(2):
        ws.preflight(cfg, only=["tool_call_parser"], cache_dir=tmp_path / "c", probe_runner=runner)
    assert calls == [[str(ws.model_dir), "qwen3_coder"]]


def test_mismatched_parser_is_fatal_and_names_the_right_one(ws, tiny_hermes_model_dir: Path,
                                                           probe_cache: Path) -> None:
    cfg = ws.config(MODEL_PATH=tiny_hermes_model_dir, TOOL_CALL_PARSER="qwen3_coder")
    (finding,) = ws.preflight(cfg, only=["tool_call_parser"], cache_dir=probe_cache, probe_runner=never_spawn).findings
    assert finding.status is Status.FATAL
    assert "hermes does" in finding.message and finding.fix.startswith("set TOOL_CALL_PARSER=hermes")
    assert finding.key == "TOOL_CALL_PARSER" and finding.where


def test_cache_key_follows_template_parser_and_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = cache_key(tmp_path, "template-a", "hermes")
    assert base == cache_key(tmp_path, "template-a", "hermes")
    assert base != cache_key(tmp_path, "template-b", "hermes")
    assert base != cache_key(tmp_path, "template-a", "qwen3_coder")
    from rlkit.validate import parser_probe

    monkeypatch.setattr(parser_probe, "_version", lambda dist: "9.9.9")
    assert base != cache_key(tmp_path, "template-a", "hermes")


def test_cached_verdict_is_used_without_a_probe(ws, tmp_path: Path) -> None:
    import json

    from rlkit.validate.model import read_chat_template

    key = cache_key(ws.model_dir, read_chat_template(ws.model_dir) or "", "glm")
    (tmp_path / "c" / "parser_probe").mkdir(parents=True)
    (tmp_path / "c" / "parser_probe" / f"{key}.json").write_text(json.dumps(
        {"parser": "glm", "ok": False, "detail": "found 0 tool call(s), expected 1", "parses": ["qwen3_coder"]}))
    report = ws.preflight(ws.config(TOOL_CALL_PARSER="glm"), only=["tool_call_parser"], cache_dir=tmp_path / "c",
                          probe_runner=never_spawn)
    (finding,) = report.findings
    assert finding.status is Status.FATAL and "TOOL_CALL_PARSER=qwen3_coder" in finding.fix


def test_cold_preflight_starts_the_real_probe_before_the_other_checks(ws, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """No runner swapped in: the probe subprocess starts before the first check runs, the
    tool_call_parser check takes its verdict, and the verdict is cached."""
    from rlkit.validate import parser_probe, static

    events: list[str] = []
    spawn, syntax = parser_probe._spawn, static.config_syntax

    def spawn_logged(argv: list[str]):
        events.append("probe")
        return spawn(argv)

    def syntax_logged(ctx):
        events.append("config_syntax")
        return syntax(ctx)

    monkeypatch.setattr(parser_probe, "_spawn", spawn_logged)
    monkeypatch.setattr(static, "config_syntax", syntax_logged)
    cfg = ws.config(TOOL_CALL_PARSER="qwen3_coder")
    report = ws.preflight(cfg, only=["config_syntax", "tool_call_parser"], cache_dir=tmp_path / "c")
    (finding,) = report.by_check("tool_call_parser")
    assert finding.status is Status.OK and "(probed)" in finding.message, finding.render()
    assert events == ["probe", "config_syntax"]
    assert len(list((tmp_path / "c" / "parser_probe").glob("*.json"))) == 1


def test_warm_preflight_starts_no_probe(ws, probe_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlkit.validate import parser_probe

    monkeypatch.setattr(parser_probe, "_spawn", never_spawn)
    cfg = ws.config(TOOL_CALL_PARSER="qwen3_coder")
    (finding,) = ws.preflight(cfg, only=["tool_call_parser"], cache_dir=probe_cache).findings
    assert finding.status is Status.OK and "(cached)" in finding.message, finding.render()
