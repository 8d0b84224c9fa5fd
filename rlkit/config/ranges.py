"""The real range of every config key, checked when the config is typed.

`RunConfig` validates each key against `rule_for(key)`: an explicit rule from RULES, else
the default of its type (ints bounded, floats finite, text bounded and free of control
characters, paths also with bounded components). Rules never format the value itself
(a 5,000-digit integer cannot even be printed), and their text goes into the docs.
"""

from __future__ import annotations

import ipaddress
import math
import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import urlparse

INT_MAX = 2**31 - 1
TEXT_MAX = 4096
PATH_MAX = 4096
NAME_MAX = 255  # bytes of one path component on every common filesystem


@dataclass(frozen=True)
class IntRange:
    lo: int
    hi: int = INT_MAX
    why: str = ""  # what the upper end is derived from (the fix hint says it)

    def check(self, value: int) -> str | None:
        if self.lo <= value <= self.hi:
            return None
        if self.hi == INT_MAX:
            return f"must be at least {self.lo}" if value < self.lo else f"must be at most {self.hi}"
        return f"must be in {self.lo}..{self.hi}"

    def text(self) -> str:
        return f"{self.lo}..{self.hi}" if self.hi != INT_MAX else f">= {self.lo}"


@dataclass(frozen=True)
class FloatRange:
    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    why: str = ""
    zero_ok: bool = False  # 0 is allowed too (LR 0: the update switched off)

    def check(self, value: float) -> str | None:
        if not math.isfinite(value):
            return "must be a finite number (not nan or inf)"
        if self.zero_ok and value == 0:
            return None
        if value < self.lo or (self.lo_open and value == self.lo) or value > self.hi:
            return f"must be in {self.text()}"
        return None

    def text(self) -> str:
        if self.lo == -math.inf and self.hi == math.inf:
            return "finite"
        left = "(" if self.lo_open else "["
        hi = "" if self.hi == math.inf else f"{self.hi:g}"
        text = f"{left}{self.lo:g}, {hi}]" if hi else f"{'>' if self.lo_open else '>='} {self.lo:g}"
        return f"0 or {text}" if self.zero_ok else text


def control_char(text: str) -> str | None:
    """The first control / line-separator character in `text`, as U+XXXX (None when clean)."""
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch in "\ufeff":
            return f"U+{ord(ch):04X}"
    return None


# What a terminal acts on instead of showing: C0 and C1 controls (ESC starts every escape sequence,
# U+009B is a one-character CSI), DEL, line / paragraph separators, bidi overrides that reorder
# what is shown, and the byte-order mark.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\ufeff]")


def _escaped(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_controls(text: str, keep: str = "\n\t") -> str:
    """`text` with every control character shown escaped (ESC as \\x1b), except those in `keep`."""
    if not _CONTROLS.search(text):
        return text
    if not keep:
        return _CONTROLS.sub(_escaped, text)
    return _CONTROLS.sub(lambda m: m.group(0) if m.group(0) in keep else _escaped(m), text)


@dataclass(frozen=True)
class TextRule:
    max_len: int = TEXT_MAX
    kind: str = "text"  # text | path | host | docker_host | namespace

    def check(self, value: str) -> str | None:
        if len(value) > self.max_len:
            return f"is {len(value)} characters long; at most {self.max_len}"
        bad = control_char(value)
        if bad:
            return f"contains the control character {bad}"
        return getattr(self, f"_{self.kind}")(value)

    why: str = ""

    def _text(self, value: str) -> str | None:
        return None

    def _path(self, value: str) -> str | None:
        for part in value.split("/"):
            if len(part.encode("utf-8", "surrogatepass")) > NAME_MAX:
                return f"has a path component longer than {NAME_MAX} bytes"
        return None

    def _host(self, value: str) -> str | None:
        if not value:
            return None
        try:
            ipaddress.ip_address(value)
            return None
        except ValueError:
            pass
        if re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                        r"[A-Za-z0-9])?)*\.?", value) and len(value) <= 253:
            return None
        return "is neither an IP address nor a host name (ASCII letters, digits, '-' and '.')"

    def _docker_host(self, value: str) -> str | None:
        url = urlparse(value)
        if url.scheme not in ("unix", "tcp", "http", "https", "ssh", "npipe"):
            return "must be unix:///path, tcp://host:port, http(s)://host:port or ssh://host"
        if url.scheme == "unix":
            return None if url.path else "unix:// needs a socket path"
        try:
            port = url.port
        except ValueError:
            return "has a port outside 1..65535"
        if port is not None and not 1 <= port <= 65535:
            return "has a port outside 1..65535"
        host = url.hostname or ""
        return self._host(host) if host else "names no host"

    def _namespace(self, value: str) -> str | None:
        if re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", value):
            return None
        return "must be a kubernetes name: lower-case letters, digits and '-', at most 63"

    def text(self) -> str:
        extra = {"text": "", "path": ", path", "host": ", IP or host name", "docker_host": ", docker URL",
                 "namespace": ", DNS label"}[self.kind]
        return f"<= {self.max_len} chars{extra}"


