"""Added latency of the token-recording proxy, per call, at concurrency 1, 64 and 256.

    .venv/bin/python bench/proxy_latency.py [--peers litellm,rllm-gateway] [--scale 1.0]
        [--generation-ms 1000] [--only in-flight|ceiling] [--in-process] [--keep-cpus-awake]
        [--levels 1,64,256]

The peers run from their own venv (they pin fastapi apart from harbor's), installed by one command:
    python3.12 -m venv .venv-bench && .venv-bench/bin/pip install '.[bench]'
(`bench` extra: litellm[proxy], rllm-model-gateway). A requested peer that cannot start fails the run.

Everything runs on loopback against a stand-in upstream (a raw asyncio server that answers
/v1/completions and /v1/chat/completions with fixed token ids after a fixed delay, with no
compute), so the only cost that differs between the targets is the proxy's own. Each level
measures, in the same run:
  direct   client -> upstream's chat endpoint (the floor: an agent pointed at the server)
  relay    client -> a byte relay process -> upstream: what one more process and loopback
           hop cost on this machine, the floor under any proxy's added latency
  proxy    client -> rlkit proxy -> upstream, agent-like sessions: every worker holds a
           session whose conversation grows by a tool turn per call (8 turns, then a new
           session), so both first-turn renders and incremental continuations are timed;
           every completion is a tool call, so the proxy's tool-call parsing is timed too
  litellm  client -> litellm proxy server -> upstream chat endpoint (--peers litellm)
  rllm-gateway
           client -> rllm-model-gateway (/sessions/<sid>/v1, in-memory trace store) -> upstream
           chat endpoint (--peers rllm-gateway)
  proxy-inproc, proxy-inproc-busy (with --in-process)
           the proxy as a trainer hosts it (BackgroundProxy, a thread of its process), with
           the main thread idle, and busy with pure-Python work that holds the GIL
and prints p50/p99 latency, the added p50/p99 over the floor, that added latency as a
multiple of the byte relay's (x relay), and throughput.

Two tables, one load model each:
  in-flight  concurrency = sessions in flight, as in a rollout step: each call's generation
             takes --generation-ms, and sessions start spread over one generation (agents
             do not call in lockstep). This is the table the goal is judged on, as a ratio
             to the relay measured in the same run (the absolute ~1 ms a hop costs depends on
             the machine's idle driver): the proxy's added p50 <= 2x the relay's added p50,
             and its added p99 <= 5x the relay's added p50.
  ceiling    an instant upstream and no think time: a closed loop that measures the most
             calls per second one proxy process serves. Added latency there is queueing
             behind the saturated proxy, not a cost any call pays at rollout rates.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from rlkit.launch.plan import free_port

REPO = Path(__file__).resolve().parents[1]
# Every stand-in completion is a tool call in the tiny model's (qwen3_coder) format, as agent turns are.
COMPLETION_CONTENT = "I will run the tests now.\n"
COMPLETION_COMMAND = "pytest -x tests/test_util.py"
COMPLETION_TEXT = (COMPLETION_CONTENT + "<tool_call>\n<function=bash>\n<parameter=command>\n" + COMPLETION_COMMAND
                   + "\n</parameter>\n</function>\n</tool_call>")
ALL_CPUS = sorted(os.sched_getaffinity(0))  # before pin_cpus narrows this process to CPU 0
CEILING_LEVELS = ((1, 300), (64, 1500), (256, 2000))  # (concurrency, requests)
IN_FLIGHT_LEVELS = ((1, 20), (64, 512), (256, 1536))  # 20, 8 and 6 calls a session


# --- the stand-in upstream --------------------------------------------------------------------------

def _fake_upstream_main(port: int, ids: list[int], delay_s: float = 0.0) -> None:
    import json

    # The text vLLM sends with the ids (the proxy asks for special tokens kept).
    completion = json.dumps({"choices": [{"index": 0, "text": COMPLETION_TEXT, "token_ids": ids, "finish_reason": "stop",
                                          "logprobs": {"token_logprobs": [-0.25] * len(ids)}}]}).encode()
    chat = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "tiny",
                       "choices": [{"index": 0, "finish_reason": "tool_calls",
                                    "message": {"role": "assistant", "content": COMPLETION_CONTENT, "tool_calls": [
                                        {"id": "call_1", "type": "function", "function": {
                                            "name": "bash", "arguments": json.dumps({"command": COMPLETION_COMMAND})}}
                                    ]}}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": len(ids), "total_tokens": 10 + len(ids)}}
                      ).encode()
    models = json.dumps({"object": "list", "data": [{"id": "tiny", "max_model_len": 32768}]}).encode()
    # The proxy streams from vLLM (to notice a stuck engine): one SSE chunk per token, as vLLM sends.
    pieces = [COMPLETION_TEXT] + [""] * (len(ids) - 1)
    events = [json.dumps({"choices": [{"index": 0, "text": piece, "token_ids": [token],
                                       "logprobs": {"token_logprobs": [-0.25]},
                                       "finish_reason": "stop" if i == len(ids) - 1 else None}]}).encode()
              for i, (token, piece) in enumerate(zip(ids, pieces, strict=True))]
    chunks = [b"data: " + e + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
    streamed = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                + b"".join(b"%x\r\n%b\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n")

    def response(body: bytes) -> bytes:
        return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                + str(len(body)).encode() + b"\r\n\r\n" + body)

    answers = {b"/v1/completions": response(completion), b"/v1/chat/completions": response(chat),
               b"/v1/models": response(models), b"/health": response(b"{}")}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].split(b"?")[0]
                length = 0
                for line in head.lower().split(b"\r\n"):
                    if line.startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length) if length else b""
                if delay_s:
                    await asyncio.sleep(delay_s)
                if path == b"/v1/completions" and (b'"stream": true' in body or b'"stream":true' in body):
                    writer.write(streamed)
                else:
                    writer.write(answers.get(path, answers[b"/health"]))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


def _relay_main(port: int, upstream_port: int) -> None:
    """A byte relay: what one more process on the path costs here, the floor for any proxy."""

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(1 << 16):
                writer.write(data)
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    async def serve() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


def _idle_penalty_main(model: str) -> None:
    """Times one fixed chat-template render back to back and after idle gaps, on this CPU.

    Virtual CPUs that idle lose their caches (and wake slowly): per-call work that takes
    50 us back to back can take several times that after the CPU slept. This prints that
    factor for the CPUs the servers run on, so the in-flight table can be read against it.
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    turn = [{"role": "user", "content": "."}, {"role": "assistant", "content": "."},
            {"role": "tool", "tool_call_id": "c", "content": "exit code 1\nFAILED test_3"}]

    def render() -> float:
        started = time.perf_counter()
        tok.apply_chat_template(turn, tools=TOOLS, tokenize=False, add_generation_prompt=True)
        return time.perf_counter() - started

    for _ in range(200):
        render()
    cells = []
    for gap_s, n in ((0.0, 50), (0.02, 40), (0.2, 15), (1.0, 5)):
        times = []
        for _ in range(n):
            time.sleep(gap_s)
            times.append(render())
        cells.append(f"{percentile(times, 0.5) * 1e6:.0f} us" + (f" after {gap_s * 1e3:g} ms idle" if gap_s
                                                                   else " back to back"))
    print("idle penalty on the servers' CPUs: one chat-template render takes " + ", ".join(cells), flush=True)


