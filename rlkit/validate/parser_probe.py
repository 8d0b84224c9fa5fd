"""TOOL_CALL_PARSER against the model's chat template.

The probe itself (`rlkit.proxy.parsers`) needs verl's parsers and the model's tokenizer,
so it runs in a subprocess. Its verdict is cached on disk, keyed by everything it depends
on: the chat template and tokenizer config, the parser name, the verl and
transformers versions and the probe's own version. A warm preflight reads the cache
and spawns nothing; a cold one starts the probe before the other checks
(`start_probe`), so they run while it works.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from rlkit.config.files import FileReadError, parse_json, read_bytes, read_model, validate_model
from rlkit.validate.findings import Context, Finding, fatal, ok, skip
from rlkit.validate.model import ModelDirError, model_info

PROBE_VERSION = "2"
PROBE_TIMEOUT_S = 300  # the whole subprocess: importing what it needs, then every parser
TEMPLATE_BUDGET_S = 20.0  # the chat template's renders inside it (rlkit.proxy.parsers.render_within)
STARTED = "parser_probe_started"  # ctx.notes key: ([MODEL, PARSER], the running probe)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def cache_key(model_dir: Path, chat_template: str, parser: str) -> str:
    h = hashlib.sha256()
    h.update(chat_template.encode())
    try:  # added tokens decide how the parser sees the text
        h.update(read_bytes(model_dir / "tokenizer_config.json"))
    except FileReadError:
        pass
    for part in (parser, _version("verl"), _version("transformers"), PROBE_VERSION):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:32]


def _spawn(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rlkit.proxy.parsers", f"--budget-s={TEMPLATE_BUDGET_S:g}",
                             *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> str:
    """The probe's stdout (one JSON line per pair), once it exits; it is killed past PROBE_TIMEOUT_S."""
    try:
        out, err = proc.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    if proc.returncode != 0:
        tail = (err or out).strip().splitlines()[-3:]
        raise RuntimeError(f"probe exited {proc.returncode}: {' | '.join(tail)}")
    return out


def run_probe_subprocess(argv: list[str]) -> str:
    """Runs the probe for `MODEL PARSER [MODEL PARSER ...]`; returns its stdout (one JSON line per pair)."""
    return _finish(_spawn(argv))


def _cache_file(cache_dir: Path, model_dir: Path, chat_template: str, parser: str) -> Path:
    return cache_dir / "parser_probe" / f"{cache_key(model_dir, chat_template, parser)}.json"


def _store(cache: Path, verdict: dict) -> None:
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(verdict))
        tmp.replace(cache)  # atomic: concurrent preflights never read half a verdict
    except OSError:
        pass  # an unwritable RLKIT_CACHE_DIR costs a probe next time, nothing else


class ProbeVerdict(BaseModel):
    """One line of the probe's output (and of its cache): what the check reads of it."""

    model_config = ConfigDict(extra="allow", defer_build=True)
    ok: StrictBool = False
    detail: StrictStr = ""
    parses: list[StrictStr] = Field(default_factory=list, max_length=64)
    timed_out: StrictBool = False
    budget_s: float | None = None


def probe_verdict(ctx: Context, model_dir: Path, chat_template: str, parser: str) -> tuple[dict, bool]:
    """(verdict, from_cache)."""
    cache = _cache_file(ctx.cache_dir, model_dir, chat_template, parser)
    try:
        return read_model(cache, ProbeVerdict, max_bytes=2**20).model_dump(), True
    except FileReadError:
        pass  # absent or unreadable: probe again
    argv = [str(model_dir), parser]
    started = ctx.notes.pop(STARTED, None)
    if isinstance(started, tuple) and started[0] == argv:
        output = _finish(started[1])
    else:
        output = (ctx.probe_runner or run_probe_subprocess)(argv)
    lines = output.strip().splitlines()
    try:
        verdict = validate_model(parse_json(lines[-1], "the probe's verdict"), ProbeVerdict, "the probe's verdict")
    except (IndexError, FileReadError):
        raise RuntimeError(f"the probe printed no verdict ({lines[-1][:80] if lines else 'nothing'!r})") from None
    if not verdict.timed_out:  # a loaded machine may be slow once: a budget verdict is not kept
        _store(cache, verdict.model_dump())
    return verdict.model_dump(), False


