"""A scripted teacher that stands in for vLLM behind the real proxy.

The proxy calls it exactly as it calls vLLM (`/v1/completions` with prompt token ids,
`return_token_ids`, `logprobs`, plus `/health` and `/v1/models` for the context window).
It decodes the prompt with the policy's tokenizer, finds which task the conversation is
about (by its instruction) and answers with one of that task's fixes as one Terminus-2 JSON
action: the solution's shell commands typed as keystrokes, with `task_complete`. A task's fixes
are its oracle (`solution/solve.sh`) and, when taught, its decoys (`solution/decoys/*.sh`:
plausible fixes that fail the tests); the teacher takes them in turn, one per trial, so the
warm-started policy knows every candidate and not which one pays. When
Terminus-2 asks to confirm completion, it confirms. Under a tool-calling scaffold (tools in
the prompt) it calls the scaffold's shell tool with those commands instead, then ends the
turn in plain text (`_teacher_tools`). The reply is tokenized with the same
tokenizer and returned as vLLM would return it (ids ending in end-of-turn, logprob 0.0),
so the proxy records the very token sequences the policy is later trained on.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from rlkit.train._teacher_tools import shell_tool, tool_reply

CONFIRM_HINT = "Are you sure you want to mark the task as complete"
CONFIRM_REPLY = {"analysis": "The fix is applied.", "plan": "Confirm.", "commands": [], "task_complete": True}
GIVE_UP_REPLY = {"analysis": "Unknown task.", "plan": "Stop.", "commands": [], "task_complete": True}
# Commands Terminus-2's prompt calls immediate (cd, ls, echo, cat) and their kin: they edit a file or
# print and return at once.
IMMEDIATE_COMMANDS = frozenset({"cd", "ls", "echo", "cat", "printf", "sed", "mkdir", "cp", "mv", "rm", "touch",
                                "tee", "chmod", "ln", "patch", "true"})
# The teacher's answers, part of the warm start's cache key: a new version records anew.
TEACHER_VERSION = 3
_KEY_CHARS = 120  # leading characters of an instruction that identify its task in a prompt


def heredoc_tag(line: str) -> str | None:
    """The word that ends the heredoc this shell line opens (`<<'PATCH'` -> PATCH), if it opens one."""
    return line.split("<<", 1)[1].strip().strip("-").strip("'\"") or None if "<<" in line else None


def solution_keystrokes(solve_sh: str) -> str:
    """The oracle's shell commands as terminal keystrokes: shebang, comments and `set` dropped."""
    lines = solve_sh.splitlines()
    keep: list[str] = []
    in_heredoc = None
    for line in lines:
        if in_heredoc is None:
            stripped = line.strip()
            if not stripped or stripped.startswith(("#", "set -")):
                continue
            in_heredoc = heredoc_tag(line)
        elif line.strip() == in_heredoc:
            in_heredoc = None
        keep.append(line)
    return "\n".join(keep) + "\n"


def command_lines(keystrokes: str) -> list[str]:
    """The shell's own command lines of some keystrokes: heredoc bodies left out."""
    commands: list[str] = []
    in_heredoc = None
    for line in keystrokes.splitlines():
        if in_heredoc is not None:
            if line.strip() == in_heredoc:
                in_heredoc = None
            continue
        if line.strip():
            commands.append(line.strip())
        in_heredoc = heredoc_tag(line)
    return commands


def command_duration(keystrokes: str) -> float:
    """Seconds Terminus-2 waits after the keystrokes, as its prompt asks: 0.1 when every command
    is immediate (file edits, cd, echo), 1.0 otherwise. Terminus sleeps the whole duration."""
    immediate = all(line.split()[0] in IMMEDIATE_COMMANDS or line.startswith("git apply")
                    for line in command_lines(keystrokes))
    return 0.1 if immediate else 1.0


def fix_action(solve_sh: str) -> dict[str, Any]:
    """The Terminus-2 action that applies the oracle fix and marks the task complete."""
    keystrokes = solution_keystrokes(solve_sh)
    return {"analysis": "The bug is in the code.", "plan": "Apply the fix.",
            "commands": [{"keystrokes": keystrokes, "duration": command_duration(keystrokes)}],
            "task_complete": True}


def action_text(action: dict[str, Any]) -> str:
    """Compact JSON (fewest tokens; Terminus-2's parser takes any valid JSON object)."""
    return json.dumps(action, ensure_ascii=False, separators=(", ", ": "))


