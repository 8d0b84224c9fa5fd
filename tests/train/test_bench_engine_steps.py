"""bench/engine_steps.py: vLLM's engine steps over a stretch of a benchmark, from its /metrics."""

from __future__ import annotations

import json
import urllib.request

from tests.fixtures.scripts import load_script

# vLLM's own exposition: one engine's histogram and counters (labels as vLLM writes them)
METRICS = """\
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="tiny"} 90.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="tiny"} 100.0
vllm:iteration_tokens_total_count{engine="0",model_name="tiny"} 100.0
vllm:iteration_tokens_total_sum{engine="0",model_name="tiny"} 460.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 180.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 1000.0
# HELP vllm:prompt_tokens_cached_total Number of cached prompt tokens (local + external).
# TYPE vllm:prompt_tokens_cached_total counter
vllm:prompt_tokens_cached_total{engine="0",model_name="tiny"} 720.0
"""


def test_counters_are_read_from_vllms_exposition_and_reported_a_trial() -> None:
    module = load_script("bench/engine_steps.py")
    assert module.parse_counters(METRICS) == {"steps": 100.0, "step_tokens": 460.0, "generated": 180.0,
                                              "prompt": 1000.0, "cached": 720.0}
    steps = module.EngineSteps("http://unused")
    steps.delta = module.parse_counters(METRICS)
    line = steps.report(per=2, engine_cpu_s=0.2)
    assert steps.tokens_a_step == 1.8
    assert line == ("50 engine steps a trial, 1.80 sampled tokens a step (90 a trial); prefill 140 tokens a trial "
                    "(72% of prompt tokens from the prefix cache); 2.00 ms of engine-core CPU a step")


def test_a_real_vllm_counts_one_step_a_token_for_one_sequence(vllm_server) -> None:
    """The counter names are this vLLM's: 24 tokens of one request are 24 sampled tokens in 24-25 steps."""
    module = load_script("bench/engine_steps.py")
    body = {"model": vllm_server.model_name, "prompt": list(range(50, 250)), "max_tokens": 24,
            "ignore_eos": True, "temperature": 1.0}
    request = urllib.request.Request(f"{vllm_server.base_url}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with module.EngineSteps(vllm_server.base_url) as steps, urllib.request.urlopen(request, timeout=120) as response:
        usage = json.loads(response.read())["usage"]
    assert usage["completion_tokens"] == 24
    assert steps.delta["generated"] == 24
    assert 24 <= steps.delta["steps"] <= 25  # the prefill's step samples the first token
    assert steps.delta["prompt"] == 200
    assert steps.tokens_a_step > 0.9
