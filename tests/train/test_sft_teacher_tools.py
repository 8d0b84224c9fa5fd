"""The scripted teacher under tool-calling scaffolds: one shell-tool call in qwen3_coder syntax,
then a plain-text answer once the tool's result is in the prompt.

Prompts are rendered by the tiny policy's own chat template (tools in the system turn, the
tool result as `<tool_response>`), and the replies are parsed by the proxy's parser: the
right one (qwen3_coder) turns the call into the scaffold's tool, a wrong one (hermes) flags
a parse failure."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rlkit.train._teacher import TeacherScript, solution_keystrokes
from rlkit.train._teacher_tools import DONE_REPLY, GIVE_UP_TEXT

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "tasks" / "word-frequency"
OTHER = REPO / "examples" / "tasks" / "lru-cache-recency"


def _tool(name: str, required: list[str]) -> dict:
    properties = {key: {"type": "string", "description": key} for key in [*required, "timeout"]}
    return {"type": "function", "function": {"name": name, "description": f"the {name} tool",
                                             "parameters": {"type": "object", "properties": properties,
                                                            "required": required}}}


# (scaffold's shell tool, its required parameters), beside a tool the teacher must not pick
SHELL_TOOLS = {"oc": _tool("bash", ["command"]), "cc": _tool("Bash", ["command", "description"]),
               "ohsdk": _tool("terminal", ["command"])}
READ_TOOL = _tool("read", ["filePath"])


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


def _render(tokenizer, messages: list[dict], tools: list[dict] | None) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)


def _first_turn(task_dir: Path) -> list[dict]:
    return [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": (task_dir / "instruction.md").read_text()}]


def _parse(tokenizer, parser_name: str, text: str, tools: list[dict]):
    from rlkit.proxy.toolcalls import VerlToolParser

    ids = tokenizer.encode(text, add_special_tokens=False)
    return asyncio.run(VerlToolParser(parser_name, tokenizer).parse(ids, text, tools, b"tools"))


@pytest.mark.parametrize("scaffold", sorted(SHELL_TOOLS))
def test_first_turn_calls_the_shell_tool_with_the_oracle_commands(scaffold: str, tokenizer) -> None:
    tools = [READ_TOOL, SHELL_TOOLS[scaffold]]
    script = TeacherScript.from_task_dirs([TASK, OTHER])
    reply = script.reply(_render(tokenizer, _first_turn(TASK), tools))

    assert reply.startswith("<tool_call>\n<function=") and reply.count("<tool_call>") == 1
    parsed = _parse(tokenizer, "qwen3_coder", reply, tools)
    assert not parsed.parse_failure
    [call] = parsed.tool_calls
    name = SHELL_TOOLS[scaffold]["function"]["name"]
    arguments = json.loads(call["arguments"])
    assert call["name"] == name
    assert arguments["command"] == solution_keystrokes((TASK / "solution" / "solve.sh").read_text()).rstrip("\n")
    # required parameters are filled, optional ones left to the tool's defaults
    assert set(arguments) == set(SHELL_TOOLS[scaffold]["function"]["parameters"]["required"])
    # the wrong parser cannot read the policy's syntax: what the proxy flags as a parse failure
    assert _parse(tokenizer, "hermes", reply, tools).parse_failure


def test_after_the_tool_result_it_answers_in_plain_text(tokenizer) -> None:
    tools = [SHELL_TOOLS["oc"]]
    script = TeacherScript.from_task_dirs([TASK])
    call = {"type": "function", "function": {"name": "bash", "arguments": {"command": "cd /app && git apply"}}}
    messages = [*_first_turn(TASK), {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": "Applied patch wordfreq/count.py cleanly."}]
    prompt = _render(tokenizer, messages, tools)
    assert "<tool_response>" in prompt
    reply = script.reply(prompt)
    assert reply == DONE_REPLY and not _parse(tokenizer, "qwen3_coder", reply, tools).tool_calls


def test_unknown_task_gives_up_in_plain_text(tokenizer) -> None:
    script = TeacherScript.from_task_dirs([OTHER])
    assert script.reply(_render(tokenizer, _first_turn(TASK), [SHELL_TOOLS["oc"]])) == GIVE_UP_TEXT


def test_without_tools_it_stays_a_terminus_action(tokenizer) -> None:
    script = TeacherScript.from_task_dirs([TASK])
    action = json.loads(script.reply(_render(tokenizer, _first_turn(TASK), None)))
    assert "wordfreq/count.py" in action["commands"][0]["keystrokes"] and action["task_complete"] is True