# --- load generation --------------------------------------------------------------------------------

def wait_http(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{url} did not come up")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command",
                                           "parameters": {"type": "object",
                                                          "properties": {"command": {"type": "string"}},
                                                          "required": ["command"]}}}]


async def run_level(url: str, kind: str, concurrency: int, total: int,
                    spread_s: float = 0.0) -> tuple[list[float], float]:
    """(latencies, calls/s) of `total` calls by `concurrency` workers; worker w starts w/C of `spread_s` late."""
    import aiohttp
    import orjson

    latencies: list[float] = []
    remaining = [total]

    async def worker(w: int, http: aiohttp.ClientSession) -> None:
        generation = 0
        messages: list[dict] = []
        await asyncio.sleep(spread_s * w / concurrency)
        while remaining[0] > 0:
            remaining[0] -= 1
            if not messages or len(messages) > 18:
                generation += 1
                messages = [{"role": "system", "content": "You are a coding agent."},
                            {"role": "user", "content": "Fix the failing test in tests/test_util.py."}]
            payload = orjson.dumps({"model": "tiny", "messages": messages, "tools": TOOLS, "max_tokens": 64})
            session = (f"/s/w{w}-{generation}" if kind.startswith("proxy") else
                       f"/sessions/w{w}-{generation}" if kind == "rllm-gateway" else "")
            target = url + session + "/v1/chat/completions"
            started = time.perf_counter()
            async with http.post(target, data=payload, headers={
                    "content-type": "application/json", "authorization": "Bearer sk-bench"}) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{kind}: HTTP {resp.status}: {raw[:300]!r}")
            latencies.append(time.perf_counter() - started)
            reply = orjson.loads(raw)["choices"][0]["message"]
            if not reply.get("tool_calls"):
                raise RuntimeError(f"{kind}: the tool call did not come back: {reply}")
            call = reply["tool_calls"][0]
            messages = [*messages, {"role": "assistant", "content": reply.get("content") or "",
                                    "tool_calls": reply["tool_calls"]},
                        {"role": "tool", "tool_call_id": call["id"], "content": f"exit code 1\nFAILED test_{len(messages)}"}]

    async def connect(http: aiohttp.ClientSession) -> None:
        async with http.get(url + HEALTH[kind]) as resp:
            await resp.read()

    # The load generator's heap holds transformers and torch: a full collection there stalls
    # every worker for 100+ ms. Freeze what exists so collections only scan new objects.
    gc.collect()
    gc.freeze()
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        # Open every connection first: the client's own first-connect cost is not the proxy's.
        await asyncio.gather(*(connect(http) for _ in range(concurrency)))
        started = time.perf_counter()
        await asyncio.gather(*(worker(w, http) for w in range(concurrency)))
        elapsed = time.perf_counter() - started
    return latencies, total / elapsed


