"""Tool-call parsers: does a verl parser read the tool calls a chat template writes?

The one home of the parser probe. The proxy runs it in-process at start (it has the
tokenizer loaded); preflight (`rlkit.validate.parser_probe`) runs it in a subprocess.
There it takes the light path where the model allows (`rlkit.proxy._light_tokenizer`: verl's
parser module without verl's package imports, the template rendered with jinja2 and
tokenized with `tokenizers`, no transformers), else transformers' AutoTokenizer; `--full`
forces AutoTokenizer and a plain `import verl`. The proxy's per-call wrapper of verl's
parsers is `rlkit.proxy.toolcalls.VerlToolParser`.

Renders a probe assistant tool call through the model's own chat template (with
tools), tokenizes the assistant turn, and parses it back with verl's tool parsers.
Prints one JSON verdict per (model, parser) pair on stdout, one per line:

    {"parser": NAME, "ok": bool, "detail": str, "parses": [names that parse it], "completion": str}

A chat template is code: one that loops would hold the probe for minutes (the template
sandbox stops it being dangerous, not being slow). In the probe's own process the render has a
time budget (`--budget-s`, RENDER_BUDGET_S by default); past it the verdict says so
(`"timed_out": true`) instead of waiting.

Usage: python -m rlkit.proxy.parsers [--full] [--budget-s=S] MODEL_DIR PARSER [MODEL_DIR PARSER ...]
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import threading

PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "run_shell",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
            "required": ["command"],
        },
    },
}
PROBE_ARGS = {"command": "ls -la /tmp", "timeout": 30}
RENDER_BUDGET_S = 20.0  # seconds for the two renders; a real template takes milliseconds


class TemplateBudgetExceeded(Exception):
    """The chat template did not finish rendering within its time budget."""


def render_within(tokenizer, budget_s: float | None) -> str:
    """render_completion, stopped after `budget_s` seconds (a SIGALRM timer: only the main thread of a
    process can take one; elsewhere the render is not bounded)."""
    if not budget_s or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return render_completion(tokenizer)

    def stop(signum: int, frame: object) -> None:
        raise TemplateBudgetExceeded

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, budget_s)
    try:
        return render_completion(tokenizer)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def render_completion(tokenizer) -> str:
    """The assistant turn's text exactly as the template writes a tool call."""
    user = [{"role": "user", "content": "List /tmp."}]
    call = {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "id": "call_0",
                            "function": {"name": "run_shell", "arguments": dict(PROBE_ARGS)}}]}
    prefix = tokenizer.apply_chat_template(user, tools=[PROBE_TOOL], tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template([*user, call], tools=[PROBE_TOOL], tokenize=False)
    if full.startswith(prefix):
        return full[len(prefix):].rstrip()
    common = os.path.commonprefix([prefix, full])
    return full[len(common):].rstrip()


def _normal(args: object) -> dict[str, str] | None:
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return {str(k): str(v) for k, v in args.items()}


async def parses(parser_name: str, tokenizer, ids: list[int]) -> tuple[bool, str]:
    from verl.experimental.agent_loop.tool_parser import ToolParser
    from verl.tools.schemas import OpenAIFunctionToolSchema

    tools = [OpenAIFunctionToolSchema.model_validate(PROBE_TOOL)]
    try:
        parser = ToolParser.get_tool_parser(parser_name, tokenizer)
        _, calls = await parser.extract_tool_calls(ids, tools)
    except Exception as exc:  # noqa: BLE001 -- a parser that chokes on a foreign format is a mismatch, not a crash
        return False, f"{type(exc).__name__}: {exc}"
    if len(calls) != 1:
        return False, f"found {len(calls)} tool call(s), expected 1"
    call = calls[0]
    if call.name != "run_shell":
        return False, f"parsed the name as {call.name!r}"
    got = _normal(call.arguments)
    if got != _normal(PROBE_ARGS):
        return False, f"parsed the arguments as {call.arguments!r}"
    return True, "round-trips"


async def probe_tokenizer(tokenizer, parser_name: str, budget_s: float | None = None) -> dict:
    """The verdict for one tokenizer (chat template) and parser; every verl parser is tried
    so a mismatch can name the one that does parse. Shared by preflight and the proxy."""
    from verl.experimental.agent_loop.tool_parser import ToolParser

    try:
        completion = render_within(tokenizer, budget_s)
    except TemplateBudgetExceeded:
        return {"parser": parser_name, "ok": False, "parses": [], "completion": "", "timed_out": True,
                "budget_s": budget_s, "detail": f"the chat template did not finish rendering within its "
                                                f"{budget_s:g} s budget (a loop in the template?)"}
    if "run_shell" not in completion:
        return {"parser": parser_name, "ok": False, "parses": [], "completion": completion,
                "detail": "the chat template does not render assistant tool calls"}
    ids = tokenizer.encode(completion, add_special_tokens=False)
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)  # verl parsers log every failed decode at ERROR
    try:
        verdicts = {name: await parses(name, tokenizer, ids) for name in sorted(ToolParser._registry)}
    finally:
        logging.disable(previous)
    ok, detail = verdicts.get(parser_name, (False, f"verl has no tool parser named {parser_name!r}"))
    return {"parser": parser_name, "ok": ok, "detail": detail, "completion": completion,
            "parses": [name for name, (good, _) in verdicts.items() if good]}


def describe(verdict: dict) -> str:
    """One line for a verdict: whether the parser reads the template, and who does."""
    name = verdict["parser"]
    if verdict["ok"]:
        return f"parser {name!r} reads the chat template's tool calls"
    others = [p for p in verdict.get("parses", []) if p != name]
    hint = f"; {', '.join(others)} does" if others else ""
    return f"parser {name!r} cannot read the chat template's tool-call format ({verdict['detail']}){hint}"


async def probe(model_dir: str, parser_name: str, budget_s: float | None = None, *, full: bool = False) -> dict:
    if not full:
        from rlkit.proxy._light_tokenizer import NeedsTransformers, light_tokenizer

        try:
            return await probe_tokenizer(light_tokenizer(model_dir), parser_name, budget_s)
        except NeedsTransformers as exc:
            print(f"{model_dir}: transformers' tokenizer ({exc})", file=sys.stderr)
    from transformers import AutoTokenizer

    return await probe_tokenizer(AutoTokenizer.from_pretrained(model_dir), parser_name, budget_s)


def preload_verl_parsers() -> None:
    """Load verl's tool_parser module without running verl's package `__init__` (torch's dynamo,
    tensordict, ray: ~2 s of CPU), for a process that uses nothing else of verl: the probe and
    `rlkit proxy serve`. Where verl is imported already, or a verl plugin is configured (a verl
    run's proxy), it is the plain import."""
    from rlkit.proxy._light_tokenizer import load_verl_tool_parsers

    load_verl_tool_parsers()  # later `from verl... import` statements find it loaded


def main(argv: list[str]) -> int:
    full = "--full" in argv[:2]
    argv = [a for a in argv if a != "--full"] if full else argv
    budget_s = RENDER_BUDGET_S
    if argv and argv[0].startswith("--budget-s="):
        budget_s = float(argv[0].split("=", 1)[1])
        argv = argv[1:]
    if not argv or len(argv) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not full:
        preload_verl_parsers()
    for model_dir, parser in zip(argv[::2], argv[1::2], strict=True):
        print(json.dumps(asyncio.run(probe(model_dir, parser, budget_s, full=full))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
