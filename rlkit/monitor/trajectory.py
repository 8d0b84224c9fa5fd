"""One trial as a reader follows it: the instruction, then each turn (what the agent sent, what came
back), from the trial's own files.

    agent/trajectory.json              ATIF with the token ids (rlkit's proxy record): one agent step per
                                       model call; the instruction as its first (user) step and each
                                       call's observation when the trial wrote them
    agent/trajectory.<scaffold>.json   the agent's own ATIF conversion: its first user step and each agent
                                       step's observation (terminal output, tool results). Older trials hold
                                       the observations only here: they are matched to the calls in order.

What the agent sent is rendered, not shown as escaped JSON: a Terminus reply
(`{"analysis", "plan", "commands": [{"keystrokes"}], "task_complete"}`) becomes its fields and
the commands it typed; a tool call to a shell tool becomes the command line; anything else is
its text as the model wrote it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rlkit.config.files import json_value
from rlkit.monitor.run_files import NAME_RE, read_json

SHELL_ARGS = ("keystrokes", "command", "cmd", "script", "code")
OBSERVATION_LIMIT = 20_000


def _agent_view(agent_dir: Path, root: Path) -> dict[str, Any] | None:
    """The agent's own ATIF (`trajectory.<scaffold>.json`) beside the token trajectory, if one is there."""
    try:
        names = sorted(p.name for p in agent_dir.iterdir())
    except OSError:
        return None
    for name in names:
        if name.startswith("trajectory.") and name.endswith(".json") and name != "trajectory.json" \
                and NAME_RE.match(name):
            data = read_json(agent_dir / name, root)
            if isinstance(data, dict) and isinstance(data.get("steps"), list):
                return data
    return None


def _steps(atif: dict[str, Any] | None) -> list[dict[str, Any]]:
    steps = (atif or {}).get("steps")
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        return "\n".join(_text(v.get("text", v) if isinstance(v, dict) else v) for v in value)
    return json.dumps(value, indent=1, ensure_ascii=False)


def observation_texts(step: dict[str, Any]) -> list[str]:
    obs = step.get("observation")
    if not isinstance(obs, dict):
        return []
    results = obs.get("results") if isinstance(obs.get("results"), list) else [obs]
    out = []
    for result in results:
        content = result.get("content") if isinstance(result, dict) else result
        if content is not None:
            text = _text(content)
            out.append(text if len(text) <= OBSERVATION_LIMIT else text[:OBSERVATION_LIMIT] + "\n… (cut)")
    return out


def render_message(message: Any) -> list[dict[str, str]]:
    """What the agent sent, as blocks: {"kind": "text" | "field" | "command", "label", "text"}."""
    text = _text(message) if message is not None else ""
    stripped = text.strip()
    reply = None
    if stripped.startswith("{") and stripped.endswith("}"):
        reply = json_value(stripped)  # bounded: a reply nested 100,000 deep is shown as text
    if not isinstance(reply, dict):
        loose = _loose_reply(stripped) if stripped.startswith("{") else []
        return loose or ([{"kind": "text", "label": "", "text": text}] if text else [])
    blocks = []
    for key, value in reply.items():
        if key == "commands" and isinstance(value, list):
            for command in value:
                keys = command.get("keystrokes") if isinstance(command, dict) else command
                blocks.append({"kind": "command", "label": "keystrokes", "text": _text(keys)})
        elif key == "task_complete":
            if value:
                blocks.append({"kind": "field", "label": "task_complete", "text": "yes"})
        else:
            blocks.append({"kind": "field", "label": str(key), "text": _text(value)})
    return blocks


_JSON_FIELD = re.compile(r'"(analysis|plan|keystrokes|task_complete)"\s*:\s*(?:"((?:[^"\\]|\\.)*)("?)|(true|false))')


def _unescape(literal: str) -> str:
    try:
        return json.loads(f'"{literal}"')
    except ValueError:  # cut inside an escape
        return literal.encode("utf-8", "replace").decode("unicode_escape", "replace")


def _loose_reply(text: str) -> list[dict[str, str]]:
    """A JSON reply that does not parse (cut off at the token budget, or malformed): its fields, unescaped."""
    blocks = []
    for m in _JSON_FIELD.finditer(text):
        key, literal, closed, flag = m.groups()
        if key == "task_complete":
            if flag == "true":
                blocks.append({"kind": "field", "label": key, "text": "yes"})
            continue
        body = _unescape(literal or "") + ("" if closed else " … (cut off)")
        blocks.append({"kind": "command" if key == "keystrokes" else "field", "label": key, "text": body})
    if blocks:
        blocks.append({"kind": "note", "label": "", "text": "(the reply is not valid JSON: its fields as far as "
                                                            "they go)"})
    return blocks


def render_tool_call(call: dict[str, Any]) -> dict[str, str]:
    name = str(call.get("function_name") or call.get("name") or "")
    args = call.get("arguments")
    if isinstance(args, dict):
        shell = next((args[k] for k in SHELL_ARGS if isinstance(args.get(k), str)), None)
        if shell is not None:
            return {"kind": "command", "label": name, "text": shell}
    return {"kind": "tool", "label": name, "text": _text(args if args is not None else call)}


def turns(agent_dir: Path, token_atif: dict[str, Any] | None, root: Path) -> dict[str, Any]:
    """{"instruction": text or None, "turns": [{step_id, sent: [blocks], observations: [text], extra}],
    "observations_from": where the observations came from}."""
    own = _agent_view(agent_dir, root)
    token_steps = _steps(token_atif)
    users = [s for s in token_steps if s.get("source") == "user"]
    agent_steps = [s for s in token_steps if s.get("source") != "user"] or [
        s for s in _steps(own) if s.get("source") == "agent"]
    instruction = next((_text(s.get("message")) for s in users if s.get("message")), None)
    if instruction is None:
        instruction = next((_text(s.get("message")) for s in _steps(own) if s.get("source") == "user"), None)
    own_agent = [s for s in _steps(own) if s.get("source") == "agent"]
    source = "trajectory.json"
    if not any(observation_texts(s) for s in agent_steps) and own_agent:
        source = "the agent's own trajectory, matched to the calls in order"
    out = []
    for i, step in enumerate(agent_steps):
        observations = observation_texts(step)
        if not observations and source != "trajectory.json" and i < len(own_agent):
            observations = observation_texts(own_agent[i])
        sent = render_message(step.get("message"))
        sent += [render_tool_call(c) for c in step.get("tool_calls") or [] if isinstance(c, dict)
                 and not (sent and any(b["kind"] == "command" for b in sent))]
        extra = step.get("extra") if isinstance(step.get("extra"), dict) else {}
        out.append({"step_id": step.get("step_id"), "sent": sent, "observations": observations,
                    "finish_reason": extra.get("finish_reason"), "parse_failure": bool(extra.get("parse_failure")),
                    "tokens": (step.get("metrics") or {}).get("completion_tokens")
                    if isinstance(step.get("metrics"), dict) else None})
    return {"instruction": instruction, "turns": out, "observations_from": source if out else None}
