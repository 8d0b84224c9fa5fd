"""Findings and the check registry.

A check is a named function `(ctx) -> list[Finding]`. Static checks read only the
resolved config; world checks look at files, the model, daemons, ports and disk.
Checks return findings; only the CLI turns them into exit codes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from rlkit.config.display import clean
from rlkit.errors import UserError
from rlkit.registry import Registry

if TYPE_CHECKING:
    from rlkit.config.resolve import ResolvedConfig


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FATAL = "fatal"
    SKIP = "skip"


MARKS = {Status.OK: "✓", Status.WARN: "⚠", Status.FATAL: "✗ FATAL", Status.SKIP: "-"}
MESSAGE_MAX = 300  # characters of a finding's message (and of its fix): values are quoted, never dumped


class Phase(StrEnum):
    STATIC = "static"
    WORLD = "world"


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    message: str
    fix: str = ""
    key: str | None = None
    where: str | None = None

    def __post_init__(self) -> None:
        # The one cleaning (rlkit.config.display): secrets masked, controls escaped, then clipped.
        object.__setattr__(self, "message", clean(self.message, limit=MESSAGE_MAX, keep=""))
        object.__setattr__(self, "fix", clean(self.fix, limit=MESSAGE_MAX, keep=""))
        if self.where:
            object.__setattr__(self, "where", clean(self.where, limit=200, keep=""))

    def as_dict(self) -> dict[str, str | None]:
        return {"check": self.check, "status": self.status.value, "message": self.message, "fix": self.fix,
                "key": self.key, "where": self.where}

    def render(self) -> str:
        head = f"{MARKS[self.status]} {self.check}: {self.message}"
        if self.where:
            head += f" ({self.where})"
        if self.fix and self.status in (Status.WARN, Status.FATAL):
            head += f"\n      fix: {self.fix}"
        return head


@dataclass
class Context:
    """What every check sees."""

    resolved: ResolvedConfig
    cache_dir: Path
    # Runs the parser probe subprocess; tests swap it to prove a warm run never spawns it.
    probe_runner: Callable[[list[str]], str] | None = None
    notes: dict[str, object] = field(default_factory=dict)


CheckFn = Callable[[Context], list[Finding]]


@dataclass(frozen=True)
class Check:
    name: str
    phase: Phase
    title: str
    target: str  # "module:function", imported when the check runs

    def run(self, ctx: Context) -> list[Finding]:
        from rlkit.registry import import_string

        fn = import_string(self.target)
        return list(fn(ctx))  # type: ignore[operator]


CHECKS: Registry[Check] = Registry("check")

# Declared in display order. Each function lives in the module named by its target.
_TABLE: tuple[tuple[str, Phase, str, str], ...] = (
    ("config_syntax", Phase.STATIC, "config files parse", "rlkit.validate.static:config_syntax"),
    ("changeme", Phase.STATIC, "no CHANGEME left", "rlkit.validate.static:changeme"),
    ("unknown_key", Phase.STATIC, "every key is known", "rlkit.validate.static:unknown_key"),
    ("key_layer", Phase.STATIC, "keys set in their own layer (FATAL for who runs what: agent, image, network)",
     "rlkit.validate.static:key_layer"),
    ("overrides", Phase.STATIC, "every value a later layer replaces is said", "rlkit.validate.static:overrides"),
    ("types", Phase.STATIC, "values have the declared types", "rlkit.validate.static:types"),
    ("logger", Phase.STATIC, "loggers are known and have their credentials", "rlkit.validate.static:logger"),
    ("names", Phase.STATIC, "PROJECT_NAME / EXP_NAME are safe path names", "rlkit.validate.static:names"),
    ("output_dir", Phase.STATIC, "OUTPUT_DIR does not climb out with '..'", "rlkit.validate.static:output_dir"),
    ("secret_spread", Phase.STATIC, "secret values stay in their own keys", "rlkit.validate.static:secret_spread"),
    ("topology", Phase.STATIC, "NNODES = N_NODES_TRAIN + N_NODES_ROLLOUT", "rlkit.validate.static:topology"),
    ("parallelism", Phase.STATIC, "SP_SIZE and ROLLOUT_TP divide their worlds", "rlkit.validate.static:parallelism"),
    ("batch", Phase.STATIC, "batch arithmetic", "rlkit.validate.static:batch"),
    ("cluster_topology", Phase.STATIC, "TRAINER=verl: the Ray head, this node's rank, shared storage",
     "rlkit.validate.cluster:cluster_topology"),
    ("model_dir", Phase.WORLD, "MODEL_PATH is a model directory", "rlkit.validate.model:model_dir"),
    ("context_length", Phase.WORLD, "MAX_PROMPT + MAX_RESP fits the model context",
     "rlkit.validate.model:context_length"),
    ("model_engine", Phase.WORLD, "MODEL_ENGINE suits the model (MoE vs dense)", "rlkit.validate.model:model_engine"),
    ("tool_call_parser", Phase.WORLD, "TOOL_CALL_PARSER parses the chat template's tool calls",
     "rlkit.validate.parser_probe:tool_call_parser"),
    ("data_files", Phase.WORLD, "TRAIN_FILES / VAL_FILES are task indexes", "rlkit.validate.data:data_files"),
    ("artifacts", Phase.WORLD, "existing artifacts: resume or clobber", "rlkit.validate.system:artifacts"),
    ("backend", Phase.WORLD, "sandbox backend reachable", "rlkit.validate.system:backend"),
    ("agent_delivery", Phase.WORLD, "the agent is mounted (docker volume; k8s image volume or init container) or baked",
     "rlkit.validate.agents:agent_delivery"),
    ("capacity", Phase.WORLD, "MAX_SANDBOXES fits this machine's CPUs (docker)", "rlkit.validate.system:capacity"),
    ("ports", Phase.WORLD, "ports free (proxy, dashboard, Ray)", "rlkit.validate.system:ports"),
    ("disk", Phase.WORLD, "disk room for checkpoints", "rlkit.validate.system:disk"),
    ("local_trainer", Phase.WORLD, "TRAINER=local: CPU-sized policy, vLLM venv",
     "rlkit.validate.local_trainer:local_trainer"),
    ("cluster_packages", Phase.WORLD, "TRAINER=verl: verl, vllm, transfer_queue, harbor (veomni) import",
     "rlkit.validate.cluster:cluster_packages"),
)
ORDER: tuple[str, ...] = tuple(row[0] for row in _TABLE)
for _name, _phase, _title, _target in _TABLE:
    CHECKS.register(_name, Check(_name, _phase, _title, _target))


def ok(check: str, message: str, **kw: str | None) -> Finding:
    return Finding(check, Status.OK, message, **kw)  # type: ignore[arg-type]


def warn(check: str, message: str, fix: str, **kw: str | None) -> Finding:
    return Finding(check, Status.WARN, message, fix, **kw)  # type: ignore[arg-type]


def fatal(check: str, message: str, fix: str, **kw: str | None) -> Finding:
    return Finding(check, Status.FATAL, message, fix, **kw)  # type: ignore[arg-type]


def skip(check: str, message: str) -> Finding:
    return Finding(check, Status.SKIP, message)


CHECK_TIMEOUT_S = 60.0  # a check's own time; preflight gives a few checks longer


def run_bounded(check: Check, ctx: Context, timeout_s: float) -> list[Finding]:
    """The check's findings; a crash or a hang is a FATAL of its own, never the end of preflight."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["findings"] = check.run(ctx)
        except Exception as exc:  # noqa: BLE001 -- a broken check must not hide the others' findings
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"check-{check.name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():  # left behind as a daemon thread: it cannot keep the process alive
        return [Finding(check.name, Status.FATAL, f"check did not finish within {timeout_s:.0f} s",
                        "something it reads (a network path, a daemon) hangs; fix that, then run again")]
    if "error" in box:
        exc = box["error"]
        if isinstance(exc, UserError):  # a library's verdict on the config (e.g. a head name that does not resolve)
            return [Finding(check.name, Status.FATAL, exc.message, exc.fix, key=exc.key, where=exc.where() or None)]
        return [Finding(check.name, Status.FATAL, f"check crashed: {type(exc).__name__}: {exc}",
                        "report this as an rlkit bug")]
    return box["findings"]  # type: ignore[return-value]
