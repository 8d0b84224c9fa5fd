"""The monitoring dashboard: a FastAPI app over a folder's logs/ and harbor_trials/ (live or finished runs).

    GET /                                   the page (static/index.html, uPlot vendored from npm)
    GET /api/runs                           runs under the folder (logs/<exp>.jsonl or .log), newest first, each
                                            running | finished | dead | unknown, and the one to show by default
    GET /api/runs/{exp}/metrics?offset=B    step records after byte B of the metrics file, as columns,
                                            and the offset to ask from next time (live refresh reads only new bytes);
                                            after a restart marker the whole file again (`replace`: each step's
                                            latest attempt)
    GET /api/runs/{exp}/vllm?offset=B       vLLM throughput lines after byte B
    GET /api/runs/{exp}/status              rlkit status as JSON (the first-step numbers)
    GET /api/runs/{exp}/steps               step_<N>/summary.json of every step (sessions left out)
    GET /api/runs/{exp}/steps/{n}/trials    one row per trial: session, task, outcome, reward
    GET /api/runs/{exp}/steps/{n}/trials/{session}            ATIF steps, test output, exception
    GET /api/runs/{exp}/steps/{n}/trials/{session}/trajectory.json   the raw ATIF file (download)

Access: with no token only loopback clients whose Host is a loopback name are served (a page on
another site cannot rebind to it). With a token (needed to bind beyond loopback, and to put the
dashboard behind a tunnel, whose requests look local) every request carries it: `?token=` once
(it becomes a cookie), `Authorization: Bearer`, or the cookie. Every name in a path is one plain
component resolved inside the folder (`rlkit.monitor.run_files.safe_child`).

What it serves is what `rlkit status` prints, cleaned the same way: every answer is JSON whose
strings (keys included) passed `rlkit.config.display.clean` (secrets this process knows masked,
control characters escaped) and whose numbers are finite (`CleanJSONResponse`); no file is read
from outside the run's folders (a link out of them is not followed, rlkit.monitor.run_files).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from pathlib import Path
from typing import Any

from rlkit.config.display import clean
from rlkit.config.files import inside
from rlkit.config.paths import RunPaths
from rlkit.errors import UserError
from rlkit.monitor import metrics as metrics_mod
from rlkit.monitor import trials as trials_mod
from rlkit.monitor.run import EXP_RE, RunRef, lock_owner_alive, read_lock
from rlkit.monitor.tail import LineTail
from rlkit.monitor.values import count, finite_json
from rlkit.monitor.vllm_log import parse_line as parse_vllm_line

STATIC = Path(__file__).parent / "static"
COOKIE = "rlkit_dashboard_token"
LOG_SUFFIXES = ("_vllm", "_proxy", "_reaper", "_server", "_vllm_server", "_attempts", "_ray")
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}
MAX_READ = 64 << 20  # one metrics request reads at most this much; the client asks again from the new offset


def cleaned(obj: Any, depth: int = 0) -> Any:
    """`obj` with every string, keys included, through display.clean (rlkit status's own cleaning) and every
    number finite: what the dashboard may send."""
    if isinstance(obj, str):
        return clean(obj)
    if depth > 80:
        return None
    if isinstance(obj, dict):
        return {clean(str(k)): cleaned(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [cleaned(v, depth + 1) for v in obj]
    return finite_json(obj)


def clean_json(obj: Any) -> bytes:
    return json.dumps(cleaned(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def host_name(header: str) -> str:
    """The name in a Host header, without the port ("[::1]:8090" -> "[::1]")."""
    if header.startswith("["):
        return header[: header.find("]") + 1]
    return header.split(":", 1)[0]


class RunFolder:
    """The folder a dashboard serves: <root>/logs and <root>/harbor_trials/<project>/<exp>."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def runs(self) -> list[dict[str, Any]]:
        logs = self.root / "logs"
        names: dict[str, float] = {}
        try:
            entries = list(logs.iterdir())
        except (OSError, ValueError):
            entries = []
        for path in entries:
            if path.suffix in {".jsonl", ".log"} and not path.stem.endswith(LOG_SUFFIXES) and EXP_RE.match(path.stem):
                try:
                    names[path.stem] = max(names.get(path.stem, 0.0), path.lstat().st_mtime)
                except OSError:
                    continue
        out = []
        for exp, mtime in sorted(names.items(), key=lambda kv: -kv[1]):
            try:
                paths = self.paths(exp)
            except trials_mod.PathRefused:
                continue  # a log named like nothing a request could name
            try:
                state = run_state(paths)
            except (UserError, OSError, ValueError):  # one run's unreadable files never hide the others
                state = {"state": "unknown", "step": None, "total_steps": None}
            out.append({"exp": exp, "project": paths.project, "modified": mtime, **state,
                        "running": state["state"] == "running"})
        return out

    def default_run(self, runs: list[dict[str, Any]]) -> str | None:
        """The most recent run that is running or finished; else the most recent one not dead; else the newest."""
        for wanted in (("running", "finished"), ("unknown",)):
            found = next((r["exp"] for r in runs if r["state"] in wanted), None)
            if found:
                return found
        return runs[0]["exp"] if runs else None

    def paths(self, exp: str) -> RunPaths:
        trials_mod.safe_child(self.root / "logs", exp)  # one plain name
        lock = read_lock(self.root / "logs" / f"{exp}.lock") or {}
        project = lock.get("project")
        if not isinstance(project, str) or not trials_mod.NAME_RE.match(project):
            found = sorted((self.root / "harbor_trials").glob(f"*/{exp}"))
            project = found[0].parent.name if found else "default"
        paths = RunPaths(self.root, project, exp)
        if not inside(paths.trials, self.root) and trials_mod.files.present(paths.trials):
            raise trials_mod.PathRefused(f"the trials of {exp!r} lead out of {self.root} (a link)",
                                         fix="serve the folder the run wrote, not links into other folders")
        return paths


def run_state(paths: RunPaths) -> dict[str, Any]:
    """running (its lock's trainer lives) | dead (a lock whose trainer is gone, or stopped before its last step)
    | finished | unknown (no lock, and no step count to compare with); step k of N, from the latest attempt."""
    lock = read_lock(paths.lock)
    end = metrics_mod.tail(paths, n=1)
    step = end.records[-1][0] if end.records else None
    total = end.attempt.total_steps if end.attempt else None
    if total is None:
        total = count((lock or {}).get("total_steps")) or None
    if lock is not None:
        state = "running" if lock_owner_alive(lock) else "dead"
    elif total is None:
        state = "unknown"
    else:
        state = "finished" if step is not None and step >= total else "dead"
    return {"state": state, "step": step, "total_steps": total}


def _columns(records: list[tuple[int, dict[str, float]]]) -> dict[str, Any]:
    names = sorted({k for _, data in records for k in data})
    return {"steps": [s for s, _ in records], "columns": {n: [data.get(n) for _, data in records] for n in names}}


def metrics_after(paths: RunPaths, offset: int) -> dict[str, Any]:
    """Step records appended after byte `offset`, as columns: {steps, columns: {name: [value|null]}}. A restart
    marker among them voids steps the client already has, and a validation-only line adds to a step it may have:
    then the whole file's steps come, with `replace`."""
    path = metrics_mod.metrics_file(paths)
    if path is None:
        return {"offset": 0, "source": None, "steps": [], "columns": {}, "replace": offset > 0}
    parse = metrics_mod.parse_jsonl_line if path.suffix == ".jsonl" else metrics_mod.parse_console_line
    tail = LineTail(path, offset)
    lines = tail.poll(MAX_READ)
    # a restart voids steps the client has; a validation-only line adds to a step it may have (verl's at a resume)
    restarted = any(metrics_mod.parse_attempt(line) or metrics_mod.validation_only((parse(line) or (0, {}))[1])
                    for line in lines)
    if restarted and offset > 0:
        reader = metrics_mod.MetricsReader(paths)  # the whole file, each step's latest attempt
        reader.poll()
        return {"offset": reader.offset, "source": path.name, "replace": True,
                **_columns(list(reader.metrics.steps.items()))}
    steps = metrics_mod.StepMetrics()
    for line in lines:
        attempt = metrics_mod.parse_attempt(line)
        if attempt is not None:
            steps.restart(attempt)
        elif (record := parse(line)) is not None:
            steps.add(*record)
    return {"offset": tail.offset, "source": path.name, "replace": False, **_columns(list(steps.steps.items()))}


def vllm_after(paths: RunPaths, offset: int) -> dict[str, Any]:
    tail = LineTail(paths.vllm_log, offset)
    rows = [t.as_dict() for t in map(parse_vllm_line, tail.poll(MAX_READ)) if t is not None]
    return {"offset": tail.offset, "rows": rows}


class SummaryCache:
    """step_<N>/summary.json without its sessions, re-read only when the file changed (a finished step never does)."""

    def __init__(self) -> None:
        self._seen: dict[Path, tuple[tuple[int, int], dict[str, Any]]] = {}

    def get(self, trials: Path, step: int) -> dict[str, Any]:
        path = trials / f"step_{step}" / "summary.json"
        try:
            st = path.stat()
        except OSError:
            return {}
        key = (st.st_mtime_ns, st.st_size)
        hit = self._seen.get(path)
        if hit is None or hit[0] != key:
            summary = trials_mod.read_summary(trials, step) or {}
            counts = trials_mod.step_counts(summary)  # from the sessions, before they are left out
            summary.pop("sessions", None)
            hit = self._seen[path] = (key, {**summary, **counts})
        return hit[1]


def steps_overview(paths: RunPaths, cache: SummaryCache | None = None) -> list[dict[str, Any]]:
    cache = cache or SummaryCache()
    return [{"step": step, **cache.get(paths.trials, step)} for step in trials_mod.step_numbers(paths.trials)]


def create_app(root: Path, *, token: str | None = None) -> Any:
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
    from fastapi.staticfiles import StaticFiles

    class CleanJSONResponse(JSONResponse):
        def render(self, content: Any) -> bytes:
            return clean_json(content)

    folder = RunFolder(root)
    summaries = SummaryCache()
    app = FastAPI(title="rlkit dashboard", docs_url=None, redoc_url=None, openapi_url=None,
                  default_response_class=CleanJSONResponse)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        if token:
            given = (request.query_params.get("token") or request.cookies.get(COOKIE)
                     or request.headers.get("authorization", "").removeprefix("Bearer ").strip())
            if not given or not hmac.compare_digest(given.encode(), token.encode()):
                return JSONResponse({"error": "a token is required (?token=...)"}, status_code=401)
            if request.query_params.get("token") and request.method == "GET" and request.url.path == "/":
                response = RedirectResponse("/", status_code=303)  # drop the token from the address bar
                response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
                return response
            return await call_next(request)
        client = request.client.host if request.client else None
        if not is_loopback(client) or host_name(request.headers.get("host", "")) not in LOCAL_HOSTS:
            return JSONResponse({"error": "this dashboard serves localhost only; start it with a token to expose it"},
                                status_code=403)
        return await call_next(request)

    def run_paths(exp: str) -> RunPaths:
        try:
            return folder.paths(exp)
        except trials_mod.PathRefused as exc:
            raise HTTPException(400, str(exc)) from None

    @app.exception_handler(trials_mod.PathRefused)
    async def refused(request: Request, exc: trials_mod.PathRefused) -> Any:
        return CleanJSONResponse({"error": str(exc)}, status_code=404)

    @app.get("/")
    def index() -> Any:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/api/runs")
    def runs() -> Any:
        found = folder.runs()
        return {"root": str(folder.root), "runs": found, "default": folder.default_run(found)}

    @app.get("/api/runs/{exp}/metrics")
    def metrics(exp: str, offset: int = 0) -> Any:
        return metrics_after(run_paths(exp), max(offset, 0))

    @app.get("/api/runs/{exp}/vllm")
    def vllm(exp: str, offset: int = 0) -> Any:
        return vllm_after(run_paths(exp), max(offset, 0))

    @app.get("/api/runs/{exp}/status")
    def status(exp: str) -> Any:
        from rlkit.monitor.run import locate
        from rlkit.monitor.status import collect

        paths = run_paths(exp)
        try:
            ref = locate(exp, folder.root)
        except UserError:  # no lock or config: the files alone
            ref = RunRef(paths)
        return collect(ref).as_dict()

    @app.get("/api/runs/{exp}/steps")
    def steps(exp: str) -> Any:
        return {"steps": steps_overview(run_paths(exp), summaries)}

    @app.get("/api/runs/{exp}/steps/{step}/trials")
    def trials(exp: str, step: int) -> Any:
        return {"step": step, "trials": trials_mod.list_trials(run_paths(exp).trials, step)}

    @app.get("/api/runs/{exp}/steps/{step}/trials/{session}")
    def trial(exp: str, step: int, session: str) -> Any:
        return trials_mod.trial_detail(run_paths(exp).trials, step, session)

    @app.get("/api/runs/{exp}/steps/{step}/trials/{session}/trajectory.json")
    def trajectory(exp: str, step: int, session: str) -> Any:
        trials_root = run_paths(exp).trials
        data = trials_mod.read_json(trials_mod.trajectory_file(trials_root, step, session), trials_root)
        if data is None:
            raise trials_mod.PathRefused(f"trial {session!r} of step {step} has no readable agent/trajectory.json",
                                         fix="pick another trial")
        name = f"{exp}_step{step}_{session}.json"  # plain names only (safe_child checked them)
        return CleanJSONResponse(data, headers={"Content-Disposition": f'attachment; filename="{name}"'})

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def serve(root: Path, *, host: str = "127.0.0.1", port: int = 8090, token: str | None = None) -> None:
    import uvicorn

    uvicorn.run(create_app(root, token=token), host=host, port=port, log_level="warning")
