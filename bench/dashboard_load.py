"""Dashboard first load on a big run: 1,000 steps x 60 metrics and 20,000 trials (1,000 steps x 20).

Writes the run into a temp dir (logs/bench.jsonl in verl's file-logger shape, harbor_trials/
bench/bench/step_<N>/summary.json with its sessions and 20 trial folders per step), serves it
with the dashboard (uvicorn on loopback) and times, each the median of --reps:
  api      the requests the page makes on first load, one after another (page, scripts, runs,
           metrics from offset 0, status), and the trajectory tab's (steps, one step's trials)
  browser  headless Debian chromium (playwright) from navigation to all curves drawn, and to
           the steps table shown (when chromium and playwright are installed)
  floor    reading and json-parsing the JSONL file in-process: the least any server must do
Goal: first load <= 1 s. The temp dir is removed.
.venv/bin/python bench/dashboard_load.py [--steps 1000] [--metrics 60] [--trials-per-step 20] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

OUTCOMES = ("passed", "failed_tests", "parse_error", "response_budget")


def write_run(root: Path, steps: int, n_metrics: int, per_step: int) -> None:
    (root / "logs").mkdir(parents=True)
    names = ["critic/rewards/mean", "actor/entropy", "actor/kl_loss", "response_length/mean", "perf/mfu/actor",
             "timing_s/gen", "timing_s/step", "timing_s/update_actor"]
    names += [f"extra/metric_{i}" for i in range(n_metrics - len(names))]
    with open(root / "logs" / "bench.jsonl", "w") as f:
        for step in range(1, steps + 1):
            data = {n: math.sin(step / 50 + i) + 1.5 for i, n in enumerate(names)}
            f.write(json.dumps({"step": step, "data": data}) + "\n")
    trials = root / "harbor_trials" / "bench" / "bench"
    for step in range(1, steps + 1):
        step_dir = trials / f"step_{step}"
        sessions = []
        for i in range(per_step):
            session = f"task-{i % 7}__{step:04d}{i:04d}"
            outcome = OUTCOMES[(step + i) % len(OUTCOMES)]
            reward = 1.0 if outcome == "passed" else 0.0
            (step_dir / session / "verifier").mkdir(parents=True)
            (step_dir / session / "verifier" / "reward.txt").write_text(str(reward))
            sessions.append({"session": session, "task_id": f"task-{i % 7}", "outcome": outcome, "reward": reward,
                             "masked": False, "num_turns": 3, "parse_failures": int(outcome == "parse_error")})
        counts = {o: sum(s["outcome"] == o for s in sessions) for o in OUTCOMES}
        summary = {"step": step, "trials": per_step, "outcomes": counts, "reward_mean": counts["passed"] / per_step,
                   "pass_rate": counts["passed"] / per_step, "masked": 0, "truncated": counts["response_budget"],
                   "dropped_groups": 0, "parse_failures": counts["parse_error"], "num_breaks": 0,
                   "timing_s": {"sandbox": 1.0, "agent": 10.0, "verifier": 1.0, "model": 8.0, "wall": 12.0},
                   "timing_share": {"sandbox": 0.05, "agent": 0.5, "verifier": 0.05, "model": 0.4},
                   "sessions": sessions}
        (step_dir / "summary.json").write_text(json.dumps(summary))


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def serve(root: Path) -> tuple[str, object, threading.Thread]:
    import uvicorn

    from rlkit.monitor.dashboard import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(root), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server, thread


def browser_times(url: str, reps: int, steps: int) -> tuple[float, float] | None:
    chromium = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if chromium is None:
        return None
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync"]
    curves, tab = [], []
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(profile, executable_path=chromium, headless=True, args=flags)
        try:
            for _ in range(reps):
                page = context.new_page()
                t = time.perf_counter()
                page.goto(url + "/", wait_until="commit")
                page.wait_for_function("Number(document.body.dataset.chartsDrawn || 0) >= 5", timeout=60_000)
                curves.append(time.perf_counter() - t)
                t = time.perf_counter()
                page.click("#tab-trials")
                page.wait_for_selector(f"#browser tr.row[data-key='{steps}']", timeout=60_000)
                tab.append(time.perf_counter() - t)
                page.close()
        finally:
            context.close()
    return statistics.median(curves), statistics.median(tab)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--metrics", type=int, default=60)
    parser.add_argument("--trials-per-step", type=int, default=20)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    import httpx

    tmp = Path(tempfile.mkdtemp(prefix="rlkit-bench-dashboard-"))
    server = thread = None
    try:
        t = time.perf_counter()
        write_run(tmp, args.steps, args.metrics, args.trials_per_step)
        print(f"wrote {args.steps} steps x {args.metrics} metrics, {args.steps * args.trials_per_step} trials "
              f"in {time.perf_counter() - t:.1f}s")
        url, server, thread = serve(tmp)
        client = httpx.Client(base_url=url, timeout=60)
        first = ["/", "/static/app.js", "/static/app.css", "/static/vendor/uPlot.iife.min.js",
                 "/static/vendor/uPlot.min.css", "/api/runs", "/api/runs/bench/metrics?offset=0",
                 "/api/runs/bench/status"]
        tab = ["/api/runs/bench/steps", f"/api/runs/bench/steps/{args.steps}/trials"]

        def get_all(paths: list[str]) -> None:
            for path in paths:
                client.get(path).raise_for_status()

        got = client.get("/api/runs/bench/metrics?offset=0").json()
        assert len(got["steps"]) == args.steps and len(got["columns"]) == args.metrics
        cold_tab = median_time(lambda: get_all(tab), 1)  # the step summaries not read yet
        api_first = median_time(lambda: get_all(first), args.reps)
        api_tab = median_time(lambda: get_all(tab), args.reps)
        live = median_time(lambda: client.get(f"/api/runs/bench/metrics?offset={got['offset']}").raise_for_status(),
                           args.reps)
        jsonl = tmp / "logs" / "bench.jsonl"
        floor = median_time(lambda: [json.loads(x) for x in jsonl.read_text().splitlines()], args.reps)
        print(f"floor: read + parse the JSONL in-process   {floor * 1e3:8.1f} ms")
        print(f"api: first load (page, scripts, metrics, status)  {api_first * 1e3:8.1f} ms  "
              f"{api_first / floor:5.1f}x floor  (goal <= 1000 ms)")
        print(f"api: trajectory tab, cold (1,000 summaries read) {cold_tab * 1e3:8.1f} ms")
        print(f"api: trajectory tab, warm (summaries cached)     {api_tab * 1e3:8.1f} ms")
        print(f"api: live refresh with nothing new               {live * 1e3:8.1f} ms")
        browser = browser_times(url, args.reps, args.steps)
        if browser is None:
            print("browser: skipped (no chromium or playwright)")
        else:
            print(f"browser: navigation to the curves drawn          {browser[0] * 1e3:8.1f} ms  "
                  "(goal <= 1000 ms)")
            print(f"browser: trajectory tab to the steps table       {browser[1] * 1e3:8.1f} ms")
    finally:
        if server is not None:
            server.should_exit = True
            thread.join(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
