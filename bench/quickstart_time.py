"""The README's main command from a fresh clone: where its minutes go, against the 10-minute goal.

Clones a revision of this repository (default HEAD) into a new folder and runs
`bash scripts/quickstart.sh` there, reading its output as it comes and stamping every line. The
phases are cut where their first line shows, so an older revision without the quickstart's own
phase lines is timed the same way:

  setup       installs (.venv, .venv-vllm, apt) and the offline base image
  images      the task images, the tiny model, the indexes
  warm start  `rlkit sft`: teacher trajectories and the fine-tune
  rl          from `rlkit train`'s first line: preflight, Ray, vLLM's boot, validation, the steps
    of which: boot (to the first validation or step), validate (step 0 and the last step), steps

With --cold the clone gets empty uv / pip / rlkit caches (the last holds the warm starts other clones built:
without --cold a fresh clone copies the one this machine has; HOME's caches stay untouched). With
--empty-docker it also gets a docker daemon of its own with an empty data root (its own socket,
exec root and bridge, no NAT; DOCKER_HOST points at it), so the base image (mmdebstrap) and
every task image are built from nothing, as on a machine that never ran docker; the daemon and
its data go afterwards. Without it, docker's images are shared with this machine. The floor
printed beside it is the same clone's `bash scripts/setup.sh` re-run, which installs nothing (what
a second quickstart pays before it trains). Prints a table and writes <out>/quickstart_time.json.

    python bench/quickstart_time.py [--rev HEAD] [--cold] [--empty-docker] [--out DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 10 * 60
# (phase, a line that starts it): the first match of each, in order
MARKERS = [
    ("images", re.compile(r"\[quickstart\] setup done|images? ready|✓ .*(built|cached) +rlkit-task/")),
    ("warm start", re.compile(r"\[quickstart\] images done|warm start:|warm-started model")),
    ("rl", re.compile(r"\[quickstart\] warm start done|Run configuration|Run Validation")),
    ("done", re.compile(r"\[quickstart\] training done|^Run \S+/\S+ \(exit")),
]
STEP_LINE = re.compile(r"^step:(\d+) - ")
VALIDATE = re.compile(r"step (\d+): validat")
ROLLOUT = re.compile(r"step \d+: rollout")  # a progress line, not a check that mentions rollouts


def run_stamped(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[int, list[tuple[float, str]]]:
    """Run `cmd`, echoing and stamping each output line (seconds since start)."""
    start = time.monotonic()
    lines: list[tuple[float, str]] = []
    with log.open("w") as sink, subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            stamp = time.monotonic() - start
            lines.append((stamp, line.rstrip("\n")))
            sink.write(f"{stamp:8.1f} {line}")
            sink.flush()
        code = proc.wait()
    lines.append((time.monotonic() - start, ""))
    return code, lines


def phases(lines: list[tuple[float, str]]) -> dict[str, float]:
    """Seconds per phase, cut at each phase's first marker line."""
    cuts = {"setup": 0.0}
    for name, pattern in MARKERS:
        hit = next((t for t, line in lines if pattern.search(line) and t >= max(cuts.values())), None)
        if hit is not None:
            cuts[name] = hit
    end = lines[-1][0]
    order = [n for n in ("setup", "images", "warm start", "rl", "done") if n in cuts]
    out = {name: (cuts[order[i + 1]] if i + 1 < len(order) else end) - cuts[name]
           for i, name in enumerate(order) if name != "done"}
    if "rl" in cuts:
        rl = [(t, line) for t, line in lines if t >= cuts["rl"]]
        first_work = next((t for t, line in rl if VALIDATE.search(line) or ROLLOUT.search(line)), None)
        steps = [t for t, line in rl if STEP_LINE.match(line)]
        if first_work is not None:
            out["  boot"] = first_work - cuts["rl"]
        if steps:
            out["  to the last step line"] = steps[-1] - (first_work or cuts["rl"])
    return out


