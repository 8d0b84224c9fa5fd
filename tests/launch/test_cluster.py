"""Executing the launch plan: rank 0 by address, DRY_RUN honesty, a real two-node Ray on loopback."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlkit.config.resolve import resolve
from rlkit.errors import LaunchError, UserError
from rlkit.launch import cluster, ray_node
from rlkit.launch.nodes import is_rank0, resolve_host, this_node_address
from rlkit.launch.plan import build_plan

REPO = Path(__file__).resolve().parents[2]


def test_rank0_is_the_node_that_owns_the_head_address() -> None:
    assert is_rank0("", addresses=set())
    assert is_rank0("10.1.2.3", addresses={"127.0.0.1", "10.1.2.3"})
    assert not is_rank0("10.1.2.3", addresses={"127.0.0.1", "10.9.9.9"})
    assert is_rank0("10.1.2.3", node_ip="10.1.2.3", addresses=set())
    assert not is_rank0("127.0.0.2", node_ip="127.0.0.3")
    assert is_rank0("127.0.0.2", node_ip="127.0.0.2")


def test_a_head_hostname_is_resolved_and_compared_as_an_address() -> None:
    assert resolve_host("localhost") == "127.0.0.1"
    assert is_rank0("localhost", addresses={"127.0.0.1"})
    assert is_rank0("localhost", node_ip="127.0.0.1")
    with pytest.raises(UserError, match="does not resolve"):
        resolve_host("no-such-head.invalid")


def test_this_node_address_prefers_node_ip() -> None:
    assert this_node_address("127.0.0.2", "127.0.0.3") == "127.0.0.3"
    assert this_node_address("", "") == "127.0.0.1"


def test_plan_prints_the_resolved_head_and_no_worker_line_for_one_node(ws) -> None:
    ws.write_site(RAY_HEAD_ADDRESS="localhost")
    plan = build_plan(resolve(ws.config(), ws.environ()))
    assert plan.node_is_head and plan.head_address == "127.0.0.1"
    assert "--node-ip-address=127.0.0.1" in plan.ray_head.argv
    assert "# Ray workers" not in plan.render()
    two = build_plan(resolve(ws.config(NNODES=2, N_NODES_TRAIN=2), ws.environ()))
    assert "# Ray workers (the 1 other node(s))" in two.render()


def test_every_command_executed_is_the_plan_dry_run_prints(ws, monkeypatch) -> None:
    """The executor runs the plan object's own argv lists; DRY_RUN renders the same object."""
    plan = build_plan(resolve(ws.config(), ws.environ()))
    ran: list[list[str]] = []

    class Done:
        returncode = 0
        stdout = stderr = ""

    class Proc:
        def __init__(self, argv: list[str], **_: object) -> None:
            ran.append(argv)
            self.stdout = iter(["LLMServerManager: ['127.0.0.1:1']\n",
                                "(vLLMHttpServer pid=9, ip=10.0.0.2) Avg prompt throughput: 10.0 tokens/s\n",
                                "step:1 - x:1\n"])

        def poll(self) -> int:
            return 0

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(cluster.subprocess, "run", lambda argv, **kw: ran.append(argv) or Done())
    monkeypatch.setattr(cluster.subprocess, "Popen", Proc)
    monkeypatch.setattr(ray_node, "ray_nodes", lambda address, env=None: [{"address": "127.0.0.1", "gpus": 2}])
    logs = ws.root / "out" / "logs"
    rc = cluster.execute(plan, log=logs / "exp.log", vllm_log=logs / "exp_vllm.log", gpus_per_node=2,
                         waits=cluster.Waits(poll_s=0.01), say=lambda _: None)
    assert rc == 0
    assert ran == [c.argv for c in plan.commands_for_this_node()]
    rendered = plan.render()
    assert all(c.render() in rendered for c in plan.commands_for_this_node())
    assert (logs / "exp.log").read_text().splitlines()[-1] == "step:1 - x:1"
    assert (logs / "exp_vllm.log").read_text() == (  # vLLM stats from any node, as Ray forwards them
        "(vLLMHttpServer pid=9, ip=10.0.0.2) Avg prompt throughput: 10.0 tokens/s\n")
    for path, text in plan.files.items():
        assert path.read_text() == text