HEALTH = {"direct": "/health", "relay": "/health", "proxy": "/health?deep=0", "litellm": "/health/liveliness",
          "rllm-gateway": "/health", "proxy-inproc": "/health?deep=0", "proxy-inproc-busy": "/health?deep=0"}
PEERS = ("litellm", "rllm-gateway")
GOAL_P50_X, GOAL_P99_X = 2.0, 5.0  # proxy's added p50 / p99 as multiples of the relay's added p50


def _keep_awake_main() -> None:
    """Spin at SCHED_IDLE priority: the CPU never halts, yet any other task preempts this at once.

    Stands in for the other work on a loaded training node, so that the servers' CPUs stay awake
    between calls as they would there (see the idle penalty line).
    """
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    while True:
        pass


def _in_process_main(port: int, upstream: str, model: str) -> None:
    """The proxy as a trainer would host it: `BackgroundProxy` on a thread of the trainer's process.

    SIGUSR1 makes the main thread run pure-Python work that holds the GIL (a driver doing data
    processing or reward code) until SIGUSR2; the proxy's thread then waits up to the switch
    interval (5 ms) for the GIL at every step of a call. Idle, the main thread only sleeps.
    """
    from rlkit.proxy import BackgroundProxy, ProxyConfig

    BackgroundProxy(ProxyConfig(model_path=model, upstreams=[upstream], port=port, served_model_name="tiny")).start()
    gc.collect()
    gc.freeze()
    busy = [False]
    signal.signal(signal.SIGUSR1, lambda *_: busy.__setitem__(0, True))
    signal.signal(signal.SIGUSR2, lambda *_: busy.__setitem__(0, False))
    while True:
        signal.pause()
        total = 0
        while busy[0]:
            for i in range(10_000):
                total += i * i


