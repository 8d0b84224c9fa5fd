"""One run's status from its files: alive or not, step k/N, step time and ETA, the first-step numbers,
and a collapse in progress (rlkit.monitor.collapse, over the last steps' records).

Reads the ends of the metric files only (a 1 GB console log costs its first and last lines),
step_<N>/summary.json of the first and last step, the last vLLM throughput line and the lock.
Everything is the latest attempt's (rlkit.monitor.metrics): its step time, its reaper line (the
one naming its pid), and N from its marker (else the config, else the lock), so the CLI and
the dashboard say the same k/N. A gauge (vLLM's throughput) carries its age.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from rlkit.monitor import collapse as collapse_mod
from rlkit.monitor import firststep, metrics, trials, vllm_log
from rlkit.monitor import tail as tail_mod
from rlkit.monitor.run import Liveness, RunRef, liveness
from rlkit.monitor.values import count, finite_json


@dataclass
class RunStatus:
    ref: RunRef
    live: Liveness
    last_step: int | None
    first_step: int | None
    step_time_s: float | None
    eta_s: float | None
    numbers: list[firststep.Number]
    latest: dict[str, float] = field(default_factory=dict)
    throughput: vllm_log.Throughput | None = None
    interrupted_step: int | None = None  # a step folder past the last logged step: the run died inside it
    reaper: str | None = None  # the latest attempt's reaper line: what it cleaned up after the trainer died
    throughput_age_s: float | None = None  # how old the vLLM reading is
    attempt: metrics.Attempt | None = None  # the latest attempt's marker
    warnings: list[str] = field(default_factory=list)  # lines of the run's files skipped (too long, torn)

    @cached_property
    def collapse(self) -> collapse_mod.Collapse | None:
        """A collapse the run's last steps show (rlkit.monitor.collapse), read when first asked for."""
        return collapse_of(self.ref.paths)

    def as_dict(self) -> dict[str, Any]:
        """The status as strict JSON data: a number that is not finite is null."""
        p = self.ref.paths
        return finite_json({"project": p.project, "exp": p.exp, "root": str(p.root), "state": self.live.state,
                "alive": self.live.alive, "pid": self.live.pid, "phase": self.live.phase,
                "heartbeat_age_s": self.live.heartbeat_age_s, "processes": self.live.processes,
                "step": self.last_step, "total_steps": self.ref.total_steps, "first_step": self.first_step,
                "step_time_s": self.step_time_s, "eta_s": self.eta_s,
                "first_step_numbers": [n.as_dict() for n in self.numbers],
                "collapse": self.collapse.as_dict() if self.collapse else None,
                "interrupted_step": self.interrupted_step, "reaper": self.reaper,
                "attempt": self.attempt.as_dict() if self.attempt else None,
                "latest": {k: self.latest[k] for k in LATEST_KEYS if k in self.latest},
                "vllm": ({**self.throughput.as_dict(), "age_s": self.throughput_age_s, "current": self.live.alive}
                         if self.throughput else None), "warnings": self.warnings})


LATEST = {"critic/rewards/mean": "reward", "rollout/pass_rate": "pass", "actor/kl_loss": "kl",
          "actor/entropy": "entropy", "response_length/mean": "resp_len", "timing_s/step": "step_s"}
LATEST_KEYS = tuple(LATEST)


REAPER_PID_RE = re.compile(r"trainer pid (\d+) died")


def total_steps(ref: RunRef, attempt: metrics.Attempt | None) -> int | None:
    """N of k/N: the latest attempt's (what the trainer runs to), else the config's, else the lock's."""
    if attempt is not None and attempt.total_steps:
        return attempt.total_steps
    if ref.total_steps:
        return ref.total_steps
    from rlkit.config.owner import read_lock

    return count((read_lock(ref.paths.lock) or {}).get("total_steps")) or None


def reaper_line(paths: Any, pid: int | None, skips: tail_mod.Skips | None = None) -> str | None:
    """The reaper's last report of a death, when it is about the latest attempt's trainer (`pid`; any without)."""
    line = next(tail_mod.lines_from_end(paths.logs / f"{paths.exp}_reaper.log", skips=skips, max_bytes=1 << 20), None)
    m = REAPER_PID_RE.search(line or "")
    if m is None or len(m.group(1)) > 10 or (pid is not None and int(m.group(1)) != pid):
        return None
    return line[:2000]


def _age(path: Any) -> float | None:
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except OSError:
        return None


def collapse_of(paths: Any) -> collapse_mod.Collapse | None:
    """The collapse rule over the last LOOKBACK steps (in the last LOOKBACK_BYTES): their metric records, and the
    summaries of the steps whose records carry no outcome counts (a verl run) and of the last stretch (which
    outcomes still earned reward)."""
    records = metrics.tail(paths, n=collapse_mod.LOOKBACK, max_bytes=collapse_mod.LOOKBACK_BYTES).records
    wanted = {s for s, d in records if not any(k.startswith(collapse_mod.OUTCOME_PREFIX) for k in d)}
    wanted |= {s for s, _ in records[-collapse_mod.WINDOW:]}
    if not records:
        wanted = set(trials.step_numbers(paths.trials)[-collapse_mod.LOOKBACK:])
    summaries = {s: trials.read_summary(paths.trials, s) for s in wanted}
    return collapse_mod.detect(collapse_mod.points(records, summaries))


