"""Added latency of the token-recording proxy, per call, at concurrency 1, 64 and 256.

    .venv/bin/python bench/proxy_latency.py [--litellm PATH_TO_litellm] [--scale 1.0] [--upstream-ms 0]

Everything runs on loopback against a FAST stand-in upstream (a raw asyncio server that
answers /v1/completions and /v1/chat/completions instantly with fixed token ids), so
the proxy's own cost shows. Each concurrency level measures, in the same run:
  direct   client -> upstream (the floor)
  proxy    client -> rlkit proxy -> upstream, agent-like sessions: every worker holds a
           session whose conversation grows by a tool turn per call (8 turns, then a new
           session), so both first-turn renders and incremental continuations are timed
  litellm  client -> litellm proxy server -> upstream chat endpoint (if --litellm works)
and prints p50/p99 latency, the added p50/p99 over the floor, and throughput.

With the default instant upstream, concurrency 64 and 256 form a closed loop with no
think time: they measure the proxy's throughput ceiling (added latency is queueing).
`--upstream-ms 1000` makes the upstream take as long as a generation does, so the same
concurrency is the number of sessions in flight, as in a rollout step.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMPLETION_TEXT = "I will run the tests now and then fix the failing assertion."
LEVELS = ((1, 300), (64, 1500), (256, 2000))  # (concurrency, requests)


# --- the stand-in upstream --------------------------------------------------------------------------

def _fake_upstream_main(port: int, ids: list[int], delay_s: float = 0.0) -> None:
    import json

    completion = json.dumps({"choices": [{"index": 0, "text": "", "token_ids": ids, "finish_reason": "stop",
                                          "logprobs": {"token_logprobs": [-0.25] * len(ids)}}]}).encode()
    chat = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "tiny",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": COMPLETION_TEXT}}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": len(ids), "total_tokens": 10 + len(ids)}}
                      ).encode()
    models = json.dumps({"object": "list", "data": [{"id": "tiny", "max_model_len": 32768}]}).encode()

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
                if length:
                    await reader.readexactly(length)
                if delay_s:
                    await asyncio.sleep(delay_s)
                writer.write(answers.get(path, answers[b"/health"]))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


# --- load generation --------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


async def run_level(url: str, kind: str, concurrency: int, total: int, prompt_ids: list[int]) -> tuple[list[float], float]:
    import aiohttp
    import orjson

    latencies: list[float] = []
    remaining = [total]

    async def worker(w: int, http: aiohttp.ClientSession) -> None:
        generation = 0
        messages: list[dict] = []
        while remaining[0] > 0:
            remaining[0] -= 1
            if kind == "direct":
                body = {"model": "tiny", "prompt": prompt_ids, "max_tokens": 64, "logprobs": 0,
                        "return_token_ids": True}
                target = url + "/v1/completions"
            else:
                if not messages or len(messages) > 18:
                    generation += 1
                    messages = [{"role": "system", "content": "You are a coding agent."},
                                {"role": "user", "content": "Fix the failing test in tests/test_util.py."}]
                body = {"model": "tiny", "messages": messages, "tools": TOOLS, "max_tokens": 64}
                target = (url + f"/s/w{w}-{generation}/v1/chat/completions" if kind == "proxy"
                          else url + "/v1/chat/completions")
            started = time.perf_counter()
            async with http.post(target, data=orjson.dumps(body), headers={
                    "content-type": "application/json", "authorization": "Bearer sk-bench"}) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{kind}: HTTP {resp.status}: {raw[:300]!r}")
            latencies.append(time.perf_counter() - started)
            if kind != "direct":
                reply = orjson.loads(raw)["choices"][0]["message"]
                messages = [*messages, {"role": "assistant", "content": reply.get("content") or ""},
                            {"role": "user", "content": f"exit code 1\nFAILED test_{len(messages)}"}]

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        started = time.perf_counter()
        await asyncio.gather(*(worker(w, http) for w in range(concurrency)))
        elapsed = time.perf_counter() - started
    return latencies, total / elapsed


def start_litellm(binary: str, upstream: str, port: int, workdir: Path) -> subprocess.Popen | None:
    config = workdir / "litellm.yaml"
    config.write_text("model_list:\n  - model_name: tiny\n    litellm_params:\n      model: hosted_vllm/tiny\n"
                      f"      api_base: {upstream}/v1\n      api_key: none\n"
                      "general_settings:\n  master_key: sk-bench\nlitellm_settings:\n  drop_params: true\n")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    with open(workdir / "litellm.log", "wb") as log:
        proc = subprocess.Popen([binary, "--config", str(config), "--port", str(port), "--num_workers", "1"],
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/health/liveliness", timeout=90)
        return proc
    except RuntimeError:
        proc.kill()
        tail = (workdir / "litellm.log").read_text(errors="replace")[-600:]
        print(f"litellm proxy server did not start here; last log lines:\n{tail}")
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--litellm", default=None, help="litellm CLI with the [proxy] extra installed")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the request counts")
    parser.add_argument("--upstream-ms", type=float, default=0.0,
                        help="the stand-in upstream answers after this long, like a generating vLLM "
                        "(default 0: an instant upstream, so the proxy's own CPU cost and its "
                        "throughput ceiling show)")
    parser.add_argument("--serve-fake", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--ids", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        _fake_upstream_main(args.serve_fake, [int(x) for x in args.ids.split(",")], args.upstream_ms / 1e3)
        return 0

    from transformers import AutoTokenizer

    from rlkit.embedded.tiny_model import build_tiny_model

    model = build_tiny_model(REPO / ".rlkit" / "cache" / "models" / "tiny-qwen3-coder", template="qwen3_coder")
    tok = AutoTokenizer.from_pretrained(str(model))
    ids = tok.encode(COMPLETION_TEXT, add_special_tokens=False) + [tok.eos_token_id]
    prompt_ids = tok.apply_chat_template([{"role": "user", "content": "Fix the failing test."}], tools=TOOLS,
                                         tokenize=True, add_generation_prompt=True)
    prompt_ids = list(prompt_ids["input_ids"] if isinstance(prompt_ids, dict) else prompt_ids)

    procs: list[subprocess.Popen] = []
    workdir = Path(tempfile.mkdtemp(prefix="rlkit-bench-"))
    try:
        fake_port, proxy_port = free_port(), free_port()
        procs.append(subprocess.Popen([sys.executable, __file__, "--serve-fake", str(fake_port),
                                       "--ids", ",".join(map(str, ids)), "--upstream-ms", str(args.upstream_ms)],
                                      start_new_session=True))
        upstream = f"http://127.0.0.1:{fake_port}"
        wait_http(upstream + "/health")
        with open(workdir / "proxy.log", "wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "rlkit.cli.main", "proxy", "serve", "--model-path", str(model),
                 "--upstream", upstream, "--port", str(proxy_port), "--served-model-name", "tiny"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        wait_http(f"http://127.0.0.1:{proxy_port}/health")
        targets = {"direct": upstream, "proxy": f"http://127.0.0.1:{proxy_port}"}
        if args.litellm:
            litellm_port = free_port()
            proc = start_litellm(args.litellm, upstream, litellm_port, workdir)
            if proc is not None:
                procs.append(proc)
                targets["litellm"] = f"http://127.0.0.1:{litellm_port}"

        for kind, url in targets.items():  # warm-up: imports, pools, caches
            asyncio.run(run_level(url, kind, 4, 40, prompt_ids))
        print(f"upstream answers after {args.upstream_ms:g} ms")
        print(f"{'C':>4} {'target':<8} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} {'+p99 ms':>8} {'req/s':>7}")
        for concurrency, total in LEVELS:
            total = max(concurrency, int(total * args.scale))
            floor: tuple[float, float] | None = None
            for kind, url in targets.items():
                lat, rate = asyncio.run(run_level(url, kind, concurrency, total, prompt_ids))
                p50, p99 = percentile(lat, 0.5) * 1e3, percentile(lat, 0.99) * 1e3
                if kind == "direct":
                    floor = (p50, p99)
                    added = "       -        -"
                else:
                    assert floor is not None
                    added = f"{p50 - floor[0]:8.2f} {p99 - floor[1]:8.2f}"
                print(f"{concurrency:>4} {kind:<8} {len(lat):>5} {p50:8.2f} {p99:8.2f} {added} {rate:7.0f}",
                      flush=True)
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, 15)
            except ProcessLookupError:
                pass
            proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