def pin_cpus(args: argparse.Namespace) -> tuple[set[int], list[str]]:
    """Load generator and stand-in upstream on CPU 0, the server under test on the others.

    On a shared 2-core machine the client and upstream otherwise run on the proxy's core and
    their CPU time shows as the proxy's latency; deployed, the proxy has cores of its own.
    Returns (CPUs for the server under test, the command prefix that starts a server there).
    """
    import shutil

    cpus = ALL_CPUS
    if args.no_pin or len(cpus) < 2 or not shutil.which("taskset"):
        return set(cpus), []
    server = cpus[1:]
    os.sched_setaffinity(0, {cpus[0]})  # children inherit it: the stand-in upstream too
    return set(server), ["taskset", "-c", ",".join(map(str, server))]


def start_litellm(binary: str, upstream: str, port: int, workdir: Path,
                  pin: list[str]) -> subprocess.Popen:
    config = workdir / "litellm.yaml"
    config.write_text("model_list:\n  - model_name: tiny\n    litellm_params:\n      model: hosted_vllm/tiny\n"
                      f"      api_base: {upstream}/v1\n      api_key: none\n"
                      "general_settings:\n  master_key: sk-bench\nlitellm_settings:\n  drop_params: true\n")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    with open(workdir / "litellm.log", "wb") as log:
        proc = subprocess.Popen([*pin, binary, "--config", str(config), "--port", str(port), "--num_workers", "1"],
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/health/liveliness", timeout=90)
        return proc
    except RuntimeError:
        proc.kill()
        tail = (workdir / "litellm.log").read_text(errors="replace")[-600:]
        raise SystemExit(f"litellm proxy server did not start; last log lines:\n{tail}") from None


def start_rllm_gateway(binary: str, upstream: str, port: int, workdir: Path, pin: list[str]) -> subprocess.Popen:
    """rllm-model-gateway in front of the stand-in upstream, traces in memory (its fastest store)."""
    with open(workdir / "rllm-gateway.log", "wb") as log:
        proc = subprocess.Popen([*pin, binary, "--host", "127.0.0.1", "--port", str(port), "--worker", upstream,
                                 "--store", "memory", "--log-level", "warning"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", timeout=90)
        return proc
    except RuntimeError:
        proc.kill()
        tail = (workdir / "rllm-gateway.log").read_text(errors="replace")[-600:]
        raise SystemExit(f"rllm-model-gateway did not start; last log lines:\n{tail}") from None


def peer_binary(args: argparse.Namespace, peer: str) -> str:
    """The peer's CLI: --litellm for litellm, else the bench venv's; a missing one fails the run."""
    name = {"litellm": "litellm", "rllm-gateway": "rllm-model-gateway"}[peer]
    path = Path(args.litellm) if peer == "litellm" and args.litellm else Path(args.peer_venv) / "bin" / name
    if not path.exists():
        raise SystemExit(f"peer {peer} requested but {path} does not exist; install the peers with:\n"
                         "    python3.12 -m venv .venv-bench && .venv-bench/bin/pip install '.[bench]'")
    return str(path)


def run_table(name: str, delay_ms: float, levels: tuple[tuple[int, int], ...], args: argparse.Namespace,
              model: Path, ids: list[int]) -> None:
    procs: list[subprocess.Popen] = []
    server_cpus, pin = pin_cpus(args)
    workdir = Path(tempfile.mkdtemp(prefix="rlkit-bench-"))
    try:
        if args.keep_cpus_awake:
            for cpu in sorted(server_cpus):
                procs.append(subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, __file__, "--spin-idle"],
                                              start_new_session=True))
        fake_port, proxy_port = free_port("127.0.0.1"), free_port("127.0.0.1")
        procs.append(subprocess.Popen([sys.executable, __file__, "--serve-fake", str(fake_port),
                                       "--ids", ",".join(map(str, ids)), "--generation-ms", str(delay_ms)],
                                      start_new_session=True))
        upstream = f"http://127.0.0.1:{fake_port}"
        wait_http(upstream + "/health")
        relay_port = free_port("127.0.0.1")
        procs.append(subprocess.Popen([*pin, sys.executable, __file__, "--serve-relay", str(relay_port),
                                       "--ids", str(fake_port)], start_new_session=True))
        wait_http(f"http://127.0.0.1:{relay_port}/health")
        with open(workdir / "proxy.log", "wb") as log:
            procs.append(subprocess.Popen(
                [*pin, sys.executable, "-m", "rlkit.cli.main", "proxy", "serve", "--model-path", str(model),
                 "--upstream", upstream, "--port", str(proxy_port), "--served-model-name", "tiny"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        wait_http(f"http://127.0.0.1:{proxy_port}/health")
        targets = {"direct": upstream, "relay": f"http://127.0.0.1:{relay_port}", "proxy": f"http://127.0.0.1:{proxy_port}"}
        in_process: subprocess.Popen | None = None
        if args.in_process:
            port = free_port("127.0.0.1")
            in_process = subprocess.Popen(
                [*pin, sys.executable, __file__, "--serve-in-process", str(port), "--upstream", upstream,
                 "--model", str(model)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            procs.append(in_process)
            wait_http(f"http://127.0.0.1:{port}/health")
            targets["proxy-inproc"] = targets["proxy-inproc-busy"] = f"http://127.0.0.1:{port}"
        for peer in args.peer_list:
            peer_port = free_port("127.0.0.1")
            start = start_litellm if peer == "litellm" else start_rllm_gateway
            procs.append(start(peer_binary(args, peer), upstream, peer_port, workdir, pin))
            targets[peer] = f"http://127.0.0.1:{peer_port}"

        # Warm-up: imports, pools, caches, and the proxy's start-up self-checks (its first 32
        # encodes and completion texts are also done the slow way and compared).
        for kind, url in targets.items():
            asyncio.run(run_level(url, kind, 32, 96 if delay_ms else 200))
        if delay_ms:
            subprocess.run([*pin, sys.executable, __file__, "--idle-penalty", str(model)], check=False)
        spread_s = delay_ms / 1e3
        pinned = f"; servers under test on CPUs {sorted(server_cpus)}" if pin else "; not pinned"
        if args.keep_cpus_awake:
            pinned += " (kept awake by SCHED_IDLE spinners)"
        print(f"\n{name}: upstream answers after {delay_ms:g} ms" + pinned
              + (f"; sessions start spread over {delay_ms:g} ms" if spread_s else "; closed loop, no think time"))
        print(f"{'C':>4} {'target':<17} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} {'+p99 ms':>8} "
              f"{'x relay':>8} {'req/s':>7}")
        for concurrency, total in levels:
            if str(concurrency) not in args.levels.split(","):
                continue
            total = max(concurrency, int(total * args.scale))
            floor: tuple[float, float] | None = None
            relay_added = 1e-3
            for kind, url in targets.items():
                busy = in_process is not None and kind == "proxy-inproc-busy"
                if busy:
                    in_process.send_signal(signal.SIGUSR1)
                try:
                    lat, rate = asyncio.run(run_level(url, kind, concurrency, total, spread_s))
                finally:
                    if busy:
                        in_process.send_signal(signal.SIGUSR2)
                p50, p99 = percentile(lat, 0.5) * 1e3, percentile(lat, 0.99) * 1e3
                verdict = ""
                if kind == "direct":
                    floor = (p50, p99)
                    added = "       -        -        -"
                else:
                    assert floor is not None
                    plus50, plus99 = p50 - floor[0], p99 - floor[1]
                    if kind == "relay":
                        relay_added = max(plus50, 1e-3)
                    ratio = plus50 / relay_added
                    added = f"{plus50:8.2f} {plus99:8.2f} {ratio:8.1f}"
                    if name == "in-flight" and kind == "proxy":
                        met = ratio <= GOAL_P50_X and plus99 / relay_added <= GOAL_P99_X
                        verdict = (f"  goal {'met' if met else 'NOT met'} (+p50 {ratio:.1f}x, +p99 "
                                   f"{plus99 / relay_added:.1f}x the relay's +p50)")
                print(f"{concurrency:>4} {kind:<17} {len(lat):>5} {p50:8.2f} {p99:8.2f} {added} {rate:7.0f}{verdict}",
                      flush=True)
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, 15)
            except ProcessLookupError:
                pass
            proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)  # logs of a failed start were printed already


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peers", default="", help="comma-separated peers measured in the same run: "
                        "litellm, rllm-gateway (installed by the bench extra, see above)")
    parser.add_argument("--peer-venv", default=str(REPO / ".venv-bench"), help="venv holding the peers' CLIs")
    parser.add_argument("--litellm", default=None, help="litellm CLI with the [proxy] extra (implies --peers litellm)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the request counts")
    parser.add_argument("--generation-ms", type=float, default=1000.0,
                        help="in-flight table: the stand-in upstream answers after this long, like a "
                        "generating vLLM (default 1000)")
    parser.add_argument("--only", choices=("in-flight", "ceiling"), default=None, help="run one table")
    parser.add_argument("--no-pin", action="store_true",
                        help="leave every process free to run on any CPU (default: load generator and "
                        "upstream on CPU 0, proxy, relay and litellm on the rest)")
    parser.add_argument("--levels", default="1,64,256", help="concurrency levels to run (default 1,64,256)")
    parser.add_argument("--serve-fake", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve-relay", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--in-process", action="store_true",
                        help="also measure the proxy hosted in a trainer-like process (BackgroundProxy), with "
                        "its main thread idle and busy with pure-Python work")
    parser.add_argument("--keep-cpus-awake", action="store_true",
                        help="run a SCHED_IDLE spinner on each server CPU, so it never halts between calls "
                        "(a loaded training node); every other task preempts the spinner at once")
    parser.add_argument("--spin-idle", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-in-process", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--upstream", default="", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="", help=argparse.SUPPRESS)
    parser.add_argument("--idle-penalty", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--ids", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.peer_list = [p for p in args.peers.split(",") if p] + (["litellm"] if args.litellm else [])
    unknown = set(args.peer_list) - set(PEERS)
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(sorted(unknown))}; known: {', '.join(PEERS)}")
    args.peer_list = list(dict.fromkeys(args.peer_list))
    if args.spin_idle:
        _keep_awake_main()
    if args.serve_in_process:
        _in_process_main(args.serve_in_process, args.upstream, args.model)
        return 0
    if args.idle_penalty:
        _idle_penalty_main(args.idle_penalty)
        return 0
    if args.serve_relay:
        _relay_main(args.serve_relay, int(args.ids))
        return 0
    if args.serve_fake:
        _fake_upstream_main(args.serve_fake, [int(x) for x in args.ids.split(",")], args.generation_ms / 1e3)
        return 0

    from transformers import AutoTokenizer

    from rlkit.embedded.tiny_model import build_tiny_model

    model = build_tiny_model(REPO / ".rlkit" / "cache" / "models" / "tiny-qwen3-coder", template="qwen3_coder")
    tok = AutoTokenizer.from_pretrained(str(model))
    ids = tok.encode(COMPLETION_TEXT, add_special_tokens=False) + [tok.eos_token_id]

    tables = [("in-flight", args.generation_ms, IN_FLIGHT_LEVELS), ("ceiling", 0.0, CEILING_LEVELS)]
    for name, delay_ms, levels in tables:
        if args.only in (None, name):
            run_table(name, delay_ms, levels, args, model, ids)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