def collect(ref: RunRef) -> RunStatus:
    paths = ref.paths
    skips = tail_mod.Skips()
    end = metrics.tail(paths, n=3, skips=skips)
    tail = end.records
    ref.total_steps = total_steps(ref, end.attempt)
    first = metrics.first_record(paths, end.attempt, skips)
    steps_on_disk = trials.step_numbers(paths.trials)
    last_step = tail[-1][0] if tail else None
    first_step = first[0] if first else (steps_on_disk[0] if steps_on_disk else None)
    times = [t for t in (metrics.elapsed(d) for _, d in end.latest_records) if t is not None]
    step_time = sum(times) / len(times) if times else None
    interrupted = bool(steps_on_disk) and steps_on_disk[-1] > (last_step or 0)
    live = liveness(ref, last_step, interrupted)
    eta = None
    if step_time is not None and ref.total_steps and last_step is not None and live.alive:
        eta = max(ref.total_steps - last_step, 0) * step_time
        eta = eta if math.isfinite(eta) else None
    summary = trials.read_summary(paths.trials, first_step) if first_step is not None else None
    first_metrics = first[1] if first else {}
    numbers = firststep.first_step_numbers(summary, first_metrics, ref.tool_call_parser)
    pid = end.attempt.pid if end.attempt else None
    throughput = vllm_log.last_throughput(paths.vllm_log, skips=skips)
    reaper = reaper_line(paths, live.pid if live.pid else pid, skips)
    return RunStatus(ref, live, last_step, first_step, step_time, eta, numbers,
                     latest=tail[-1][1] if tail else {}, throughput=throughput,
                     interrupted_step=steps_on_disk[-1] if interrupted else None, reaper=reaper,
                     throughput_age_s=_age(paths.vllm_log), attempt=end.attempt, warnings=skips.messages())


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds > 10**9:
        return "—"
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def render_collapse(found: collapse_mod.Collapse) -> list[str]:
    lines = [f"collapse {firststep.BAD} {found.headline.removeprefix('collapse: ')}", f"         {found.numbers}"]
    return lines + [f"         try: {tip}" for tip in found.advice]


def render(status: RunStatus) -> str:
    p, live = status.ref.paths, status.live
    lines = [f"run      {p.project}/{p.exp}   ({p.root})"]
    state = {"running": "running", "stale-lock": "crashed (lock left by a dead process)", "finished": "finished",
             "stopped": "not running: stopped before its last step (crashed or interrupted)",
             "unknown": "not running (no lock, no process)"}[live.state]
    detail = []
    if live.pid:
        detail.append(f"pid {live.pid}")
    if live.heartbeat_age_s is not None and live.alive:
        detail.append(f"heartbeat {_duration(live.heartbeat_age_s)} ago")
    if live.phase and live.alive:
        detail.append(f"phase {live.phase}")
    procs = " · ".join(f"{role} {len(pids)}" for role, pids in sorted(live.processes.items()) if role != "trainer")
    if live.state == "unknown" and status.last_step is None and status.first_step is None:
        state = f"not started: nothing under {p.logs} or {p.trials} yet"
    if live.state == "stopped" and status.interrupted_step is not None:
        state = f"not running: stopped during step {status.interrupted_step} (crashed or interrupted)"
    lines.append(f"state    {state}" + (f" ({', '.join(detail)})" if detail else "") + (f"   [{procs}]" if procs else ""))
    if status.attempt is not None and status.attempt.attempt > 1:
        lines.append(f"attempt  {status.attempt.attempt}: restarted after step {status.attempt.from_step}"
                     + (f" at {status.attempt.time}" if status.attempt.time else ""))
    if status.reaper and not live.alive:
        lines.append(f"reaper   {status.reaper}")
    total = status.ref.total_steps
    step = "—" if status.last_step is None else str(status.last_step)
    row = f"step     {step}/{total if total else '?'}"
    if status.step_time_s is not None:
        row += f"   step time {status.step_time_s:.1f}s"
    if status.eta_s is not None:
        row += f"   ETA {_duration(status.eta_s)}"
    elif live.state == "finished":
        row += "   done"
    lines.append(row)
    t = status.throughput
    if t is not None:
        age = "" if status.throughput_age_s is None else f", {_duration(status.throughput_age_s)} ago"
        head = "vLLM     " if live.alive else "vLLM     last reading (the run is not running): "
        lines.append(f"{head}gen {t.gen_tps:.1f} tok/s, prompt {t.prompt_tps:.1f} tok/s, running {t.running}, "
                     f"waiting {t.waiting}, KV {t.kv_usage:.1f}%  (at {t.time}{age})")
    latest = status.latest
    if latest and status.last_step != status.first_step:
        bits = [f"{LATEST[k]} {latest[k]:.4g}" for k in LATEST_KEYS if k in latest]
        lines.append(f"latest   step {status.last_step}: " + "  ".join(bits))
    if status.collapse is not None:
        lines.extend(render_collapse(status.collapse))
    lines.append("")
    which = f"step {status.first_step}" if status.first_step is not None else "no step finished yet"
    lines.append(f"first step ({which})")
    width = max(len(n.name) for n in status.numbers)
    for i, n in enumerate(status.numbers, 1):
        lines.append(f"  {i}. {n.name.ljust(width)}  {n.value}")
        lines.append(f"     {' ' * width}  {n.mark} {n.verdict}")
    lines += [f"⚠ {w}" for w in status.warnings]
    return "\n".join(lines)