def start_probe(ctx: Context) -> None:
    """Starts the probe subprocess when the verdict is not cached, before the other checks run;
    `tool_call_parser` then waits for it. Anything unusable is left for the checks to report."""
    if ctx.probe_runner is not None or "TOOL_CALL_PARSER" in ctx.resolved.bad_keys:
        return
    info = model_info(ctx)
    if isinstance(info, ModelDirError) or info.chat_template is None or info.tokenizer_file is None:
        return
    parser = ctx.resolved.config.TOOL_CALL_PARSER.value
    if not _cache_file(ctx.cache_dir, info.path, info.chat_template, parser).is_file():
        argv = [str(info.path), parser]
        ctx.notes[STARTED] = (argv, _spawn(argv))


def prewarm(pairs: list[tuple[Path, str]], cache_dir: Path) -> int:
    """Probes every uncached (model dir, parser) pair in ONE subprocess; returns how many were probed."""
    from rlkit.validate.model import read_chat_template

    todo = []
    for model_dir, parser in pairs:
        try:
            template = read_chat_template(model_dir)
        except ModelDirError:
            continue  # preflight's model_dir check names the file
        if template is not None and not _cache_file(cache_dir, model_dir, template, parser).is_file():
            todo.append((model_dir, parser, template))
    if not todo:
        return 0
    lines = run_probe_subprocess([a for m, p, _ in todo for a in (str(m), p)]).strip().splitlines()
    for (model_dir, parser, template), line in zip(todo, lines[-len(todo):], strict=True):
        verdict = json.loads(line)
        if isinstance(verdict, dict) and not verdict.get("timed_out"):
            _store(_cache_file(cache_dir, model_dir, template, parser), verdict)
    return len(todo)


def tool_call_parser(ctx: Context) -> list[Finding]:
    info = model_info(ctx)
    if isinstance(info, ModelDirError) or info.chat_template is None or info.tokenizer_file is None:
        return [skip("tool_call_parser", "no usable model directory (see model_dir)")]
    parser = ctx.resolved.config.TOOL_CALL_PARSER.value
    where = ctx.resolved.where("TOOL_CALL_PARSER")
    try:
        verdict, cached = probe_verdict(ctx, info.path, info.chat_template, parser)
    except subprocess.TimeoutExpired:
        return [fatal("tool_call_parser", f"the parser probe ran past its {PROBE_TIMEOUT_S} s budget and was "
                      "stopped", "run `python -m rlkit.proxy.parsers MODEL_PATH PARSER` to see where it hangs",
                      key="TOOL_CALL_PARSER", where=where)]
    except (RuntimeError, json.JSONDecodeError, OSError) as exc:
        return [fatal("tool_call_parser", f"could not probe the chat template: {exc}",
                      "run `python -m rlkit.proxy.parsers MODEL_PATH PARSER` to see the error",
                      key="TOOL_CALL_PARSER", where=where)]
    if verdict.get("timed_out"):
        budget = verdict.get("budget_s")
        shown = f" {budget:g} s" if isinstance(budget, int | float) else ""
        return [fatal("tool_call_parser", f"the chat template ran past its{shown} "
                      "rendering budget and was stopped (a loop in the template?); vLLM and the proxy would "
                      "hang on it for every prompt", "use the chat template the model was trained with",
                      key="MODEL_PATH", where=ctx.resolved.where("MODEL_PATH"))]
    source = "cached" if cached else "probed"
    if verdict.get("ok"):
        return [ok("tool_call_parser", f"{parser} parses the chat template's tool calls ({source})")]
    others = [p for p in verdict.get("parses", []) if p != parser]
    if others:
        fix = f"set TOOL_CALL_PARSER={others[0]} (the parser that reads this template's tool calls)"
    else:
        fix = "no verl parser reads this template's tool calls; use the chat template the model was trained with"
    return [fatal("tool_call_parser", f"TOOL_CALL_PARSER={parser} cannot parse the model's tool calls "
                  f"({verdict.get('detail')}; {source}); {', '.join(others) or 'no parser'} does",
                  fix, key="TOOL_CALL_PARSER", where=where)]
