"""The scripted teacher's replies under a tool-calling scaffold (OpenCode, Claude Code, OpenHands SDK).

The agent sends its tools; the chat template renders them into the system turn as
`<function>\\n<name>NAME</name>...<parameters>{json schema}</parameters>`. The teacher
finds the scaffold's shell tool there and answers the first turn with ONE call to it in
the policy's own syntax (qwen3_coder, what the template asks for) carrying the oracle's
commands. Once a tool result is in the prompt (`<tool_response>`), it answers in plain
text, which ends the agent's turn.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Each scaffold's shell tool: OpenCode `bash`, Claude Code `Bash`, OpenHands SDK `terminal`.
SHELL_TOOLS = ("bash", "Bash", "terminal")
DONE_REPLY = "The fix is applied."
GIVE_UP_TEXT = "I do not know this task."
TOOL_RESULT = "<tool_response>"
# Required string parameters other than the command, and what the teacher puts in them.
_OTHER_ARGS = {"description": "Apply the fix"}
_TOOLS_BLOCK = re.compile(r"<tools>(.*?)</tools>", re.DOTALL)
_FUNCTION = re.compile(r"<function>\n<name>(.*?)</name>.*?<parameters>(.*?)</parameters>\n</function>", re.DOTALL)


def rendered_tools(prompt_text: str) -> dict[str, dict[str, Any]]:
    """Tool name -> parameters schema, as the chat template rendered them (empty: no tools)."""
    block = _TOOLS_BLOCK.search(prompt_text.split("<|im_start|>user", 1)[0])
    if block is None:
        return {}
    tools = {}
    for name, params in _FUNCTION.findall(block.group(1)):
        try:
            tools[name] = json.loads(params)
        except ValueError:
            tools[name] = {}
    return tools


def shell_tool(prompt_text: str) -> tuple[str, dict[str, Any]] | None:
    """(name, parameters schema) of the scaffold's shell tool in the prompt; None without one."""
    tools = rendered_tools(prompt_text)
    for name in SHELL_TOOLS:
        if name in tools:
            return name, tools[name]
    return None


def tool_call_text(name: str, arguments: dict[str, str]) -> str:
    """One call in qwen3_coder syntax, as the chat template renders an assistant's tool call."""
    params = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in arguments.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def shell_call_arguments(schema: dict[str, Any], commands: str) -> dict[str, str]:
    """`command` plus the schema's other required parameters the teacher knows how to fill."""
    arguments = {"command": commands.rstrip("\n")}
    for key in schema.get("required") or ():
        if key in _OTHER_ARGS:
            arguments[key] = _OTHER_ARGS[key]
    return arguments


def tool_reply(prompt_text: str, tool: tuple[str, dict[str, Any]], commands: str | None) -> str:
    """The first turn: the oracle's commands through the shell tool; after a tool result: done."""
    conversation = prompt_text.split("<|im_start|>user", 1)[-1]
    if TOOL_RESULT in conversation:
        return DONE_REPLY
    if commands is None:
        return GIVE_UP_TEXT
    name, schema = tool
    return tool_call_text(name, shell_call_arguments(schema, commands))