@pytest.mark.parametrize("failures, runs, stops, raises", [
    (["The current node timed out during startup."] * 2, 3, 2, False),  # Ray's 30 s ran out twice, then up
    (["The current node timed out during startup."] * 3, 3, 2, True),  # every attempt: the last error is raised
    (["ValueError: port 6379 is already in use"], 1, 0, True),  # any other failure: no retry
])
def test_the_head_start_retries_rays_startup_timeout_only_with_a_fake_ray_start(ws, monkeypatch, failures, runs, stops,
                                                                                raises) -> None:
    """`ray start --head` stood in by a fake subprocess.run that fails with the given errors first."""
    plan = build_plan(resolve(ws.config(), ws.environ()))
    ran, stopped = [], []

    class Done:
        def __init__(self, error: str) -> None:
            self.returncode, self.stdout, self.stderr = (1 if error else 0), "", error

    def fake_run(argv, **_):
        ran.append(argv)
        return Done(failures[len(ran) - 1] if len(ran) <= len(failures) else "")

    monkeypatch.setattr(cluster.subprocess, "run", fake_run)
    monkeypatch.setattr(ray_node, "stop_ray", lambda plan, node_address=None, grace_s=10.0: stopped.append(plan))
    if raises:
        with pytest.raises(LaunchError, match="ray start --head"):
            ray_node.start_head(plan, say=lambda _: None)
    else:
        ray_node.start_head(plan, say=lambda _: None)
    assert ran == [plan.ray_head.argv] * runs and len(stopped) == stops


def test_missing_nodes_are_named_after_the_wait(monkeypatch) -> None:
    monkeypatch.setattr(ray_node, "ray_nodes", lambda address, env=None: [{"address": "10.0.0.1", "gpus": 8},
                                                               {"address": "10.0.0.2", "gpus": 4}])
    with pytest.raises(LaunchError) as err:
        ray_node.wait_for_nodes("10.0.0.1:6379", 3, 8, ray_node.Waits(nodes_s=0.0), say=lambda _: None)
    assert "1 node(s) never joined" in err.value.message and "10.0.0.2 registered 4 of 8 GPUs" in err.value.message


FAKE_RAY_START = """
import sys
from pathlib import Path
log = Path(sys.argv[1])
runs = log.read_text().splitlines() if log.exists() else []
outcome = sys.argv[2].split(",")[len(runs)]
log.write_text("\\n".join([*runs, outcome]) + "\\n")
print("Local node IP: 127.0.0.3", flush=True)
if outcome == "up":
    print("Ray runtime started.", flush=True)
sys.exit(1)  # Ray's --block loop ends with 1 when its raylet dies, and a failed start with 1 too
"""


@pytest.mark.parametrize("head, outcomes, runs, rc, said", [
    # the head answers only after 3 probes: nothing is started before it
    ([False, False, False, True, False], "up", 1, 0, "went away; this worker is done"),
    # the head restarted under this node's start (Ray's startup timeout): joined on the 3rd start
    ([True, True, True, False], "failed,failed,up", 3, 0, "went away; this worker is done"),
    # up, then the worker's node ended while the head is still up: an error, no new start
    ([True, True], "up", 1, 1, "while the head at 127.0.0.1 is still up"),
])
def test_a_worker_joins_only_a_head_that_answers_and_again_when_its_start_failed_with_a_fake_ray_start(
        ws, tmp_path, monkeypatch, head, outcomes, runs, rc, said) -> None:
    """`ray start --block` stood in by a real child that prints what Ray prints and exits; the head's
    port stood in by a scripted `head_reachable` (its last answer repeats)."""
    plan = build_plan(resolve(ws.config(NNODES=2), ws.environ(NODE_IP="127.0.0.3")))
    log = tmp_path / "starts.log"
    plan.ray_worker = dataclasses.replace(plan.ray_worker, argv=[sys.executable, "-c", FAKE_RAY_START, str(log),
                                                                 outcomes])
    answers = iter(head)
    last = [head[-1]]
    monkeypatch.setattr(ray_node, "head_reachable", lambda host, port: last.__setitem__(0, next(answers, last[0]))
                        or last[0])
    stopped: list[str | None] = []
    monkeypatch.setattr(ray_node, "stop_ray", lambda plan, node_address=None, grace_s=10.0: stopped.append(node_address))
    lines: list[str] = []
    assert ray_node.join_as_worker(plan, ray_node.Waits(nodes_s=30, poll_s=0.01), say=lines.append) == rc
    assert log.read_text().split() == outcomes.split(",")[:runs]
    assert said in "\n".join(lines)
    assert stopped == ["127.0.0.3"] * (runs - 1 + (rc == 0))  # what each failed start left, and the end


