"""How many forward steps vLLM's engine took for a stretch of a benchmark, and how full they were.

    with EngineSteps(server.base_url) as steps:
        run_the_step()
    print(steps.report(per=trials, engine_cpu_s=ledger.groups["vLLM engine core"]))

vLLM's Prometheus counters (`/metrics`, read with prometheus_client's parser) are read
before and after: `vllm:iteration_tokens_total` counts the engine's steps and the tokens
each carried, `vllm:generation_tokens_total` the sampled tokens, and the prompt counters
what the prefix cache spared. On a CPU, most of a step of the tiny policy is fixed work
(scheduling, input preparation, sampling and the output socket outweigh a 2-layer forward):
~2.2 ms of CPU for one or two sequences, ~3.7 ms for eight. So the engine core's CPU a trial
is its steps a trial times its CPU a step, and fuller steps (more trials asking at once) make
each token cheaper.
"""

from __future__ import annotations

import urllib.request
from typing import Self

from prometheus_client.parser import text_string_to_metric_families

# sample name -> what the report calls it (counters and a histogram's _count/_sum)
COUNTERS = {"vllm:iteration_tokens_total_count": "steps", "vllm:iteration_tokens_total_sum": "step_tokens",
            "vllm:generation_tokens_total": "generated", "vllm:prompt_tokens_total": "prompt",
            "vllm:prompt_tokens_cached_total": "cached"}


def parse_counters(text: str) -> dict[str, float]:
    """The counters this report reads, summed over their labels (engines, sources), from /metrics text."""
    totals = dict.fromkeys(COUNTERS.values(), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in COUNTERS:
                totals[COUNTERS[sample.name]] += sample.value
    return totals


def read_counters(base_url: str, timeout_s: float = 10.0) -> dict[str, float]:
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=timeout_s) as response:
        return parse_counters(response.read().decode())


class EngineSteps:
    """The engine's counters over a `with` block: `delta` holds what it did meanwhile."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.delta: dict[str, float] = {}

    def __enter__(self) -> Self:
        self._before = read_counters(self.base_url)
        return self

    def __exit__(self, *exc: object) -> None:
        after = read_counters(self.base_url)
        self.delta = {k: after[k] - self._before[k] for k in after}

    @property
    def tokens_a_step(self) -> float:
        """Sampled tokens a step: how many sequences a decoding step carried, on average."""
        return self.delta["generated"] / max(self.delta["steps"], 1.0)

    def report(self, per: int, engine_cpu_s: float | None = None) -> str:
        d = self.delta
        prefill = d["prompt"] - d["cached"]
        line = (f"{d['steps'] / per:.0f} engine steps a trial, {self.tokens_a_step:.2f} sampled tokens a step "
                f"({d['generated'] / per:.0f} a trial); prefill {prefill / per:.0f} tokens a trial "
                f"({d['cached'] / max(d['prompt'], 1.0):.0%} of prompt tokens from the prefix cache)")
        if engine_cpu_s is not None and d["steps"]:
            line += f"; {engine_cpu_s / d['steps'] * 1e3:.2f} ms of engine-core CPU a step"
        return line