def empty_docker(work: Path, env: dict[str, str]):
    """Start a dockerd with nothing in it for the clone (DOCKER_HOST in `env`); returns its stop."""
    import signal

    from rlkit.sandbox.dockerd import ensure_dockerd

    root = work / "docker"
    root.mkdir(exist_ok=True)
    sock, pidfile = root / "d.sock", root / "d.pid"
    # A bridge of its own: with --bridge=none dockerd deletes docker0, the machine's daemon's bridge.
    bridge = f"rlkqs{os.getpid() % 100000}"
    for ip_args in (["link", "add", bridge, "type", "bridge"], ["addr", "add", "172.31.254.1/24", "dev", bridge],
                    ["link", "set", bridge, "up"]):
        subprocess.run(["ip", *ip_args], check=True)
    ensure_dockerd(120, root / "dockerd.log", socket_path=str(sock), extra_args=(
        "--data-root", str(root / "data"), "--exec-root", str(root / "exec"), "--pidfile", str(pidfile),
        f"--bridge={bridge}", "--iptables=false", "--ip6tables=false", "--ip-masq=false"))
    env["DOCKER_HOST"] = f"unix://{sock}"

    def stop() -> None:
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGTERM)
        for _ in range(600):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
        subprocess.run(["umount", "-R", str(root / "exec")], capture_output=True, check=False)
        subprocess.run(["ip", "link", "delete", bridge], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)

    return stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="HEAD", help="the revision to clone (default HEAD)")
    parser.add_argument("--cold", action="store_true", help="empty uv / pip / rlkit caches for the clone")
    parser.add_argument("--empty-docker", action="store_true",
                        help="a docker daemon of the clone's own, with no images (needs root)")
    parser.add_argument("--out", type=Path, default=None, help="where the clone and logs go (default a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the clone (its venvs are several GB)")
    args = parser.parse_args(argv)
    work = (args.out or Path(tempfile.mkdtemp(prefix="rlkit-qs-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    clone = work / "clone"
    if clone.exists():
        shutil.rmtree(clone)
    rev = subprocess.run(["git", "rev-parse", args.rev], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    started = time.monotonic()
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", rev], cwd=clone, check=True)
    clone_s = time.monotonic() - started
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    if args.cold:
        for name in ("UV_CACHE_DIR", "PIP_CACHE_DIR", "RLKIT_CACHE_DIR"):
            env[name] = str(work / "caches" / name.lower())
    daemon = empty_docker(work, env) if args.empty_docker else None
    try:
        code, lines = run_stamped(["bash", "scripts/quickstart.sh"], clone, env, work / "quickstart.log")
    finally:
        if daemon is not None:
            daemon()
    times = phases(lines)
    total = lines[-1][0]
    floor_start = time.monotonic()
    subprocess.run(["bash", "scripts/setup.sh"], cwd=clone, env=env, capture_output=True, check=False)
    floor = time.monotonic() - floor_start
    how = ", ".join([*(["cold caches"] if args.cold else []), *(["an empty docker"] if args.empty_docker else [])])
    rows = [(f"# bash scripts/quickstart.sh from a fresh clone of {rev[:10]}{f' ({how})' if how else ''}:"
             f" exit {code}"), "", "| phase | seconds | share |", "|---|---|---|"]
    rows += [f"| {name} | {sec:.0f} | {sec / total:.0%} |" for name, sec in times.items()]
    rows += [(f"| **total** | **{total:.0f}** ({total / 60:.1f} min) | goal {GOAL_S / 60:.0f} min: "
              f"{'met' if total <= GOAL_S else 'MISSED'} ({total / GOAL_S:.2f}x) |"),
             "", (f"git clone {clone_s:.1f} s; floor (setup.sh re-run, nothing to install) {floor:.1f} s; "
                  f"load average {os.getloadavg()[0]:.1f}; log {work / 'quickstart.log'}")]
    text = "\n".join(rows)
    print(text)
    (work / "quickstart_time.json").write_text(json.dumps(
        {"rev": rev, "cold": args.cold, "empty_docker": args.empty_docker, "exit": code, "phases_s": times,
         "total_s": total, "floor_s": floor, "printed": text}, indent=2))
    if not args.keep:
        shutil.rmtree(clone, ignore_errors=True)
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