def test_a_worker_whose_head_never_answers_says_so_within_node_wait_s(ws, tmp_path, monkeypatch) -> None:
    plan = build_plan(resolve(ws.config(NNODES=2), ws.environ(NODE_IP="127.0.0.3")))
    plan.ray_worker = dataclasses.replace(plan.ray_worker, argv=["false"])
    monkeypatch.setattr(ray_node, "head_reachable", lambda host, port: False)
    lines: list[str] = []
    started = time.monotonic()
    assert ray_node.join_as_worker(plan, ray_node.Waits(nodes_s=0.3, poll_s=0.05), say=lines.append) == 1
    assert time.monotonic() - started < 5
    assert "did not answer within NODE_WAIT_S" in lines[-1] and "127.0.0.1:" in lines[-1]


def test_a_worker_start_that_keeps_failing_gives_up_at_node_wait_s(ws, tmp_path, monkeypatch) -> None:
    plan = build_plan(resolve(ws.config(NNODES=2), ws.environ(NODE_IP="127.0.0.3")))
    plan.ray_worker = dataclasses.replace(plan.ray_worker, argv=["false"])
    monkeypatch.setattr(ray_node, "head_reachable", lambda host, port: True)
    monkeypatch.setattr(ray_node, "stop_ray", lambda plan, node_address=None, grace_s=10.0: None)
    lines: list[str] = []
    assert ray_node.join_as_worker(plan, ray_node.Waits(nodes_s=0.5, poll_s=0.05), say=lines.append) == 1
    assert "failed (1)" in lines[-1] and "within NODE_WAIT_S" in lines[-1]