def task_fixes(task_dir: Path, *, decoys: bool = True) -> list[str]:
    """A task's fixes to teach: the oracle's solve.sh first, then its decoys (sorted by name) if asked."""
    fixes = [(task_dir / "solution" / "solve.sh").read_text()]
    if decoys:
        fixes += [p.read_text() for p in sorted((task_dir / "solution" / "decoys").glob("*.sh"))]
    return fixes


@dataclass
class TeacherScript:
    """Which reply a prompt gets: task key -> the task's fixes (oracle first), taught in turn."""

    solutions: dict[str, list[str]] = field(default_factory=dict)
    _served: dict[str, int] = field(default_factory=dict)  # first turns answered per task

    @classmethod
    def from_task_dirs(cls, task_dirs: list[Path], *, decoys: bool = True) -> TeacherScript:
        solutions = {}
        for task_dir in task_dirs:
            instruction = (task_dir / "instruction.md").read_text()
            solutions[_task_key(instruction)] = task_fixes(task_dir, decoys=decoys)
        return cls(solutions)

    def solution(self, prompt_text: str) -> str | None:
        """The fix for this conversation: a new trial (one user turn so far) takes the task's next fix
        in turn; a later turn of the same trial repeats the fix its first turn took."""
        for key, fixes in self.solutions.items():
            if key in prompt_text:
                first_turn = prompt_text.count("<|im_start|>assistant") <= 1
                served = self._served.get(key, 0)
                if first_turn:
                    self._served[key] = served + 1
                    return fixes[served % len(fixes)]
                return fixes[(served - 1) % len(fixes)]
        return None

    def reply(self, prompt_text: str) -> str:
        tool = shell_tool(prompt_text)
        if tool is None and CONFIRM_HINT in prompt_text.rsplit("<|im_start|>user", 1)[-1]:
            return action_text(CONFIRM_REPLY)  # no fix taken: the trial's turn in the rota is kept
        solve = self.solution(prompt_text)
        if tool is not None:
            return tool_reply(prompt_text, tool, solution_keystrokes(solve) if solve is not None else None)
        return action_text(fix_action(solve) if solve is not None else GIVE_UP_REPLY)


def _task_key(instruction: str) -> str:
    return instruction.strip()[:_KEY_CHARS]


class TeacherServer:
    """The teacher on a loopback port, in a daemon thread (stdlib HTTP/1.1, keep-alive)."""

    def __init__(self, model_dir: str | Path, script: TeacherScript, *, served_model_name: str = "policy",
                 max_model_len: int = 32768, host: str = "127.0.0.1", port: int = 0) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.eos_id = self.tokenizer.convert_tokens_to_ids(self.tokenizer.eos_token)
        self.script = script
        self.served_model_name = served_model_name
        self.max_model_len = max_model_len
        self.calls = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One vLLM-shaped /v1/completions answer for a token-id prompt."""
        prompt = body.get("prompt") or []
        with self._lock:  # one tokenizer, many handler threads
            self.calls += 1
            prompt_text = self.tokenizer.decode(prompt, skip_special_tokens=False)
            ids = self.tokenizer.encode(self.script.reply(prompt_text), add_special_tokens=False) + [self.eos_id]
        finish = "stop"
        limit = body.get("max_tokens")
        if limit is not None and len(ids) > int(limit):
            ids, finish = ids[:int(limit)], "length"
        text_ids = ids[:-1] if finish == "stop" else ids
        with self._lock:
            text = self.tokenizer.decode(text_ids, skip_special_tokens=False)
        choice = {"index": 0, "text": text, "token_ids": ids, "finish_reason": finish,
                  "logprobs": {"token_logprobs": [0.0] * len(ids), "tokens": None, "top_logprobs": None,
                               "text_offset": None}}
        return {"id": f"cmpl-teacher-{self.calls}", "object": "text_completion", "model": self.served_model_name,
                "choices": [choice], "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                                               "total_tokens": len(prompt) + len(ids)}}

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.served_model_name, "object": "model",
                                            "max_model_len": self.max_model_len}]}

    def start(self) -> TeacherServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="rlkit-teacher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler_for(teacher: TeacherServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the proxy's pool expects

        def _answer(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # http.server's naming
            if self.path == "/health":
                self._answer(200, {})
            elif self.path == "/v1/models":
                self._answer(200, teacher.models())
            else:
                self._answer(404, {"error": "not found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            if self.path != "/v1/completions":
                self._answer(404, {"error": "not found"})
                return
            self._answer(200, teacher.complete(body))

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    return Handler