PORT = IntRange(1, 65535, "a TCP port")
# Every count, size, rate, coefficient and wait has an upper end: what a run can use. The checks that
# see the world narrow them further (a batch beyond the index's rows, a window beyond the model's,
# sandboxes beyond this machine's CPUs: rlkit/validate).
NODES = IntRange(1, 4096, "nodes in one Ray cluster")
PER_NODE = IntRange(1, 64, "GPUs in one node")
GROUP = IntRange(1, 1024, "responses per prompt; GRPO groups are 4-64")
BATCH = IntRange(1, 65536, "prompts per step")
TOKENS = IntRange(1, 2**24, "tokens: no model's window is longer")
FREQ = IntRange(-1, 1_000_000, "steps; -1: never")
WAIT = IntRange(1, 86400, "seconds: 0 gives up at once, more than a day hangs a broken run for days")

RULES: dict[str, IntRange | FloatRange | TextRule] = {
    "NNODES": NODES, "N_NODES_TRAIN": NODES, "N_NODES_ROLLOUT": IntRange(0, 4096, "nodes in one Ray cluster"),
    "SP_SIZE": IntRange(1, 1024, "GPUs one sequence is split over"),
    "EP_SIZE": IntRange(1, 1024, "GPUs the experts are split over"), "ROLLOUT_TP": PER_NODE,
    "TRAIN_BSZ": BATCH, "N_RESP": GROUP, "MINI_BSZ": BATCH, "MAX_PROMPT": TOKENS, "MAX_RESP": TOKENS,
    "TOTAL_EPOCHS": IntRange(1, 100_000, "passes over the index"),
    "TOTAL_STEPS": IntRange(0, 10_000_000, "steps; 0: TOTAL_EPOCHS passes"),
    "TRAINER_SAVE_FREQ": FREQ, "TRAINER_TEST_FREQ": FREQ, "VAL_N": GROUP,
    "PARAM_SYNC_STEPS": IntRange(1, 65536, "mini-batches per step"),
    "MAX_OFF_POLICY": IntRange(0, 1024, "policy versions"), "GPUS_PER_NODE": PER_NODE,
    "SEED": IntRange(0, 2**31 - 2, "a seed (vLLM takes 31 bits)"),
    "MAX_SANDBOXES": IntRange(1, 4096, "sandboxes one node runs at once"), "NODE_WAIT_S": WAIT,
    "REPLICA_WAIT_S": WAIT, "RAY_PORT": PORT, "PROXY_PORT": PORT, "DASHBOARD_PORT": PORT,
    "ROLLOUT_GPU_MEM": FloatRange(0.05, 1.0, why="a fraction of GPU memory; below 0.05 vLLM fits no KV cache"),
    "LR": FloatRange(1e-9, 0.1, zero_ok=True, why="a learning rate; 0 switches the update off (a control run), "
                                                   "below 1e-9 nothing moves, above 0.1 the policy diverges"),
    "KL_LOSS_COEF": FloatRange(0.0, 10.0, why="a loss coefficient; 0 disables the KL loss, typical values are "
                                             "0.001-0.1"),
    "PROJECT_NAME": TextRule(128), "EXP_NAME": TextRule(128),
    "RAY_HEAD_ADDRESS": TextRule(253, "host"), "NODE_IP": TextRule(253, "host"), "PROXY_HOST": TextRule(253, "host"),
    "DOCKER_HOST": TextRule(PATH_MAX, "docker_host"), "K8S_NAMESPACE": TextRule(63, "namespace"),
}
DEFAULT_INT = IntRange(-INT_MAX, INT_MAX)
DEFAULT_FLOAT = FloatRange()
DEFAULT_TEXT = TextRule()
DEFAULT_PATH = TextRule(PATH_MAX, "path")


def rule_for(name: str, annotation: object, path: bool) -> IntRange | FloatRange | TextRule | None:
    if name in RULES:
        return RULES[name]
    if annotation is bool:
        return None
    if annotation is int:
        return DEFAULT_INT
    if annotation is float:
        return DEFAULT_FLOAT
    if annotation is str:
        return DEFAULT_PATH if path else DEFAULT_TEXT
    return None  # enums: their members are the range