def _node(ws, cfg: Path, node_ip: str, ray_tmp: Path) -> subprocess.Popen:
    env = {**os.environ, **ws.environ(NODE_IP=node_ip), "RAY_TMPDIR": str(ray_tmp),
           "RAY_gcs_rpc_server_reconnect_timeout_s": "5", "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(Path(__file__).with_name("_node.py")), str(cfg)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)


@pytest.mark.slow
def test_two_nodes_on_loopback_one_config(ws, tmp_path_factory) -> None:
    """The same config on two 'nodes' (127.0.0.2 and 127.0.0.3): one is rank 0 and runs the
    trainer on a two-node Ray cluster; the other joins, and exits cleanly once the head is gone."""
    ray_tmp = Path(f"/tmp/rlkit-ray-{os.getpid()}")  # Ray's socket paths must stay short
    ws.write_site(RAY_HEAD_ADDRESS="127.0.0.2", GPUS_PER_NODE=1, NODE_WAIT_S=240)
    cfg = ws.config(NNODES=2, N_NODES_TRAIN=2)
    worker = head = None
    try:
        worker = _node(ws, cfg, "127.0.0.3", ray_tmp)
        time.sleep(1)
        head = _node(ws, cfg, "127.0.0.2", ray_tmp)
        head_out, _ = head.communicate(timeout=420)
        if head.returncode != 0:  # say why the other node did not join, too
            worker.kill()
            worker_out, _ = worker.communicate(timeout=60)
            pytest.fail(f"head:\n{head_out[-3000:]}\nworker:\n{worker_out[-3000:]}")
        assert "this node is rank 0, the Ray head" in head_out
        assert 'CLUSTER ["127.0.0.2", "127.0.0.3"]' in head_out
        worker_out, _ = worker.communicate(timeout=180)
        assert "this node is a Ray worker" in worker_out
        assert worker.returncode == 0, worker_out[-4000:]
        assert "went away; this worker is done" in worker_out
        assert 'CLUSTER ["127.0.0.2", "127.0.0.3"]' in (ws.root / "out" / "logs" / "exp.log").read_text()
    finally:
        for proc in (head, worker):
            if proc is not None and proc.poll() is None:
                proc.kill()
        plan = build_plan(resolve(cfg, ws.environ(NODE_IP="127.0.0.2")))
        ray_node.stop_ray(plan)  # anything of this run's Ray still up (only its GCS address)
        subprocess.run(["rm", "-rf", str(ray_tmp)], check=False)


@pytest.mark.slow
def test_dry_run_trainer_line_composes_in_verl_and_names_a_loadable_agent_loop(ws) -> None:
    """The trainer line DRY_RUN prints, fed to `main_ppo --cfg job`; the agent-loop YAML it names
    is loaded as verl's AgentLoopWorker loads it, and registers the index rows' agent_name."""
    import shlex

    from omegaconf import OmegaConf

    from rlkit.registry import import_string
    from rlkit.tasks.schema import AGENT_LOOP_NAME

    cfg = ws.config()
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "DRY_RUN": "1", **ws.environ()}
    proc = subprocess.run(["bash", "scripts/train/train.sh", str(cfg)], capture_output=True, text=True, cwd=REPO,
                          env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    argv = shlex.split(proc.stdout.split("# Trainer (rank 0)\n", 1)[1].replace("\\\n", " "))
    start = argv.index("-m") - 1
    verl = subprocess.run([*argv[start:], "--cfg", "job", "--resolve"], capture_output=True, text=True,
                          check=False)
    assert verl.returncode == 0, verl.stderr[-2000:]
    job = OmegaConf.create(verl.stdout)
    agent = job.actor_rollout_ref.rollout.agent
    assert agent.default_agent_loop == AGENT_LOOP_NAME
    entries = OmegaConf.load(agent.agent_loop_config_path)  # as AgentLoopWorker.__init__ does
    (entry,) = [e for e in entries if e.name == AGENT_LOOP_NAME]
    loop_cls = import_string(entry._target_.replace(".RlkitAgentLoop", ":RlkitAgentLoop"))
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase

    assert issubclass(loop_cls, AgentLoopBase)
    from rlkit.rollout.engine import EngineConfig

    settings = OmegaConf.to_container(entry.rlkit)
    EngineConfig(**settings["engine"], model_name="m", proxy_url="http://127.0.0.1:1")
    assert settings["proxy"]["host"] == "127.0.0.1"  # docker sandboxes: loopback, never 0.0.0.0


def test_the_trainer_log_never_holds_a_secret(ws, monkeypatch, capsys) -> None:
    """verl prints its config and wandb its settings; the tee masks secrets by value."""
    secret = "wandb-secret-0123456789abcdef"
    plan = build_plan(resolve(ws.config(LOGGER="console,wandb"), {**ws.environ(), "WANDB_API_KEY": secret}))
    assert secret in plan.secrets

    class Proc:
        def __init__(self, argv: list[str], **_: object) -> None:
            self.stdout = iter([f"wandb: api_key={secret}\n", "step:1 - x:1\n"])

        def poll(self) -> int:
            return 0

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(cluster.subprocess, "Popen", Proc)
    log = ws.root / "out" / "logs" / "exp.log"
    assert cluster.run_trainer(plan, log, log.with_name("exp_vllm.log"), cluster.Waits(poll_s=0.01),
                               say=lambda _: None) == 0
    assert secret not in log.read_text() and "api_key=****" in log.read_text()
    assert secret not in capsys.readouterr().out


def test_rank_0_holds_the_run_lock_while_it_runs_and_a_second_launch_refuses(ws, monkeypatch) -> None:
    from rlkit.config import owner
    from rlkit.launch.lock import RunLock

    monkeypatch.setattr(owner, "claim_ownership", lambda *_a: None)  # keeps pytest's own environment as it is
    plan = build_plan(resolve(ws.config(), ws.environ()))
    logs = ws.root / "out" / "logs"
    lock_path = logs / "exp.lock"
    seen: list[dict] = []

    class Done:
        returncode = 0
        stdout = stderr = ""

    class Proc:
        def __init__(self, argv: list[str], **_: object) -> None:
            seen.append(json.loads(lock_path.read_text()))  # the trainer starts under the lock
            self.stdout = iter(["step:1 - x:1\n"])

        def poll(self) -> int:
            return 0

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(cluster.subprocess, "run", lambda argv, **kw: Done())
    monkeypatch.setattr(cluster.subprocess, "Popen", Proc)
    monkeypatch.setattr(ray_node, "ray_nodes", lambda address, env=None: [{"address": "127.0.0.1", "gpus": 2}])

    def launch() -> int:
        return cluster.execute(plan, log=logs / "exp.log", vllm_log=logs / "exp_vllm.log", gpus_per_node=2,
                               waits=cluster.Waits(poll_s=0.01), say=lambda _: None,
                               lock=RunLock(lock_path, project="p", exp="exp", config="cfg.env"))

    assert launch() == 0
    assert seen and seen[0]["pid"] == os.getpid() and seen[0]["phase"] == "training"
    assert not lock_path.exists()  # released with Ray stopped

    other = {**seen[0], "pid": os.getppid()}  # another launcher of the experiment, alive on this host
    lock_path.write_text(json.dumps(other))
    with pytest.raises(UserError, match="already running"):
        launch()
    assert len(seen) == 1  # nothing was started
    assert json.loads(lock_path.read_text())["pid"] == os.getppid()  # its lock is left alone


def test_verl_file_log_lines_are_appended_across_launches(tmp_path) -> None:
    """verl's file logger truncates its file at every launch; logs/<exp>.jsonl keeps every launch's lines."""
    source, sink = tmp_path / "exp_verl.jsonl", tmp_path / "exp.jsonl"

    class Done:
        def poll(self) -> int:
            return 0

    source.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "da')  # a half-written last line waits
    cluster.follow_jsonl(source, sink, Done(), poll_s=0)
    source.write_text('{"step": 3}\n')  # the resumed launch starts the file over
    cluster.follow_jsonl(source, sink, Done(), poll_s=0)
    assert [json.loads(line)["step"] for line in sink.read_text().splitlines()] == [1, 2, 3]


def test_ray_stops_in_rays_own_order_raylet_first_gcs_last() -> None:
    """Stopped all at once, the autoscaler's monitor outlived SIGTERM for 10+ s (the GCS was gone)."""
    from types import SimpleNamespace

    from rlkit.launch.ray_node import ray_stop_order

    def proc(*argv: str) -> SimpleNamespace:
        return SimpleNamespace(info={"cmdline": list(argv)})

    gcs = proc("/v/ray/core/src/ray/gcs/gcs_server", "--gcs_server_port=6379")
    raylet = proc("/v/ray/core/src/ray/raylet/raylet", "--gcs-address=127.0.0.2:6379")
    monitor = proc("python", "-u", "/v/ray/autoscaler/_private/monitor.py", "--gcs-address=127.0.0.2:6379")
    dashboard = proc("python", "/v/ray/dashboard/dashboard.py", "--gcs-address=127.0.0.2:6379")
    assert ray_stop_order([gcs, monitor, raylet, dashboard]) == [[raylet], [monitor, dashboard], [gcs]]
    assert ray_stop_order([monitor]) == [[monitor]]


RAY_STREAM = [
    "\x1b[36m(TaskRunnerV1 pid=4242)\x1b[0m step:1 - critic/score/mean:np.float64(0.5) - timing_s/step:12.5",
    "\x1b[36m(TaskRunnerV1 pid=4242, ip=10.0.0.7)\x1b[0m step:2 - critic/score/mean:0.75",
    "\x1b[33m(raylet)\x1b[0m [2026-12-05 17:00:01,000 W 99 99] memory_monitor.cc: low memory",
    "2026-12-05 17:00:00,123\tINFO worker.py:1942 -- Connecting to existing Ray cluster at address: 127.0.0.2:6379",
    "\x1b[36m(WorkerDict pid=77)\x1b[0m rlkit weight sync (vllm_http, step 1): 12 tensors",
    "(autoscaler +2s) Tip: use `ray status` to view detailed cluster status.",
    "\x1b[36m(HttpVllmServer pid=55)\x1b[0m INFO 12-05 17:00:02 Avg generation throughput: 120.0 tokens/s",
]


def test_the_trainer_log_has_plain_step_lines_and_rays_chatter_apart(ws) -> None:
    """logs/<exp>.log: no escapes, no `(TaskRunnerV1 pid=..)`, so `grep '^step:'` finds every step, as in the
    local trainer's log; Ray's own lines go to logs/<exp>_ray.log. A real child process prints Ray's stream."""
    import sys

    from rlkit.launch.plan import Command
    from rlkit.monitor.metrics import parse_console_line

    plan = build_plan(resolve(ws.config(), ws.environ()))
    code = "import sys, json; sys.stdout.write(''.join(l + '\\n' for l in json.loads(sys.argv[1])))"
    plan.trainer = Command("verl trainer", [sys.executable, "-c", code, json.dumps(RAY_STREAM)])
    log = ws.root / "out" / "logs" / "exp.log"
    assert cluster.run_trainer(plan, log, log.with_name("exp_vllm.log"), cluster.Waits(poll_s=0.01),
                               say=lambda _: None) == 0
    lines = log.read_text().splitlines()
    assert [line for line in lines if line.startswith("step:")] == [
        "step:1 - critic/score/mean:np.float64(0.5) - timing_s/step:12.5", "step:2 - critic/score/mean:0.75"]
    assert "\x1b" not in log.read_text() and "pid=" not in log.read_text()
    assert "rlkit weight sync (vllm_http, step 1): 12 tensors" in lines
    assert parse_console_line(lines[0]) == (1, {"critic/score/mean": 0.5, "timing_s/step": 12.5})
    ray = log.with_name("exp_ray.log").read_text()
    assert "memory_monitor.cc" in ray and "Connecting to existing Ray cluster" in ray and "ray status" in ray
    assert "memory_monitor" not in log.read_text() and "Connecting" not in log.read_text()
    assert log.with_name("exp_vllm.log").read_text() == (  # Ray's prefix kept: which replica, on which node
        "(HttpVllmServer pid=55) INFO 12-05 17:00:02 Avg generation throughput: 120.0 tokens/s\n")
